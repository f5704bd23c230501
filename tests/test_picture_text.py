"""Text over the middle of the picture (issue 35): staff credits that the whole-frame rule's
narrow look reads as 0.0 are found by the film pass's close look at its samples, and the clips
of those stretches are looked at closely (stages/burned_in/picture_text.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import local_config, shard_rows
from overlay_films import CREDIT, shows

from core.film import FilmSummary
from core.settings import ConfigError
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.burned_in.picture_text import overlaps, text_spans
from stages.quality import QualityConfig

COLUMNS = ["frame_indices", "crop_x", "crop_y", "crop_w", "crop_h", "start_time", "end_time"]
COLUMNS += ["usable", "reject_reasons", "quality_text_area"]


def cut(film, out: Path, **settings) -> tuple[FilmSummary, list[dict]]:
    result = run_film(film.path, out, local_config(**settings), load_ip(None))
    assert result.ok, result.message
    folder = Path(result.film_dir)
    summary = FilmSummary.from_dict(json.loads((folder / "summary.json").read_text()))
    return summary, shard_rows(folder, COLUMNS)


@pytest.mark.slow  # over 1.5 s (README, "Test time"): two whole runs
def test_credits_over_the_picture_are_found_where_the_narrow_look_sees_nothing(
    credits_film, tmp_path
):
    summary, rows = cut(credits_film, tmp_path / "close")
    credited = [row for row in rows if shows(credits_film, CREDIT, row)]
    clean = [row for row in rows if not shows(credits_film, CREDIT, row)]
    assert len(credited) == 2 and len(clean) == 3
    assert all("text" in row["reject_reasons"] for row in credited)
    assert all(row["usable"] for row in clean)
    # the stretch found holds the credits' seconds (frames 96-192 at 24 fps)
    spans = summary.overlays.text_spans
    assert spans and overlaps(spans, 4.0, 8.0)
    assert all(overlaps(spans, row["start_time"], row["end_time"]) for row in credited)
    assert "text over the picture" in summary.overlays.line()

    # without the close look the same clips read as having no text: the narrow look misses them
    narrow, narrow_rows = cut(credits_film, tmp_path / "narrow", quality__close_text_width=0)
    assert narrow.overlays.text_spans == []
    assert [r["usable"] for r in narrow_rows] == [True] * len(narrow_rows)
    assert all(r["quality_text_area"] <= 0.004 for r in narrow_rows)


def test_a_stretch_runs_from_the_sample_before_to_the_sample_after():
    times = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert text_spans([0, 0, 0.01, 0, 0, 0], times, 6.0, 0.002) == [[1.0, 3.0]]
    # stretches that meet are one; the first and last samples reach the film's ends
    assert text_spans([0.01, 0, 0.01, 0.01, 0, 0.003], times, 6.0, 0.002) == [[0.0, 6.0]]
    assert text_spans([0.01, 0, 0, 0, 0.01, 0], times, 6.0, 0.002) == [[0.0, 1.0], [3.0, 5.0]]
    assert text_spans([0.001] * 6, times, 6.0, 0.002) == []


def test_a_clip_is_in_a_stretch_when_their_times_meet():
    spans = [[1.0, 3.0], [10.0, 12.0]]
    assert overlaps(spans, 2.5, 4.5) and overlaps(spans, 9.0, 10.5)
    assert not overlaps(spans, 3.0, 5.0) and not overlaps(spans, 5.0, 9.0)
    assert not overlaps([], 0.0, 100.0)


def test_the_close_look_can_be_switched_off_but_not_made_negative():
    QualityConfig(close_text_width=0).validate()
    with pytest.raises(ConfigError, match="close_text_width"):
        QualityConfig(close_text_width=-1).validate()
