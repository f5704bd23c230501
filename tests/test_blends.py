"""The CPU rule for dissolves, fades and short wipes (`BlendSpans`, issue 18), on synthetic
sequences made from real frames of the bundled media: what must be a transition span (a
cross-dissolve, a fade to a colour, a 3-frame wipe, a dissolve cut short by a cut) and what must
not (pans and zooms that change the colours a lot, lighting changes, a flash)."""

from __future__ import annotations

import functools

import av
import cv2
import numpy as np
import pytest
from conftest import BIKES, BUNNY

from stages.base import Frame
from stages.scenes import BlendSpans, SceneConfig, colour_distance

FPS = 24.0
SIZE = (256, 144)  # the detection copy's width


@functools.cache
def _frame(path, index: int) -> np.ndarray:
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i == index:
                bgr = frame.to_ndarray(format="bgr24")
                return cv2.resize(bgr, SIZE, interpolation=cv2.INTER_AREA)
    raise ValueError(f"{path} has no frame {index}")


def _spans(frames: list[np.ndarray], cuts: tuple[int, ...] = (), **settings) -> list[int]:
    """The transition frames BlendSpans returns, fed as the segment worker feeds it: each cut
    told a few frames after its frame (the cut detector's lag)."""
    config = SceneConfig(**settings)
    blends = BlendSpans(config, FPS, cut_lag=5)
    found: set[int] = set()
    for index, picture in enumerate(frames):
        for cut in cuts:
            if cut == index - 4:
                blends.cut(cut)
        found.update(blends.process(Frame(index, small=lambda p=picture: p, planes=None)))
    found.update(blends.finish(len(frames)))
    return sorted(found)


def _still(picture: np.ndarray, count: int) -> list[np.ndarray]:
    return [picture.copy() for _ in range(count)]


