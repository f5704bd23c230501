"""A web player's interface in a screen capture (issue 35): its control bar, progress line and
time codes along the bottom (or a title bar along the top), shown while the mouse moves and
hidden after. They come and go, so the border crop keeps them (it crops only what is black in
every frame), the logo pass does not hold them (they are in too few views) and they are no
subtitle band (off-centre, or no text at all).

What gives them away is the progress line and the bar's panel: a long straight horizontal edge,
across most of the picture's width, at the same row in pictures of different shots. Pictures
seldom have one (a horizon or a floor is not at the same row in two different shots, and a
shot seen twice is one view). The rows from the highest such edge of the bottom zone (less a
margin for the controls and time codes above it) to the picture's bottom are cropped away
(for the top zone, from the top to the lowest edge and a margin): the clips keep the picture
and lose the interface. The film's overlay record names the rows (`player_rows`), and the
console line says `player bar y 980-1080 cropped`.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

RULE_WIDTH = 480  # pictures are looked at this wide (a rule is a row, whatever the size)
EDGE_ROWS = 3  # rows at the crop box's own edges, left out (encoders blur them)


def rule_rows(picture: np.ndarray, zone: float, step: int, width_share: float) -> list[int]:
    """Rows (in the picture's pixels) of the top and bottom `zone` of a grey picture where the
    grey level steps by at least `step` between one row and the next across at least
    `width_share` of the columns: straight horizontal edges across the picture."""
    height, width = picture.shape
    scale = min(1.0, RULE_WIDTH / width)
    small = cv2.resize(picture, (max(1, int(width * scale)), height), interpolation=cv2.INTER_AREA)
    steps = np.abs(np.diff(small.astype(np.int16), axis=0)) >= step
    wide = np.flatnonzero(steps.mean(axis=1) >= width_share)  # row r: between r and r + 1
    reach = int(height * zone)
    return [
        int(r) + 1
        for r in wide
        if EDGE_ROWS <= r < reach or height - reach <= r < height - EDGE_ROWS
    ]


def player_rows(
    pictures: Sequence[np.ndarray],
    views: list[list[int]],
    zone: float,
    step: int,
    width_share: float,
    min_views: int,
    margin: float,
) -> list[list[int]]:
    """Rows [y0, y1) of the pictures' (crop box's) top or bottom that a player's interface
    covers: a rule at the same row (within a pixel) in pictures of at least `min_views` views,
    widened by `margin` of the height towards the picture's middle and run to its edge."""
    if not pictures:
        return []
    height = pictures[0].shape[0]
    view_of = {index: v for v, members in enumerate(views) for index in members}
    seen: dict[int, set[int]] = {}
    for index, picture in enumerate(pictures):
        for row in rule_rows(picture, zone, step, width_share):
            seen.setdefault(row, set()).add(view_of[index])
    steady = [
        row
        for row in seen
        if len(seen[row] | seen.get(row - 1, set()) | seen.get(row + 1, set())) >= min_views
    ]
    pad = int(round(margin * height))
    found = []
    low = [row for row in steady if row >= height / 2]
    high = [row for row in steady if row < height / 2]
    if high:
        found.append([0, min(height, max(high) + pad)])
    if low:
        found.append([max(0, min(low) - pad), height])
    return found
