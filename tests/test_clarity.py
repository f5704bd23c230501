"""Clarity (issue 36): native frames against the same frames upscaled from half size, flat colour
not read as blur, and the stage on a clip."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import BIKES, BUNNY, SINTEL, make_clip

from core.frames import ClipFrames
from core.record import make_clip_id
from core.video import FrameReader
from stages.probe import Probe
from stages.scoring.clarity import (
    BLUR_TAPS,
    CONTRAST_SIDE,
    LIMITED_RANGE,
    ClarityConfig,
    ClarityStage,
    frame_clarity,
)

SIZE = (720, 480)  # (w, h) of a clip


def frames_of(path, count: int = 6) -> list[np.ndarray]:
    """`count` frames spread over a bundled film, at clip size, with some picture in them
    (decoded by the pipeline's reader, which skips the frames no wanted frame refers to)."""
    film = Probe().process(Path(path))
    picks = {int(i) for i in np.linspace(0, film.num_frames - 1, count + 2)[1:-1]}
    reader = FrameReader(str(path), film.frame_pts, threads=1)
    frames = [
        cv2.resize(frame.to_ndarray(format="rgb24"), SIZE, cv2.INTER_AREA)
        for index, frame in reader.frames(min(picks), max(picks) + 1, picks)
        if index in picks
    ]
    return [f for f in frames if f.std() > 20]


def luma(rgb: np.ndarray) -> np.ndarray:
    return ClipFrames.from_rgb(rgb[None]).luma()[0]


def upscaled_from_half(rgb: np.ndarray, interpolation=cv2.INTER_LINEAR) -> np.ndarray:
    half = cv2.resize(rgb, (SIZE[0] // 2, SIZE[1] // 2), interpolation=cv2.INTER_AREA)
    return cv2.resize(half, SIZE, interpolation=interpolation)


def drawing(seed: int, flat_share: float = 0.0) -> np.ndarray:
    """Cel-like art: flat-filled shapes with dark anti-aliased outlines, drawn at 1080 lines and
    shrunk to clip size as a film master is; `flat_share` of the width left as one flat colour."""
    rng = np.random.default_rng(seed)
    art = np.full((1080, 1620, 3), 210, np.uint8)
    drawn_width = int(1620 * (1 - flat_share))
    for _ in range(25):
        points = np.column_stack(
            [rng.integers(0, drawn_width, 6), rng.integers(0, 1080, 6)]
        ).astype(np.int32)
        colour = tuple(int(c) for c in rng.integers(40, 250, 3))
        cv2.fillPoly(art, [points], colour, lineType=cv2.LINE_AA)
        cv2.polylines(art, [points], True, (20, 20, 20), 3, lineType=cv2.LINE_AA)
    art[:, drawn_width:] = 210
    return cv2.resize(art, SIZE, interpolation=cv2.INTER_AREA)


@pytest.mark.parametrize(
    "path,margin",
    # bikes.mp4 is 640x272, itself enlarged 1.76x to clip size: halving it loses little more
    [(SINTEL, 0.03), (BUNNY, 0.03), (BIKES, 0.0)],
    ids=["sintel", "bunny", "bikes"],
)
def test_every_native_frame_is_clearer_than_its_upscale_from_half_size(path, margin):
    frames = frames_of(path)
    assert len(frames) >= 4
    for frame in frames:
        native = frame_clarity(luma(frame))
        for interpolation in (cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_LANCZOS4):
            upscaled = frame_clarity(luma(upscaled_from_half(frame, interpolation)))
            assert native > upscaled + margin, (path.name, native, upscaled, interpolation)


def test_drawn_art_is_clear_and_its_upscale_is_not():
    for seed in range(3):
        native = frame_clarity(luma(drawing(seed)))
        upscaled = frame_clarity(luma(upscaled_from_half(drawing(seed))))
        assert native > 0.7 and upscaled < native - 0.12, (native, upscaled)


def test_flat_colour_is_not_read_as_blur():
    """The same art with half the picture a flat colour: as clear (only edges count), where a
    whole-picture measure (the variance of the Laplacian) loses half its value."""
    busy, sparse = drawing(7), drawing(7, flat_share=0.5)
    assert frame_clarity(luma(sparse)) == pytest.approx(frame_clarity(luma(busy)), abs=0.03)
    laplacian = [cv2.Laplacian(luma(f), cv2.CV_64F).var() for f in (busy, sparse)]
    assert laplacian[1] < 0.7 * laplacian[0]
    assert frame_clarity(np.full((480, 720), 120, np.uint8)) is None  # nothing to measure


def test_the_stage_fills_clarity_with_the_median_of_its_frames():
    frames = np.stack([drawing(1)] * 8 + [upscaled_from_half(drawing(1))] * 8)
    clip = make_clip(
        clip_id=make_clip_id("film", [0], (0, 0, 720, 480), (480, 720), "crop"),
        frames=ClipFrames.from_rgb(frames),
    )
    stage = ClarityStage(ClarityConfig(frames=[0, 2, 12]))
    stage.process(clip)
    assert clip.clarity == pytest.approx(frame_clarity(luma(frames[0])), abs=1e-3)
    ClarityStage(ClarityConfig(frames=[12])).process(clip)
    assert clip.clarity < 0.7
    with pytest.raises(ValueError, match="clarity.frames"):
        ClarityConfig(frames=[]).validate()


def _clarity_by_boolean_masks(luma: np.ndarray, min_contrast: float = 24.0) -> float | None:
    """The clarity rule with the edges' sums taken over a boolean mask, step by step in numpy
    (the stage takes them as sums of the steps times a 0/1 map of the edges)."""
    kernel = np.ones((CONTRAST_SIDE, CONTRAST_SIDE), np.uint8)
    contrast = cv2.dilate(luma, kernel).astype(int) - cv2.erode(luma, kernel)
    edges = contrast >= min_contrast * LIMITED_RANGE
    steep = kept = 0
    for axis, taps in ((1, (BLUR_TAPS, 1)), (0, (1, BLUR_TAPS))):
        blurred = cv2.blur(luma, taps).astype(int)
        step = np.abs(np.diff(luma.astype(int), axis=axis))
        lost = np.maximum(step - np.abs(np.diff(blurred, axis=axis)), 0)
        where = edges[:, :-1] if axis == 1 else edges[:-1]
        steep += int(step[where].sum())
        kept += int(lost[where].sum())
    return kept / steep if steep else None


@pytest.mark.parametrize("path", [SINTEL, BIKES, BUNNY])
def test_clarity_is_the_rule_summed_over_boolean_masks(path):
    """The same value, to the bit, as the rule summed over boolean masks, on real frames,
    their upscales and at another contrast; flat grey has no edge (None)."""
    for rgb in frames_of(path, 3):
        for picture in (rgb, upscaled_from_half(rgb)):
            for contrast in (24.0, 60.5):
                frame = luma(picture)
                assert frame_clarity(frame, contrast) == _clarity_by_boolean_masks(frame, contrast)
    assert frame_clarity(np.full((48, 72), 120, np.uint8)) is None
