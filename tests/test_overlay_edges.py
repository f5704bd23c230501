"""The last overlays (issue 35) and a film pass that scales with the film (issue 39), on films
drawn in the tests from the bundled media (tests/overlay_films.py): a translator's note too rare
to make a band, an opaque logo on a short 1080p piece of six shots, a web player's control bar
that comes and goes, a film gate's rounded corners."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cut_film, local_config, shard_rows
from overlay_films import GATE, LOGO, PLAYER, SUBTITLE, shows

from core.film import FilmSummary
from pipeline.data.ip import load_ip
from pipeline.running.film_tasks import FilmPlan, PrepareJob, prepare_film
from stages.burned_in.overlays import OverlayConfig, overlay_sample_plan
from stages.probe import Probe
from stages.sources.film_samples import sample_film, sample_plan

MEDIA = Path(__file__).resolve().parent / "media"
COLUMNS = ["frame_indices", "crop_x", "crop_y", "crop_w", "crop_h", "usable", "reject_reasons"]
COLUMNS += ["overlay_subtitle_area", "quality_text_area"]


def plan_of(path: Path, out: Path, **settings) -> FilmPlan:
    """The film's prepare step (probe, sampled frames, border crop, overlay pass), as the
    pipeline runs it."""
    plan = prepare_film(PrepareJob(path, out, local_config(**settings), load_ip(None)))
    assert isinstance(plan, FilmPlan)
    return plan


def cut(film, out: Path) -> tuple[FilmSummary, list[dict]]:
    folder = Path(cut_film(film.path, out))
    summary = FilmSummary.from_dict(json.loads((folder / "summary.json").read_text()))
    return summary, shard_rows(folder, COLUMNS)


# ----------------------------------------------------------------------------- sampling


def test_the_samples_follow_the_films_length():
    """One frame a second of film, 8 at least and 48 at most; key frames when there are
    enough, else one spread pass over a short film (bikes.mp4: 10 s, 6 key frames)."""
    bikes = Probe().process(MEDIA / "bikes.mp4")
    assert overlay_sample_plan(bikes, OverlayConfig(), 48) == sample_plan(bikes, 48, 1.0, 8, 7200)
    plan = sample_plan(bikes, 48, 1.0, 8, 7200)
    assert (plan.count, plan.spread) == (10, True)
    assert sample_plan(bikes, 48, 4.0, 8, 7200).count == 8  # never under min_samples
    assert sample_plan(bikes, 48, 2.0, 4, 7200).count == 5
    assert not sample_plan(bikes, 48, 1.0, 8, 100).spread  # too long to decode again
    assert not sample_plan(bikes, 48, 2.0, 4, 7200).spread  # 6 key frames are enough for 5
    frames = sample_film(bikes, plan).frames
    assert len(frames) == 10 and frames[0].shape == (bikes.height, bikes.width)


# ----------------------------------------------------------------------------- rare text


@pytest.mark.slow  # over 1.5 s (README, "Test time"): a whole run
def test_a_translators_note_too_rare_for_a_band_reaches_no_usable_clip(noted_film, tmp_path):
    """The note is on screen for 2 s of 8: no band, and the whole-frame `text` rule's narrow
    look reads 0 on the clips that show it. The clip pass's edge check rejects them (the close
    look of a stretch whose sample shows the note may find it as `text` too); the others
    keep."""
    summary, rows = cut(noted_film, tmp_path)
    assert summary.overlays.subtitle_bands == []
    noted = [row for row in rows if shows(noted_film, SUBTITLE, row)]
    clean = [row for row in rows if not shows(noted_film, SUBTITLE, row)]
    assert noted and clean
    for row in noted:
        assert not row["usable"] and "subtitle" in row["reject_reasons"]
    assert all(row["usable"] and row["overlay_subtitle_area"] == 0 for row in clean)


# ----------------------------------------------------------------------------- logos


@pytest.mark.slow  # over 1.5 s (README, "Test time"): a 1080p film
def test_an_opaque_logo_on_six_shots_at_1080p_is_found(short_logo_film, tmp_path):
    """Six shots of a dialogue are three views (the street, the snow, the meadow): fewer than
    logo_min_shots, which is why the logo pass looked for nothing. With three views it now
    takes marks whose pixels keep their grey levels across them."""
    [(x, y, w, h)] = short_logo_film.overlay_truth()["logos"]
    record = plan_of(short_logo_film.path, tmp_path).overlays
    assert record is not None and len(record.logos) == 1
    lx, ly, lw, lh = record.logos[0]
    assert lx <= x + 2 and ly <= y + 2 and lx + lw >= x + w - 2 and ly + lh >= y + h - 2
    assert lw * lh <= 3 * w * h  # the mark, not the corner
    assert record.frames_sampled == 19  # 18.75 s: a frame a second
    before = plan_of(short_logo_film.path, tmp_path, overlays__logo_few_views=5).overlays
    assert before is not None and before.logos == []  # the rule of before misses it


@pytest.mark.slow  # over 1.5 s (README, "Test time")
def test_film_gate_corners_are_not_a_logo(gate_film, tmp_path):
    """Rounded black corners on every frame of five shots stay put like a logo, but they reach
    the picture's corners, where it is black in every view: the transfer's, left in the
    clips. No clip is rejected as `logo`."""
    summary, rows = cut(gate_film, tmp_path)
    assert summary.overlays.logos == []
    assert rows and all(row["usable"] for row in rows)
    assert all(shows(gate_film, GATE, row) for row in rows)  # left, not cropped


# ----------------------------------------------------------------------------- players


@pytest.mark.slow  # over 1.5 s (README, "Test time")
def test_a_player_bar_that_comes_and_goes_is_cropped_away(player_film, tmp_path):
    """The bar shows in half the frames; the border crop keeps it (it is no black bar). The
    overlay pass finds its progress line at one row in several views and crops the rows
    below; no clip shows the bar."""
    bar_top = min(
        box[1] for i in player_film.frames_with(PLAYER) for box in player_film.boxes(PLAYER, i)
    )
    kept = plan_of(player_film.path, tmp_path, overlays__player_min_views=0)
    assert kept.crop.y + kept.crop.h > bar_top  # what the border crop alone leaves
    summary, rows = cut(player_film, tmp_path / "cut")
    [[y0, y1]] = summary.overlays.player_rows
    assert y0 <= bar_top and y1 == player_film.height
    assert "player bar y" in summary.overlays.line()
    assert rows and all(not shows(player_film, PLAYER, row) for row in rows)
    assert all(row["usable"] for row in rows)
    assert not any(shows(player_film, LOGO, row) for row in rows)
