"""Logos and watermarks (issue 28; the few-views and gate-corner rules, issue 35): edges that stay
put across the film's views while the picture changes behind them. The film pass
(stages/burned_in/overlays.py `FilmOverlays`) calls `persistent_edges` on its sampled pictures;
docs/quality.md ("Overlays") has the rules and figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np

from stages.burned_in.overlays_text import Box

if TYPE_CHECKING:  # the settings' type only: stages/burned_in/overlays.py imports this module
    from stages.burned_in.overlays import OverlayConfig

# the overlay passes' black: a sampled frame whose 98th-percentile grey is at most this shows no
# picture (overlays.py), and a corner this dark in every view is a film gate's black
BLACK_PEAK = 24
LOGO_WIDTH = 480  # the persistent-edge map is made at this width (the crop box's)
SAME_THUMBNAIL = 10  # two pictures are one view when their 32x18 thumbnails differ less (grey)
SAME_HISTOGRAM = 0.25  # ... or their 32-bin grey histograms differ less (L1 of shares)


def views(pictures: Sequence[np.ndarray]) -> list[list[int]]:
    """The sampled pictures grouped into views: a picture joins the first view whose first
    picture it resembles (32x18 thumbnails within 10 grey levels on average, or grey-level
    histograms within 0.25 of each other: a pan, new drawings of one shot, the same shot sampled
    again later), else it starts one. Marks drawn over the film stay put across views; a
    background stays put only within its own."""
    firsts: list[tuple[np.ndarray, np.ndarray]] = []
    groups: list[list[int]] = []
    for index, picture in enumerate(pictures):
        small = cv2.resize(picture, (32, 18), interpolation=cv2.INTER_AREA).astype(np.int16)
        histogram = (
            np.bincount(picture[::4, ::4].ravel() // 8, minlength=32) / picture[::4, ::4].size
        )
        for (thumbnail, counts), group in zip(firsts, groups):
            if (
                np.abs(small - thumbnail).mean() <= SAME_THUMBNAIL
                or np.abs(histogram - counts).sum() <= SAME_HISTOGRAM
            ):
                group.append(index)
                break
        else:
            firsts.append((small, histogram))
            groups.append([index])
    return groups


def persistent_edges(pictures: Sequence[np.ndarray], config: OverlayConfig) -> list[Box]:
    """Boxes (crop box pixels) of edges that stay put across views: each picture's edges
    (Canny, at LOGO_WIDTH, grown by a pixel); each view votes for the pixels that are edges in
    half of its pictures; a pixel voted for by `logo_persistence` of the views is a logo's, and
    nearby such pixels are joined into one box, kept when it lies along the picture's edges.
    Picture content changes from view to view, so only what is drawn over them stays. No box
    without `logo_min_shots` views."""
    runs = views(pictures)
    if len(runs) < config.logo_few_views:
        return []
    height, width = pictures[0].shape
    scale = min(1.0, LOGO_WIDTH / width)
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    share, low, high = _view_votes(pictures, runs, size)
    few = len(runs) < config.logo_min_shots
    steady = (share >= config.logo_persistence).astype(np.uint8)
    steady[:3], steady[-3:], steady[:, :3], steady[:, -3:] = 0, 0, 0, 0  # the crop's own edge
    joined = cv2.dilate(steady, np.ones((9, 9), np.uint8))
    count, labels, stats, _ = cv2.connectedComponentsWithStats(joined, connectivity=8)
    boxes = []
    for label in range(1, count):
        x, y, w, h, _ = stats[label]
        mask = labels == label
        edges = int(steady[mask].sum())
        if edges < 12 or w > size[0] / 2 or h > size[1] / 2:
            continue  # a speck, or a line across the picture (structure, not a mark)
        if not _at_the_edge((x, y, x + w, y + h), size, config.logo_margin):
            continue  # marks are put where they hide the least: in corners
        inside, ring = mask & steady.astype(bool), _ring(mask)
        if _contrast(share, inside, ring) < config.logo_contrast:
            continue  # its surroundings stay put nearly as well: a still background
        opaque = float(np.median((high - low)[inside])) <= config.logo_steady_grey
        if few and not opaque:
            continue  # too few views to trust edges alone, and its pixels change: not opaque
        if not opaque and _by_chance(share, inside, ring, len(runs)) > config.logo_chance:
            continue  # a busy picture keeps edges there in as many views by chance
        if _gate_corner((x, y, x + w, y + h), size, high):
            continue  # the film gate's rounded corner: part of the transfer, not a mark
        boxes.append(
            (
                max(0, int((x + 2) / scale) - 2),
                max(0, int((y + 2) / scale) - 2),
                min(width, int((x + w - 2) / scale) + 2),
                min(height, int((y + h - 2) / scale) + 2),
            )
        )
    return boxes


def _view_votes(
    pictures: Sequence[np.ndarray], runs: list[list[int]], size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pixel at `size` (w, h): the share of the views `runs` it is an edge in (an edge in
    half of a view's pictures: Canny, grown by a pixel), and the darkest and the brightest of
    the views' mean grey."""
    grow = np.ones((3, 3), np.uint8)
    share = np.zeros(size[::-1], np.float32)  # per pixel: the share of views it is an edge in
    low = np.full(size[::-1], 255.0, np.float32)  # per pixel: the darkest and brightest view mean
    high = np.zeros(size[::-1], np.float32)
    for run in runs:
        counts = np.zeros(size[::-1], np.uint16)
        mean = np.zeros(size[::-1], np.float32)
        for index in run:
            small = cv2.resize(pictures[index], size, interpolation=cv2.INTER_AREA)
            counts += cv2.dilate(cv2.Canny(small, 40, 120), grow) > 0
            mean += small / len(run)
        share += (counts * 2 >= len(run)) / len(runs)
        np.minimum(low, mean, out=low)
        np.maximum(high, mean, out=high)
    return share, low, high


