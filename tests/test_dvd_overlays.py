"""The overlay pass on DVD-era copies (issue 35): a film and its 3:2 telecined copy must give
the same subtitle band, so that both move their 3:2 window clear of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import local_config
from overlay_films import SUBTITLE
from pulldown_films import hard_telecined_copy

from pipeline.data.ip import load_ip
from pipeline.running.film_tasks import FilmPlan, PrepareJob, prepare_film


def plan_of(path: Path, out: Path, **settings) -> FilmPlan:
    plan = prepare_film(PrepareJob(path, out, local_config(**settings), load_ip(None)))
    assert isinstance(plan, FilmPlan)
    return plan


@pytest.mark.slow  # over 1.5 s (README, "Test time"): two prepare steps and a 225-frame MPEG-2
def test_a_telecined_copy_keeps_the_subtitle_band_of_its_progressive_film(dialogue_film, tmp_path):
    """Two held shots, one subtitle each: the band has two sightings that differ (other words
    over another picture), and a third is chance. Before, neither the progressive film nor its
    telecined MPEG-2 copy (sampled from its key frames, at other moments) found a band, and
    the real One Piece fansub's anamorphic copy found it only through a third sample that
    happened to fall on a 0.2-s turn of the head."""
    shown = dialogue_film.frames_with(SUBTITLE)
    widths = {dialogue_film.boxes(SUBTITLE, i)[0][2] for i in shown}
    assert len(widths) == 2 and max(widths) - min(widths) > 40  # two lines, two widths
    copy = hard_telecined_copy(dialogue_film.path, tmp_path / "dialogue_telecine.mpg")
    progressive = plan_of(dialogue_film.path, tmp_path / "p")
    telecined = plan_of(copy, tmp_path / "t")
    assert telecined.fields.structure == "telecined"
    assert telecined.film.keyframes >= 18  # a key frame every 12 frames: sampled from them
    [(top, bottom)] = dialogue_film.overlay_truth()["subtitle_bands"]
    for plan in (progressive, telecined):
        [(y0, y1)] = plan.overlays.subtitle_bands
        assert y0 <= top + 2 and y1 >= bottom - 2 and bottom - top <= 2 * (y1 - y0)
        assert plan.window.y + plan.window.h <= top  # the window rose clear of it
    [(t0, t1)], [(p0, p1)] = telecined.overlays.subtitle_bands, progressive.overlays.subtitle_bands
    assert abs(t0 - p0) <= 3 and abs(t1 - p1) <= 3
    assert abs(telecined.window.y - progressive.window.y) <= 3
