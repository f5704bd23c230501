"""Blur transitions (issue 35): the outgoing shot blurs out and the next blurs in, or a zoom
dissolve passes through a blurred frame, on a labelled film made here from real shots of the
bundled media. No usable clip may hold a frame of either; a shot that blurs and comes back into
focus, or that zooms, stays one shot with its clip."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pandas as pd
import pytest
from conftest import BIKES, BUNNY, SINTEL, local_config, read_frames, write_frames

from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film

FPS = 20  # a 2-s window is 40 frames
HALF = 5  # frames of each shot a transition takes
SINTEL_ROWS = (58, 422)  # the sample's picture rows, between its letterbox bars


def _blurred(picture: np.ndarray, sigma: float) -> np.ndarray:
    return cv2.GaussianBlur(picture, (0, 0), sigma) if sigma > 0 else picture


def _zoomed(picture: np.ndarray, scale: float) -> np.ndarray:
    """The picture's centre, `scale` times bigger (a digital push-in)."""
    height, width = picture.shape[:2]
    h, w = int(round(height / scale)), int(round(width / scale))
    y, x = (height - h) // 2, (width - w) // 2
    return cv2.resize(picture[y : y + h, x : x + w], (width, height), interpolation=cv2.INTER_AREA)


def _ramp(k: int) -> float:
    """0 to 1 over a transition's half: k = 0 is the frame next to the clean shot."""
    return (k + 1) / HALF


def _blur_wipe(tail: list[np.ndarray], head: list[np.ndarray]) -> list[np.ndarray]:
    """The last shot blurs out (sigma up to 12 px at 320 across), the next blurs in."""
    out = [_blurred(a, 12 * _ramp(k)) for k, a in enumerate(tail)]
    return out + [_blurred(b, 12 * _ramp(HALF - 1 - k)) for k, b in enumerate(head)]


def _zoom_dissolve(tail: list[np.ndarray], head: list[np.ndarray]) -> list[np.ndarray]:
    """The last shot pushes in and blurs; the next starts pushed in and blurred and pulls back;
    the two dissolve over the middle frames (the zoom dissolves of a TV opening)."""
    out_going = [_blurred(_zoomed(a, 1 + 0.6 * _ramp(k)), 8 * _ramp(k)) for k, a in enumerate(tail)]
    in_coming = [
        _blurred(_zoomed(b, 1 + 0.6 * _ramp(HALF - 1 - k)), 8 * _ramp(HALF - 1 - k))
        for k, b in enumerate(head)
    ]
    mixed = list(out_going)
    for k in range(2):  # the last two outgoing frames show the incoming shot through them
        alpha = (k + 1) / 3
        mixed[HALF - 2 + k] = cv2.addWeighted(
            out_going[HALF - 2 + k], 1 - alpha, in_coming[0], alpha, 0
        )
    return mixed + in_coming


def _focus_pull(shot: list[np.ndarray]) -> list[np.ndarray]:
    """One shot going slowly out of focus (sigma up to 6 over a second) and back."""
    middle, reach = len(shot) // 2, FPS
    return [
        _blurred(p, 6 * max(0.0, 1 - abs(i - middle) / reach) ** 1.5) for i, p in enumerate(shot)
    ]


def _push_in(shot: list[np.ndarray]) -> list[np.ndarray]:
    """One shot zooming in steadily, 1.5 times over its length."""
    return [_zoomed(p, 1 + 0.5 * i / len(shot)) for i, p in enumerate(shot)]


@pytest.fixture(scope="module")
def film(tmp_path_factory):
    """The film and its labels: the transitions' frames [start, stop) and the frames of the two
    single shots that must stay whole."""
    bunny = read_frames(BUNNY, 0, 132)
    desert = read_frames(SINTEL, 874, 940, SINTEL_ROWS)
    bikes = read_frames(BIKES, 76, 137)
    shots = [bunny[:66], desert, bikes]
    frames = list(shots[0])
    transitions = []
    for make, shot in zip((_blur_wipe, _zoom_dissolve), shots[1:]):
        start = len(frames) - HALF
        frames[start:] = make(frames[start:], shot[:HALF])
        transitions.append((make.__name__, start, start + 2 * HALF))
        frames += shot[HALF:]
    singles = []
    for shot in (_focus_pull(bunny[66:]), _push_in(read_frames(SINTEL, 571, 621, SINTEL_ROWS))):
        singles.append((len(frames), len(frames) + len(shot)))
        frames += shot  # a hard cut into it
    path = tmp_path_factory.mktemp("blur") / "blur.mp4"
    write_frames(path, frames, FPS, crf=16)
    return path, transitions, singles


def _run(path, out, **settings):
    config = local_config(
        clips__height=96,
        clips__width=160,
        motion__enabled=False,
        overlays__enabled=False,
        **settings,
    )
    result = run_film(path, out, config, load_ip(None))
    assert result.ok, result.message
    manifest = pd.read_parquet(result.film_dir / "manifest.parquet")
    return manifest, json.loads((result.film_dir / "summary.json").read_text())


def _usable_across(manifest: pd.DataFrame, spans) -> list[str]:
    usable = manifest[manifest["usable"]]
    return [
        f"[{row.start_frame}, {row.end_frame}) holds {name} [{start}, {stop})"
        for row in usable.itertuples()
        for name, start, stop in spans
        if row.start_frame < stop and start < row.end_frame
    ]


@pytest.mark.slow
def test_no_usable_clip_holds_a_blur_wipe_or_a_zoom_dissolve(film, tmp_path):
    path, transitions, singles = film
    manifest, summary = _run(path, tmp_path / "out")
    assert _usable_across(manifest, transitions) == []
    # the shots either side keep their clips: the transitions cost only their own frames
    usable = manifest[manifest["usable"]]
    assert len(usable[usable["end_frame"] <= transitions[0][1]]) >= 1
    between = usable[
        (usable["start_frame"] >= transitions[0][2]) & (usable["end_frame"] <= transitions[1][1])
    ]
    assert len(between) >= 1, manifest[["start_frame", "end_frame", "usable"]]
    # a focus pull and a push-in inside one shot start no scene and keep a usable clip
    starts = [start for start, _ in summary["scenes"]]
    for first, stop in singles:
        assert not [s for s in starts if first < s < stop], (first, stop, summary["scenes"])
        inside = usable[(usable["start_frame"] >= first) & (usable["end_frame"] <= stop)]
        assert len(inside) >= 1, (first, stop, manifest[["start_frame", "end_frame", "usable"]])


@pytest.mark.slow
def test_without_the_blur_rule_a_usable_clip_holds_the_blur_wipe(film, tmp_path):
    """The film is a fair test: with `scenes.blur_drop` off, the other rules let a usable clip
    through the blurred frames."""
    path, transitions, _ = film
    manifest, _ = _run(path, tmp_path / "off", scenes__blur_drop=-1)
    assert _usable_across(manifest, transitions)
