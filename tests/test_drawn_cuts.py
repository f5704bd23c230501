"""Cuts on footage drawn on twos and threes (issue 29), on a labelled film made here from the
fastest shots of the bundled media, resampled the way anime is drawn: each drawing held 2 or 3
frames, with two to four source frames of motion between drawings. Inside its shots: a colour
effect (the picture turns green over a mood pattern) and impact frames (an inverted frame, two
white ones). Every cut is labelled, some between shots of similar colour."""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
import pandas as pd
import pytest
from conftest import BIKES, BUNNY, SINTEL, local_config, read_frames, write_frames

from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film

# over 1.5 s (README, "Test time"): every test reads the labelled film that one whole run cuts
pytestmark = pytest.mark.slow

FPS = 24
SIZE = (320, 180)  # (w, h)
SINTEL_BOX = (58, 422)  # the sample's picture between its letterbox bars


@dataclass
class DrawnFilm:
    frames: list[np.ndarray] = field(default_factory=list)
    shots: list[tuple[str, int, int]] = field(default_factory=list)  # name, [start, stop)
    cuts: list[int] = field(default_factory=list)
    effects: list[tuple[str, int, int]] = field(default_factory=list)  # inside a shot


def on_holds(drawings: list[np.ndarray], hold: int) -> list[np.ndarray]:
    """Each drawing shown `hold` frames: a shot drawn on `hold`s (the drawings are source frames
    a few frames apart: read_frames' `step`, the motion between drawings)."""
    return [picture for picture in drawings for _ in range(hold)]


def green_over_pattern(picture: np.ndarray, phase: int) -> np.ndarray:
    """The colour effect: the picture in greens (the character's shape kept, its colours not),
    with its darker half (the background) swapped for a moving purple stripe pattern."""
    grey = cv2.cvtColor(picture, cv2.COLOR_RGB2GRAY).astype(np.float32)
    green = np.stack([grey * 0.25, grey, grey * 0.35], axis=-1)
    h, w = grey.shape
    y, x = np.mgrid[0:h, 0:w]
    stripes = (np.sin((x + y + 6 * phase) / 9.0) > 0).astype(np.float32)
    pattern = np.stack([120 + 80 * stripes, 30 + 20 * stripes, 140 + 90 * stripes], axis=-1)
    background = (grey < np.median(grey))[..., None]
    return np.where(background, pattern, green).clip(0, 255).astype(np.uint8)


def _add(film: DrawnFilm, name: str, shot: list[np.ndarray]) -> None:
    if film.frames:
        film.cuts.append(len(film.frames))
    film.shots.append((name, len(film.frames), len(film.frames) + len(shot)))
    film.frames += shot


