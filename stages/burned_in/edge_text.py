"""Rare overlay text at the picture's top and bottom edges, per clip (issue 35).

The film pass finds subtitle bands: rows where text comes back in several different pictures.
A translator's note, a sign's caption or a one-off line comes once or twice in a film, too
rarely to make a band, and the whole-frame `text` rule sees the frame shrunk to 160x256, where
such a line is 3 to 5 pixels tall: it read 0.0000. So each clip's own top and bottom edges
are looked at, at the size their text has: the clip pass stacks the top `edge_top` and the
bottom `edge_bottom` of the clip's frames `edge_frames` (its first and last: a note on screen
for a clip's length, 2 s, anywhere in the clip is on one of them) into one picture, with
black between and around the two (the detector misses a line that touches its input's
border), and runs the text detector once on it.

A frame that is four fifths black is a card (a title, the credits): text on it is the
picture's own, the whole-frame `text` rule's to judge, and it is left out here.

What counts is an overlay's line (overlays_text.py `subtitle_like`): at least as wide as
tall, and centred as the film pass's band lines are (on the film's picture, within
`overlays.centre` of its width; the caller places that picture's middle in the clip) or
holding still between the two frames (IoU 0.9: the overlay's own timing, not the picture's).
The measure is the largest share of one zone of one frame that such lines cover; the clip pass
stores the larger of it and the band's measure as `overlay_subtitle_area`, so the `subtitle`
rule and its threshold hold for both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stages.burned_in.overlays_text import Box, subtitle_like, text_lines
from stages.burned_in.text_detector import TextDetector

BORDER = 16  # grey level of the padding between and around the zones (near black)
GAP = 8  # rows of padding between the zones: a line touching its input's border is missed
CARD_GREY = 24  # a frame with at least CARD_SHARE of its pixels at most this grey is a card
CARD_SHARE = 0.8  # (text on black: the sample's credits are 89 % black)


def edge_zones(height: int, top: float, bottom: float) -> list[tuple[int, int]]:
    """The rows (y0, y1) of a clip frame's top and bottom zones (empty ones left out)."""
    zones = [(0, int(height * top)), (height - int(height * bottom), height)]
    return [(y0, y1) for y0, y1 in zones if y1 - y0 >= 4]


def edge_text_share(
    detector: TextDetector,
    frames: Sequence[np.ndarray],
    zones: Sequence[tuple[int, int]],
    scale: float,
    middle: tuple[float, float],
) -> float:
    """The largest share of one zone of one frame covered by subtitle-like lines (grey frames,
    all one size, cards left out; `scale`: clip pixels to the detector's; `middle`: the column a
    centred line's middle lies on, and how far from it, `subtitle_like`)."""
    frames = [frame for frame in frames if (frame[::2, ::2] <= CARD_GREY).mean() < CARD_SHARE]
    if not zones or not frames:
        return 0.0
    width = frames[0].shape[1]
    gap = GAP
    layout, row = [], gap  # where each (frame, zone) lies in the stacked picture
    for _ in frames:
        for y0, y1 in zones:
            layout.append((row, row + y1 - y0))
            row += y1 - y0 + gap
    stacked = np.full((row, width), BORDER, np.uint8)
    for k, (frame, (y0, y1)) in enumerate((frame, zone) for frame in frames for zone in zones):
        top, bottom = layout[k]
        stacked[top:bottom] = frame[y0:y1]
    lines = text_lines(detector, stacked, scale)
    per_part: list[list[Box]] = [
        [line for line in lines if top <= (line[1] + line[3]) / 2 < bottom]
        for top, bottom in layout
    ]
    best = 0.0
    for k, (top, bottom) in enumerate(layout):
        zone = k % len(zones)
        # the same zone of the other frames, in this part's rows
        others = [
            (x0, y0 - layout[j][0] + top, x1, y1 - layout[j][0] + top)
            for j in range(zone, len(layout), len(zones))
            if j != k
            for x0, y0, x1, y1 in per_part[j]
        ]
        area = sum(
            (x1 - x0) * max(0, min(y1, bottom) - max(y0, top))
            for x0, y0, x1, y1 in per_part[k]
            if subtitle_like((x0, y0, x1, y1), middle, others)
        )
        best = max(best, area / ((bottom - top) * width))
    return best
