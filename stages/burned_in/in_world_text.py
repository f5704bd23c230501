"""In-world text (issue 28): text that moves with the picture is part of it, not an overlay.

A sign on a wall, a shirt that reads "USA", a shop's name: when the camera pans, they travel
with everything around them. A title card, a caption or a subtitle holds still while the
picture moves; credits scroll while the picture holds. So a text component of a sampled frame
is in-world when, between that frame and the clip's first (or last) frame, the picture as a
whole shifts by more than a trivial amount and the component shifts by the same amount. In a
still shot nothing can be told apart, and the text counts.

Everything is measured on grey frames at the text detector's size, with the detector's text
masks: the masks hide all text from the picture's shift (scrolling credits over a black
background must not pass for a pan), and each component's own shift is found by matching its
patch in the other frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from core.frames import hann_window

# Text pixels are widened by this many pixels (detector scale) before they are hidden from the
# picture's shift and before they are grouped into components: a word's letters become one.
GROW = 2
# A phase correlation peak below this means the picture gave no shift worth trusting (a black
# background with its text hidden, noise).
MIN_RESPONSE = 0.05
# Share of a component's pixels, moved by the shift found, that the other frame's (grown) text
# mask must mark for it to have moved with the picture (`_still_text`).
MIN_STILL_TEXT = 0.3
# Pixels of context around a component's box in the patch that is matched.
PATCH_MARGIN = 2
# A frame with less than this share of its pixels brighter than BLACK_GREY outside its text is
# no picture for text to move with: credits scrolling over black. The fringes of their letters
# that the masks miss (0.1-0.3 % of the frame in a real crawl) still lock the correlation onto
# the scroll, and every line would pass for in-world text.
MIN_PICTURE = 0.02
# The grey level up to which a pixel is black background. The same 32 as `reject.black_luma` and
# `scenes.black_luma`, but a rule of its own, not read from them: they judge whole frames (99 %
# of the pixels at most that level) for the reject decision and for scene boundaries, this one
# counts pixels for the stored `quality_text_area`; and a reject threshold must change no stored
# value (`quality-calibrate` re-applies them to what was measured), nor a scenes setting what the
# quality stage measures.
BLACK_GREY = 32


def without_in_world_text(
    mask: np.ndarray,
    grey: np.ndarray,
    others: Sequence[tuple[np.ndarray, np.ndarray]],
    min_shift: float,
    tolerance: float,
    min_match: float,
) -> np.ndarray:
    """`mask` (a sampled frame's text pixels, bool) less the components that move with the
    picture between `grey` (that frame) and one of `others` ((grey, text mask) of the clip's
    other frames): the picture shifts by more than `min_shift` pixels and the component's
    patch, found there with a normalised correlation of at least `min_match`, shifted within
    `tolerance` pixels of it."""
    if not mask.any():
        return mask
    count, labels, stats, _ = cv2.connectedComponentsWithStats(_grown(mask).astype(np.uint8))
    in_world = np.zeros(count, bool)
    for other, other_mask in others:
        hidden = _grown(mask | other_mask)
        other_text = _grown(other_mask)
        picture = picture_shift(grey, other, hidden)
        if picture is None or np.hypot(*picture) <= min_shift:
            continue
        for label in range(1, count):
            if in_world[label]:
                continue
            found = patch_shift(grey, other, stats[label, :4], picture, tolerance, min_match)
            in_world[label] = (
                found is not None
                and np.hypot(*(found - picture)) <= tolerance
                and _still_text(labels == label, found, other_text)
            )
    return mask & ~in_world[labels]


def _still_text(component: np.ndarray, shift: np.ndarray, other_text: np.ndarray) -> bool:
    """Whether the other frame's text mask still marks at least `MIN_STILL_TEXT` of the
    component's pixels moved by `shift`: text that moved with the picture is text there too. A
    thin line over a textured picture is a small part of its patch, so where the line is gone
    (a credit that changed) the patch still matches the picture behind it, at the picture's
    shift."""
    ys, xs = np.nonzero(component)
    dx, dy = (int(round(v)) for v in shift)
    ys, xs = ys + dy, xs + dx
    inside = (ys >= 0) & (ys < other_text.shape[0]) & (xs >= 0) & (xs < other_text.shape[1])
    if not inside.any():
        return False
    return bool(other_text[ys[inside], xs[inside]].mean() >= MIN_STILL_TEXT)


def picture_shift(a: np.ndarray, b: np.ndarray, hidden: np.ndarray) -> np.ndarray | None:
    """(dx, dy) that moves the content of grey frame `a` onto `b`, text hidden (filled with
    each frame's mean grey of what is left), or None when the correlation has no clear peak or
    `a` shows no picture outside its text (`MIN_PICTURE`)."""
    if ((a > BLACK_GREY) & ~hidden).mean() < MIN_PICTURE:
        return None  # no picture outside the text: nothing for the text to move with
    window = hann_window(*a.shape[:2])
    (dx, dy), response = cv2.phaseCorrelate(_filled(a, hidden), _filled(b, hidden), window)
    if not np.isfinite(response) or response < MIN_RESPONSE:
        return None
    return np.array([dx, dy])


def patch_shift(
    a: np.ndarray,
    b: np.ndarray,
    box: np.ndarray,
    expected: np.ndarray,
    tolerance: float,
    min_match: float,
) -> np.ndarray | None:
    """(dx, dy) of the patch of `a` in `box` (x, y, w, h) found in `b`, searched over every
    shift from none to `expected` and `tolerance` beyond, or None when nothing there matches
    well (the text left the frame, or changed)."""
    x, y, w, h = (int(v) for v in box)
    height, width = a.shape
    x0, y0 = max(0, x - PATCH_MARGIN), max(0, y - PATCH_MARGIN)
    x1, y1 = min(width, x + w + PATCH_MARGIN), min(height, y + h + PATCH_MARGIN)
    patch = a[y0:y1, x0:x1]
    if patch.std() < 1:
        return None
    reach_x = int(np.ceil(abs(expected[0]) + tolerance)) + 1
    reach_y = int(np.ceil(abs(expected[1]) + tolerance)) + 1
    sx0, sy0 = max(0, x0 - reach_x), max(0, y0 - reach_y)
    sx1, sy1 = min(width, x1 + reach_x), min(height, y1 + reach_y)
    if sx1 - sx0 < patch.shape[1] or sy1 - sy0 < patch.shape[0]:
        return None
    scores = cv2.matchTemplate(b[sy0:sy1, sx0:sx1], patch, cv2.TM_CCOEFF_NORMED)
    _, best, _, (bx, by) = cv2.minMaxLoc(scores)
    if best < min_match:
        return None
    return np.array([sx0 + bx - x0, sy0 + by - y0], float)


def _grown(mask: np.ndarray) -> np.ndarray:
    kernel = np.ones((2 * GROW + 1, 2 * GROW + 1), np.uint8)
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool)


def _filled(grey: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    picture = grey.astype(np.float32)
    if hidden.any() and not hidden.all():
        picture[hidden] = picture[~hidden].mean()
    return picture