def _mix(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    return cv2.addWeighted(a, 1 - alpha, b, alpha, 0)


@pytest.fixture(scope="module")
def pictures():
    return _frame(BUNNY, 30), _frame(BIKES, 100)


def test_a_cross_dissolve_is_a_span_from_its_first_to_its_last_blended_frame(pictures):
    a, b = pictures
    blended = [_mix(a, b, (k + 1) / 13) for k in range(12)]  # frames 30-41
    found = _spans(_still(a, 30) + blended + _still(b, 30))
    assert set(range(30, 42)) <= set(found)
    assert 30 - 4 <= found[0] and found[-1] <= 41 + 4, found  # a few frames of padding at most
    assert found == list(range(found[0], found[-1] + 1))  # one span


def test_a_fade_to_a_colour_is_a_span(pictures):
    a, _ = pictures
    orange = np.full_like(a, (20, 120, 230))
    fading = [_mix(a, orange, (k + 1) / 13) for k in range(12)]
    found = set(_spans(_still(a, 30) + fading + _still(orange, 20)))
    assert set(range(30, 42)) <= found


def test_a_three_frame_wipe_is_a_span(pictures):
    """A wipe takes each pixel from one frame or the other: every pixel of a wipe frame lies
    between the frames either side of it, which motion does not give."""
    a, b = pictures
    wipe = []
    for k in range(3):  # frames 30-32: the new picture slides in from the left
        frame = a.copy()
        edge = SIZE[0] * (k + 1) // 4
        frame[:, :edge] = b[:, :edge]
        wipe.append(frame)
    found = _spans(_still(a, 30) + wipe + _still(b, 30))
    assert {30, 31, 32} <= set(found) and found[0] >= 26 and found[-1] <= 36, found


def test_a_dissolve_cut_short_by_a_cut_takes_every_frame_up_to_it(pictures):
    """Half a dissolve, then a hard cut to the new shot (the labelled film's dissolves): no
    frame pair across the cut is compared, and the span runs up to the cut."""
    a, b = pictures
    half = [_mix(a, b, (k + 1) / 17) for k in range(8)]  # frames 30-37, at most 47 % mixed
    found = _spans(_still(a, 30) + half + _still(b, 30), cuts=(38,))
    assert set(range(30, 38)) <= set(found) and 38 not in found, found


def test_a_short_iris_the_cut_detector_fires_inside_is_a_span_across_the_cut(pictures):
    """A 6-frame iris (the new picture in a growing circle) in which the cut detector puts a
    cut (FFmpeg's 0.3-s circleopen does: frame 4 of 6): at the shortest lag a pair may hold the
    cut, and a blend next to it goes on past it, so the frames after the cut are in the span."""
    a, b = pictures
    width, height = SIZE
    yy, xx = np.mgrid[0:height, 0:width]
    radius = np.sqrt((xx - width / 2) ** 2 + (yy - height / 2) ** 2)
    iris = []
    for k in range(6):  # frames 30-35
        frame = a.copy()
        inside = radius < radius.max() * (k + 1) / 7
        frame[inside] = b[inside]
        iris.append(frame)
    frames = _still(a, 30) + iris + _still(b, 30)
    found = _spans(frames, cuts=(33,))
    assert set(range(30, 36)) <= set(found), found
    # a hard cut with the same pictures is still no blend
    assert _spans(_still(a, 30) + _still(b, 30), cuts=(30,)) == []


def _textured_wide() -> np.ndarray:
    """A real picture three frames wide, tinted blue at its left and red at its right."""
    wide = cv2.resize(_frame(BIKES, 100), (3 * SIZE[0], SIZE[1]))
    ramp = np.linspace(0, 1, wide.shape[1])[None, :, None]
    tint = ramp * np.array([0.4, 0.6, 1.6]) + (1 - ramp) * np.array([1.6, 0.6, 0.4])
    return (wide * tint).clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("speed", [4, 8, 16])
def test_a_pan_across_big_colour_changes_is_not_a_blend(speed):
    wide = _textured_wide()
    pan = [wide[:, x : x + SIZE[0]].copy() for x in range(0, wide.shape[1] - SIZE[0], speed)]
    assert colour_distance(pan[0], pan[-1]) > 0.7  # the colours do change a lot
    assert _spans(pan) == []


@pytest.mark.parametrize("rate", [0.02, 0.05])
def test_a_zoom_into_a_picture_of_other_colours_is_not_a_blend(rate):
    width, height = SIZE
    yy, xx = np.mgrid[0:height, 0:width]
    edge = np.sqrt(((xx - width / 2) / (width / 2)) ** 2 + ((yy - height / 2) / (height / 2)) ** 2)
    edge = edge.clip(0, 1)[..., None]
    tint = edge * np.array([0.4, 0.6, 1.6]) + (1 - edge) * np.array([1.6, 0.8, 0.3])
    picture = (_frame(BUNNY, 60) * tint).clip(0, 255).astype(np.uint8)
    zoom, scale = [], 1.0
    while scale < 4:
        w, h = int(width / scale), int(height / scale)
        x, y = (width - w) // 2, (height - h) // 2
        zoom.append(cv2.resize(picture[y : y + h, x : x + w], SIZE))
        scale *= 1 + rate
    assert colour_distance(zoom[0], zoom[-1]) > 0.4
    assert _spans(zoom) == []


@pytest.mark.parametrize("low, high", [(0.6, 1.0), (0.4, 1.3)])
def test_a_lighting_change_is_not_a_blend(pictures, low, high):
    """The picture darkens or brightens over a second (the brighter one clips): its values
    change by one gain and offset per channel, which a blend of two pictures does not."""
    a, _ = pictures
    gains = [low + (high - low) * min(1.0, max(0.0, (i - 20) / 24)) for i in range(70)]
    lit = [cv2.convertScaleAbs(a, alpha=g) for g in gains]
    assert colour_distance(lit[0], lit[-1]) > 0.35
    assert _spans(lit) == []


def test_a_flash_brighter_than_both_sides_is_not_a_blend(pictures):
    a, _ = pictures
    glow = [0, 0, 90, 160, 120, 80, 40, 10]  # a flash that fades over a few frames
    frames = _still(a, 30) + [cv2.add(a, np.full_like(a, g)) for g in glow] + _still(a, 30)
    assert _spans(frames) == []


def test_a_hard_cut_is_not_a_blend(pictures):
    a, b = pictures
    assert _spans(_still(a, 30) + _still(b, 30), cuts=(30,)) == []


def test_the_rule_can_be_switched_off(pictures):
    a, b = pictures
    blended = [_mix(a, b, (k + 1) / 13) for k in range(12)]
    frames = _still(a, 30) + blended + _still(b, 30)
    assert _spans(frames, blend_gate=-1) == []
    assert BlendSpans(SceneConfig(blend_gate=-1), FPS, cut_lag=5).lag == 0


def _blur(picture: np.ndarray, sigma: float) -> np.ndarray:
    return cv2.GaussianBlur(picture, (0, 0), sigma) if sigma > 0 else picture


@pytest.mark.parametrize("cut", [None, 35])
def test_a_blur_out_blur_in_is_a_span(pictures, cut):
    """The last shot blurs out over 5 frames, the next blurs in over 5 (frames 30-39): the
    blurred frames are far from both sides, so the blend tests above miss them; the blur rule
    marks them, also when the cut detector fires where the pictures switch."""
    a, b = pictures
    out = [_blur(a, 2.0 * (k + 1)) for k in range(5)]
    into = [_blur(b, 2.0 * (5 - k)) for k in range(5)]
    frames = _still(a, 30) + out + into + _still(b, 30)
    found = _spans(frames, cuts=(cut,) if cut else ())
    assert set(range(30, 40)) <= set(found) and found[0] >= 26 and found[-1] <= 44, found
    # the blend tests alone leave blurred frames out
    assert not set(range(30, 40)) <= set(_spans(frames, cuts=(cut,) if cut else (), blur_drop=-1))


def test_a_focus_pull_inside_a_shot_is_not_a_span(pictures):
    """One picture going out of focus and back: the same picture on both sides of the blur."""
    a, _ = pictures
    sigmas = [6 * max(0.0, 1 - abs(i - 35) / 10) for i in range(70)]
    assert _spans([_blur(a, s) for s in sigmas]) == []


def test_a_hard_cut_from_a_sharp_to_a_soft_shot_is_not_a_span(pictures):
    """The soft shot after the cut has little detail against the sharp one before it, but as
    much as its own frames: no blur."""
    a, b = pictures
    soft = _blur(b, 4.0)
    assert _spans(_still(a, 30) + _still(soft, 30), cuts=(30,)) == []
