"""Dark strips at the edges of a standard-definition picture that are not black bars.

A DVD or a broadcast capture stores 720 columns, but the picture it was made from is 702 to 711
columns wide (704 by the usual rule): the columns outside it are blank, or half blank where
analog blanking ramps up into the picture, and often of different widths on each side. The first
or last stored row may be half a line (half black, half picture), and a VHS capture's last rows
carry the head-switching noise. The border crop (stages/crop.py) keeps all of these: a ramp's
greys are above its threshold, a half line and noise have picture-bright pixels, and strips under
`crop.min_bar` pixels are ignored on purpose.

The rule, per side, on the film's sampled frames, inside the box the bar rule found: the `depth`
lines at the edge (the zone) are judged against the `REFERENCE` lines just inside them (the
picture). A line of the zone is **not picture** when it is dim (its mean brightness under `DIM`
of the reference's: a blank or half-blank column, a half line) or unlike its inner neighbour (it
differs from it, mean absolute difference, by more than `UNLIKE` grey levels past the largest
such step between two lines of the reference: a ramp's step, noise, the edge of a grey strip;
a picture with hard edges along the side has large steps of its own). A frame's strip
runs from the edge to the innermost such line. A frame whose reference is dark (mean grey under
`LIGHT`: a night scene, a fade) does not vote, so a dark scene's dark edge is never taken for a
strip. On each side the voting frames are grouped into views of that side: frames whose
reference (its brightness along the side, in `PROFILE` pieces) is alike within `SAME_VIEW` grey
levels are one view. A view's strip is the widest that `AGREE` of its frames see, the film's the
widest that `AGREE` of its views see, and there must be `MIN_VIEWS` of them. A strip stays put
while the picture beside it changes; picture that is dark or edged at the frame's side (a door
frame at the edge of a still shot) stays only while the picture beside it does.

A film whose picture never changes beside an edge (one still shot) has one view of it. It still
loses the part of a strip, from the edge on, whose blank lines show what picture beside a bright
reference does not: lines of one grey (standard deviation along the line at most `FLAT`: black
or a ramp's grey), a half line (`HALF` more of its length black, grey at most `BLACK`, than any
line of the reference), or noise (a line that changes from the sampled frame before by
`UNLIKE` grey levels more than any line of the reference does) in `AGREE` of its voting frames.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

REFERENCE = 16  # lines just inside the zone, whose brightness and texture stand for the picture
LIGHT = 40.0  # mean grey (0-255) the reference must reach for a frame to vote on that side
DIM = 0.7  # a line under this share of the reference's brightness is blank or half blank
UNLIKE = 8.0  # grey levels past the picture's largest line-to-line step: a line so unlike is none
AGREE = 0.8  # share of the voting frames (of a view) and views (of the film) that see a strip
MIN_VIEWS = 2  # views that must vote on a side for a strip to be found there
PROFILE, SAME_VIEW = 16, 10.0  # a side's reference seen as 16 means; alike within 10 levels
FLAT = 2.0  # a line whose grey varies by at most this (standard deviation) along it is flat
BLACK, HALF = 16, 0.25  # a half line: a quarter more of it at most this grey (full range)

Edges = tuple[int, int, int, int]  # top, bottom (exclusive), left, right (exclusive)


def strip_widths(
    luma_frames: Sequence[np.ndarray], edges: Edges, columns: int, rows: int
) -> tuple[int, int, int, int]:
    """Widths (stored pixels) of the dark strips inside `edges` on its left, right, top and
    bottom, at most `columns` (sides) and `rows` (top and bottom); 0 where there is none."""
    top, bottom, left, right = edges
    boxes = [f[top:bottom, left:right] for f in luma_frames]
    sides = (
        (lambda b: b.T, columns),  # left: the box's columns, the edge first
        (lambda b: b.T[::-1], columns),  # right
        (lambda b: b, rows),  # top: its rows
        (lambda b: b[::-1], rows),  # bottom
    )
    left, right, top, bottom = (
        _film_strip(_side_votes([lines(b) for b in boxes], depth), depth) for lines, depth in sides
    )
    return left, right, top, bottom


def _side_votes(frames_lines: list[np.ndarray], depth: int) -> list[_Vote | None]:
    """Each frame's vote on one side (its lines ordered from the edge inward), the frame before
    it in the sample at hand to tell noise."""
    before = [None, *frames_lines[:-1]]
    return [_frame_strip(lines, depth, prior) for lines, prior in zip(frames_lines, before)]


class _Vote(NamedTuple):
    """One frame's look at one side: its strip, the part of it from the edge on that one view
    can tell (`sure`), and the profile of its reference (which view of the side it is)."""

    strip: int
    sure: int
    profile: np.ndarray


def _frame_strip(lines: np.ndarray, depth: int, before: np.ndarray | None) -> _Vote | None:
    """One frame's vote on one side, `lines` ordered from the edge inward (`before`: the sampled
    frame before's); None when the reference is too dark to tell (or the box too small to hold
    the zone and the reference)."""
    if depth <= 0 or lines.shape[0] < depth + REFERENCE + 1:
        return None
    near = lines[: depth + REFERENCE].astype(np.float32)
    means = near.mean(axis=1)
    reference = float(means[depth:].mean())
    if reference < LIGHT:
        return None
    steps = np.abs(near[1:] - near[:-1]).mean(axis=1)  # steps[j]: line j against line j + 1
    largest = float(steps[depth:].max())  # the picture's own, a hard edge along the side too
    blank = (means[:depth] < DIM * reference) | (steps[:depth] > largest + UNLIKE)
    sure = blank & (_flat(near, depth) | _half(near, depth) | _restless(near, before, depth))
    marked = np.flatnonzero(blank)
    pieces = np.array_split(near[depth:].mean(axis=0), PROFILE)
    return _Vote(
        int(marked[-1]) + 1 if marked.size else 0,
        int(np.argmin(sure)) if not sure.all() else depth,
        np.array([p.mean() for p in pieces]),
    )


def _flat(near: np.ndarray, depth: int) -> np.ndarray:
    """The zone's lines of one grey."""
    return near[:depth].std(axis=1) <= FLAT