def build_drawn_film(path) -> DrawnFilm:
    film = DrawnFilm()
    # the camera swings round, a dragon sweeps past: every third frame, each held 3 frames
    hand = read_frames(SINTEL, 702, 752, SINTEL_BOX, step=3)
    swoop = read_frames(SINTEL, 622, 658, SINTEL_BOX, step=2)  # a dragon dives over the desert
    flight = read_frames(SINTEL, 796, 827, SINTEL_BOX)  # after its fade-in
    bunny = read_frames(BUNNY, 0, 132, step=4)
    _add(film, "hand on threes", on_holds(hand, 3))
    _add(film, "swoop on threes", on_holds(swoop, 3))  # orange desert to orange desert
    _add(film, "flight on twos", on_holds(flight, 2))
    _add(film, "bunny on threes", on_holds(bunny, 3))
    # the colour effect, 10 drawings in the middle of the bunny's next shot
    shot = on_holds(read_frames(SINTEL, 545, 571, SINTEL_BOX), 2)  # the girl by the fire
    effect = (20, 40)
    for k in range(*effect):
        shot[k] = green_over_pattern(shot[k], k // 2)
    film.effects.append(("colour", len(film.frames) + effect[0], len(film.frames) + effect[1]))
    _add(film, "girl on twos, colour effect", shot)
    _add(film, "taxi on threes", on_holds(read_frames(BIKES, 76, 137, step=3), 3))
    # grey street to grey street
    _add(film, "bridge on twos", on_holds(read_frames(BIKES, 137, 187, step=2), 2))
    # impact frames: one inverted, later two white
    shot = on_holds(read_frames(BIKES, 187, 242, step=2), 3)
    for name, frames, make in (
        ("inverted", (18,), lambda p: 255 - p),
        ("white", (36, 37), lambda p: np.full_like(p, 255)),
    ):
        for k in frames:
            shot[k] = make(shot[k])
        where = len(film.frames) + frames[0]
        film.effects.append((name, where, where + len(frames)))
    _add(film, "legs on threes, impact frames", shot)
    write_frames(path, film.frames, FPS, crf=18)
    return film


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    path = tmp_path_factory.mktemp("drawn") / "drawn.mp4"
    film = build_drawn_film(path)
    # cuts are what is tested: small clips, no motion, and no overlay pass (the film has no text
    # or logo; the pass's 96 text detector calls are most of a short film's run)
    config = local_config(
        clips__height=96, clips__width=160, motion__enabled=False, overlays__enabled=False
    )
    result = run_film(path, tmp_path_factory.mktemp("drawn_out"), config, load_ip(None))
    assert result.ok, result.message
    drops = pd.read_parquet(result.film_dir / "drops.parquet")
    spans = drops[drops.reason == "transition"]
    # the ends of transition spans (the blend rule's, tests/test_transitions.py) are no cuts
    ends = set(spans.start_frame) | set(spans.end_frame)
    manifest = pd.read_parquet(result.film_dir / "manifest.parquet")
    return film, [s for s, _ in result.summary.scenes if s not in ends], manifest


def _inside(starts: list[int], start: int, stop: int) -> list[int]:
    return [s for s in starts if start < s < stop]


def test_the_drawn_film_is_what_its_labels_say(drawn):
    film, _, _ = drawn
    assert len(film.shots) == 8 and len(film.cuts) == 7
    assert all(stop - start >= 2 * FPS for _, start, stop in film.shots)  # a clip fits each
    for _, start, stop in film.shots:  # drawn on twos and threes: no frame-level cut is real
        held = sum(
            np.array_equal(a, b)
            for a, b in zip(film.frames[start:stop], film.frames[start + 1 : stop])
        )
        assert held >= (stop - start) // 2 - 2


def test_new_drawings_on_twos_and_threes_are_not_cuts(drawn):
    """Frame by frame (scenes.hold_seconds=0), 33 of the new drawings in these shots were cuts
    (every third frame of the hand's shot from its 15th frame on), and the colour effect and the
    impact frames six more."""
    film, starts, _ = drawn
    for name, start, stop in film.shots:
        assert _inside(starts, start, stop) == [], name


def test_cuts_between_drawn_shots_are_found(drawn):
    """Among them the hand to the swoop (frame 51): two shots of an orange desert, each on
    threes with large changes between drawings, which only the new palette tells apart."""
    film, starts, _ = drawn
    assert set(film.cuts) <= set(starts)


def test_impact_frames_are_not_sampled_and_their_shot_keeps_its_clip(drawn):
    """The inverted frame and the two white ones are shown as the frame before them, so the
    quality stage's flash rule has nothing to reject (the shot's clip is one: no cut)."""
    film, _, manifest = drawn
    impact = [f for kind, a, b in film.effects if kind != "colour" for f in range(a, b)]
    _, start, stop = film.shots[-1]
    clips = manifest[(manifest.start_frame >= start) & (manifest.end_frame <= stop)]
    assert len(clips) == 1
    [reasons] = clips["reject_reasons"]
    assert "flash" not in list(reasons)
    [indices] = clips["frame_indices"]
    assert not set(indices) & set(impact)