def _gate_corner(box: Box, size: tuple[int, int], brightest: np.ndarray) -> bool:
    """Whether the box is a film gate's corner (or another mark of the transfer at a corner):
    it reaches a corner of the picture, and the corner's own pixels are dark in every view (the
    gate's black beyond the arc). A distributor's mark sits inside the picture, some way from
    its edges, over picture that changes."""
    width, height = size
    x0, y0, x1, y1 = box
    reach = 4 + max(width, height) // 60  # within a few pixels of the edge (the crop's own edge)
    left, right = x0 <= reach, x1 >= width - reach
    top, bottom = y0 <= reach, y1 >= height - reach
    if not ((left or right) and (top or bottom)):
        return False
    side = 3  # the corner's own pixels: inside the gate's black for an arc of 10 pixels or more
    corner_x = slice(0, side) if left else slice(width - side, width)
    corner_y = slice(0, side) if top else slice(height - side, height)
    return float(brightest[corner_y, corner_x].max()) <= BLACK_PEAK


def _contrast(share: np.ndarray, inside: np.ndarray, ring: np.ndarray) -> float:
    """How much better a candidate's edges stay put than its surroundings': the mean share of
    views of its steady pixels less the mean share of the ring 15 pixels around it. A mark
    drawn over the film stands out of a picture that changes behind it; an edge of a background
    that a few views share is surrounded by edges that most of those views share too."""
    return float(share[inside].mean() - share[ring].mean()) if ring.any() else 0.0


def _by_chance(share: np.ndarray, inside: np.ndarray, ring: np.ndarray, views: int) -> float:
    """The chance that a pixel as busy as the candidate's surroundings is an edge in as many of
    the views as the candidate's median pixel is: the binomial tail, each view an independent
    draw at the ring's share. With few views the share moves in coarse steps (4 of 6 views is
    0.67), so a busy picture's chance blobs clear `logo_contrast`: on real short pieces of 5-7
    views such blobs came out between 0.002 and 0.02, the real marks at 1e-5 and below."""
    busy = float(share[ring].mean()) if ring.any() else 1.0
    # each pixel's count of views, as a whole number (the share sums float32 steps of
    # 1/views); the lower median, so that a count halfway between two is not rounded up
    counts = np.sort(np.rint(share[inside] * views).astype(int))
    votes = int(counts[(len(counts) - 1) // 2])
    return sum(
        math.comb(views, k) * busy**k * (1 - busy) ** (views - k) for k in range(votes, views + 1)
    )


def _ring(mask: np.ndarray) -> np.ndarray:
    """The pixels within 15 of the candidate, outside it."""
    return cv2.dilate(mask.astype(np.uint8), np.ones((31, 31), np.uint8)).astype(bool) & ~mask


def _at_the_edge(box: Box, size: tuple[int, int], margin: float) -> bool:
    """Whether the box lies in a corner: wholly within `margin` of the picture's width of its
    left or right edge, and within `margin` of its height of its top or bottom edge."""
    width, height = size
    x0, y0, x1, y1 = box
    beside = x1 <= margin * width or x0 >= (1 - margin) * width
    return beside and (y1 <= margin * height or y0 >= (1 - margin) * height)