def _half(near: np.ndarray, depth: int) -> np.ndarray:
    """The zone's lines with HALF more of their length black than any line of the reference."""
    black = (near <= BLACK).mean(axis=1)
    return black[:depth] >= black[depth:].max() + HALF


def _restless(near: np.ndarray, before: np.ndarray | None, depth: int) -> np.ndarray:
    """The zone's lines that changed since the frame before more than the reference did."""
    if before is None or before.shape[0] < near.shape[0]:
        return np.zeros(depth, bool)
    change = np.abs(near - before[: near.shape[0]].astype(np.float32)).mean(axis=1)
    return change[:depth] > change[depth:].max() + UNLIKE


def _film_strip(votes: list[_Vote | None], depth: int) -> int:
    """The widest strip that AGREE of the side's views see (none with under MIN_VIEWS of them),
    or where wider, the sure strip that AGREE of all the voting frames see."""
    cast = [vote for vote in votes if vote is not None]
    if not cast:
        return 0
    views: list[tuple[np.ndarray, list[int]]] = []  # each view's first profile, its strips
    for vote in cast:
        for first, strips in views:
            if np.abs(vote.profile - first).mean() <= SAME_VIEW:
                strips.append(vote.strip)
                break
        else:
            views.append((vote.profile, [vote.strip]))
    seen = _agreed([_agreed(strips) for _, strips in views]) if len(views) >= MIN_VIEWS else 0
    return min(depth, max(seen, _agreed([vote.sure for vote in cast])))


def _agreed(widths: list[int]) -> int:
    """The widest strip that AGREE of the widths reach."""
    ordered = sorted(widths)
    return ordered[len(ordered) - math.ceil(AGREE * len(ordered))]
