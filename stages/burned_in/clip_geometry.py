"""Where a film's overlays lie in a clip's frames (issue 28, issue 35): the film pass finds
subtitle bands, logos and the picture's middle in source pixels; a clip shows the window
`region` (x, y, w, h, stored pixels) of the film, fitted to its size by `clips.resize`
(stages/clips.py `fit_frame`). These map one into the other."""

from __future__ import annotations

from collections.abc import Sequence

Box4 = tuple[int, int, int, int]  # x, y, w, h


def picture_columns(
    picture: Box4, region: Box4, size: tuple[int, int], resize: str
) -> tuple[float, float]:
    """The film picture's (x, y, w, h) middle column and width in the clip's frames (`size`:
    height, width) cut from the window `region` (x, y, w, h) and fitted by `resize`
    (stages/clips.py `fit_frame`: center_crop's region has the clip's shape as shown, so its
    columns scale by the widths, anamorphic pixels included; pad's are taken as square, as
    `clip_rows` takes them)."""
    x, _, w, h = region
    height, width = size
    scale = min(width / w, height / h) if resize == "pad" else width / w
    middle = picture[0] + picture[2] / 2
    return width / 2 + (middle - (x + w / 2)) * scale, picture[2] * scale


def clip_rows(
    band: Sequence[int], region: Box4, size: tuple[int, int], resize: str
) -> tuple[int, int] | None:
    """A source band's rows (y0, y1) in the clip's frames, a quarter of its height wider on
    each side; None when the clip's window does not reach it."""
    _, y, w, h = region
    height, width = size
    if resize == "pad":
        scale = min(width / w, height / h)
        top = (height - round(h * scale)) / 2
    else:
        scale, top = height / h, 0.0
    margin = (band[1] - band[0]) / 4
    y0 = int(top + (band[0] - margin - y) * scale)
    y1 = int(top + (band[1] + margin - y) * scale + 1)
    y0, y1 = max(0, y0), min(height, y1)
    return (y0, y1) if y1 - y0 >= 4 else None


def logo_share(logos: Sequence[Sequence[int]], region: Box4) -> float:
    """The largest share of a logo box (x, y, w, h) that lies inside the window `region`."""
    x, y, w, h = region
    best = 0.0
    for lx, ly, lw, lh in logos:
        inner_w = max(0, min(lx + lw, x + w) - max(lx, x))
        inner_h = max(0, min(ly + lh, y + h) - max(ly, y))
        best = max(best, inner_w * inner_h / max(1, lw * lh))
    return best
