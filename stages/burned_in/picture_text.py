"""Text over the middle of the picture (issue 35): staff credits over an opening, lyric lines
of an edit, a sign's caption beside it.

The quality stage's whole-frame `text` rule sees each clip shrunk to 160x256. There a credit
line over a moving picture is 3 to 4 pixels tall and reads 0.0, while at 352x512 the same
frames read 0.005 to 0.045 (docs/quality.md). Looking that closely at every clip costs 5 to 7
times the rule's CPU, and the narrow look gives no hint of where to look closer: its highest
text probability on those frames is exactly 0.0.

So the film pass looks first, at the frames it samples anyway (one a second, at most 48), and
at the scale it reads subtitle bands at (where the smallest subtitle is 9 detector pixels tall),
or at the close look's 352 rows when that is smaller (a 1080-line picture): besides the top and
bottom zones it reads for bands, it reads the rows between them. A sample
whose picture holds text lines, no blob, outside the film's subtitle bands and logos, covering
`overlays.picture_text_share` of it, marks a stretch of the film, from the sample before it to
the sample after it (text that shows on one sample may have begun just after the one before).
The quality stage then looks closely only at the clips that overlap a stretch
(stages/quality/stage.py). An opening's credits or a lyric edit last many samples; a clean film
has few stretches or none, and pays for the middle rows of its samples alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from stages.burned_in.overlays_text import Box, inner_area, rows_overlap

# A blob of text pixels thicker than this many detector pixels both ways, and less than
# LINE_ELONGATION times as long as it is thick, is no line of text: the close look's network
# marks some plain solid shapes, a dark plate on a wall (69x114 at 352 rows), as one blob.
# A line is long (a lyric's line over two words is 3 to 4 times as long as tall), or thin.
THICKEST_BLOB = 32
LINE_ELONGATION = 2.0


def is_blob(width: float, height: float, scale: float = 1.0) -> bool:
    """Whether a box `width` x `height` (pixels at `scale` of the detector's) is a blob."""
    thin, long = sorted((width * scale, height * scale))
    return thin > THICKEST_BLOB and long < LINE_ELONGATION * thin


def without_blobs(mask: np.ndarray) -> np.ndarray:
    """`mask` (text pixels at the detector's size) less its blobs (`is_blob`)."""
    _, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8))
    blob = np.array(
        [is_blob(w, h) for w, h in stats[:, [cv2.CC_STAT_WIDTH, cv2.CC_STAT_HEIGHT]]], bool
    )
    blob[0] = False  # the background
    return mask & ~blob[labels] if blob.any() else mask


def picture_text_share(
    lines: Sequence[tuple[Box, str, float]],
    shape: tuple[int, int],
    bands: Sequence[tuple[int, int]],
    logos: Sequence[Box],
) -> float:
    """The share of a picture (`shape`: height, width) covered by its text `lines` (boxes in
    its pixels, each with its zone's name and the scale it was found at) that are no blob and
    lie in no subtitle band (rows (y0, y1); `rows_overlap`, the band's own rule) and on no logo
    (x0, y0, x1, y1). Where boxes overlap (a line in the rows a zone and the middle share, found
    by both) their pixels count once."""
    height, width = shape
    covered = np.zeros(shape, bool)
    for (x0, y0, x1, y1), _, scale in lines:
        if (
            not is_blob(x1 - x0, y1 - y0, scale)
            and not any(rows_overlap((x0, y0, x1, y1), band) > 0.5 for band in bands)
            and not _on_logo((x0, y0, x1, y1), logos)
        ):
            covered[y0:y1, x0:x1] = True
    return float(covered.sum()) / (height * width)


def text_spans(
    shares: Sequence[float], times: Sequence[float], end: float, least: float
) -> list[list[float]]:
    """The stretches [start, stop] (seconds) of the film around each sample whose share is at
    least `least`: from the sample before it (the film's start for the first) to the sample
    after it (`end`, the film's end, for the last); stretches that meet are one."""
    spans: list[list[float]] = []
    for k, share in enumerate(shares):
        if share < least:
            continue
        start = times[k - 1] if k > 0 else 0.0
        stop = times[k + 1] if k + 1 < len(times) else max(end, times[k])
        if spans and start <= spans[-1][1]:
            spans[-1][1] = stop
        else:
            spans.append([start, stop])
    return [[round(start, 3), round(stop, 3)] for start, stop in spans]


def overlaps(spans: Sequence[Sequence[float]], start: float, stop: float) -> bool:
    """Whether the time range [start, stop) meets one of `spans`."""
    return any(start < span[1] and span[0] < stop for span in spans)


def _on_logo(box: Box, logos: Sequence[Box]) -> bool:
    """More than half of the line's box on a logo's box (a logo's lettering)."""
    area = max(1, (box[2] - box[0]) * (box[3] - box[1]))
    return any(inner_area(box, logo) / area > 0.5 for logo in logos)
