"""The clip window (issue 28): inside the crop box, away from burned-in subtitles and logos where
the film's shape leaves room, centred otherwise (stages/clips.py place_window)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import local_config, shard_rows
from overlay_films import SUBTITLE

from core.film import OverlayRecord, WindowRecord
from core.record import make_clip_id
from core.vocabulary import SUBTITLE as SUBTITLE_REASON
from pipeline.data.ip import load_ip
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.report import ReportOptions, build_report
from pipeline.running.film_tasks import (
    FilmPlan,
    FinalizeJob,
    PrepareJob,
    finalize_film,
    prepare_film,
    run_stored_segment,
    segment_job,
)
from pipeline.running.runner import run_film
from stages.clips import RESIZE_MODES, ClipConfig, output_region, place_window
from stages.crop import CropBox
from stages.quality import RejectConfig, decide


def overlaps(a, b) -> bool:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah


def shown_area(region, boxes) -> int:
    x, y, w, h = region
    return sum(
        max(0, min(x + w, bx + bw) - max(x, bx)) * max(0, min(y + h, by + bh) - max(y, by))
        for bx, by, bw, bh in boxes
    )


def record(film) -> OverlayRecord:
    """What a perfect overlay analysis of a labelled film records."""
    return OverlayRecord.from_dict(film.overlay_truth())


def random_crop(rng) -> CropBox:
    width, height = (int(v) for v in rng.integers(200, 2000, 2))
    x, y = (int(v) for v in rng.integers(0, 60, 2))
    return CropBox(x, y, width, height, "detected")


def random_overlays(rng, crop: CropBox) -> OverlayRecord:
    bands = []
    for _ in range(int(rng.integers(0, 3))):
        top = int(rng.integers(crop.y, crop.y + crop.h - 4))
        bands.append([top, int(min(crop.y + crop.h, top + rng.integers(4, 80)))])
    logos = []
    for _ in range(int(rng.integers(0, 3))):
        w, h = (int(v) for v in rng.integers(10, 200, 2))
        x = int(rng.integers(crop.x, crop.x + max(1, crop.w - w)))
        y = int(rng.integers(crop.y, crop.y + max(1, crop.h - h)))
        logos.append([x, y, w, h])
    return OverlayRecord(subtitle_bands=bands, subtitle_share=0.5, logos=logos)


# ------------------------------------------------------------------ the rule


def test_films_without_overlays_keep_the_centred_window():
    """No overlay, an empty record or the setting off: the window is output_region's, so the clip
    ids, made from it, are those of before."""
    rng = np.random.default_rng(0)
    empty = OverlayRecord()
    for _ in range(200):
        crop = random_crop(rng)
        for mode in RESIZE_MODES:
            config = ClipConfig(resize=mode)
            centred = output_region(crop, config)
            for overlays in (None, empty):
                window = place_window(crop, config, overlays)
                assert window.region == centred and not window.moved
                assert window.line() == ""
        off = ClipConfig(avoid_overlays=False)
        window = place_window(crop, off, random_overlays(rng, crop))
        assert window.region == output_region(crop, off)


def test_the_window_stays_in_the_crop_and_never_shows_more_than_the_centred_one():
    rng = np.random.default_rng(1)
    config = ClipConfig()
    moved = 0
    for _ in range(300):
        crop = random_crop(rng)
        overlays = random_overlays(rng, crop)
        window = place_window(crop, config, overlays)
        x, y, w, h = window.region
        assert (w, h) == tuple(window.centred[2:])  # same size: only the position changes
        assert crop.x <= x and x + w <= crop.x + crop.w and crop.y <= y and y + h <= crop.y + crop.h
        bands = [(crop.x, y0, crop.w, y1 - y0) for y0, y1 in overlays.subtitle_bands]
        assert shown_area(window.region, bands) <= shown_area(window.centred, bands)
        if shown_area(window.region, bands) == shown_area(window.centred, bands):
            # it moved only to leave every logo, or not at all
            assert shown_area(window.region, overlays.logos) == 0 or not window.moved
        moved += window.moved
        # what it says it shows is what it shows (its even edges included)
        for y0, y1 in window.shown["subtitle_bands"]:
            assert y0 < y + h + 1 and y1 > y - 1
        for box in window.avoided["logos"]:
            assert overlaps(window.centred, box) and not overlaps(window.region, box)
    assert moved > 30


def test_a_4_3_window_rises_clear_of_the_subtitles(academy_film):
    """Just clear of the band (as centred as it can be), on an even row."""
    crop = CropBox(0, 0, 480, 360, "full")
    window = place_window(crop, ClipConfig(), record(academy_film))
    [band] = record(academy_film).subtitle_bands
    top = (band[0] - 320) // 2 * 2
    assert window.region == (0, top, 480, 320) and window.centred == [0, 20, 480, 320]
    assert window.avoided == {"subtitle_bands": [band], "logos": []}
    assert window.shown == {"subtitle_bands": [], "logos": []}
    assert window.line() == (
        f"window 480x320 moved {20 - top} px up from the centre, clear of subtitle band "
        f"y {band[0]}-{band[1]}"
    )
    subtitled = academy_film.frames_with(SUBTITLE)
    assert not any(
        overlaps(window.region, b) for i in subtitled for b in academy_film.boxes(SUBTITLE, i)
    )
    assert all(overlaps(window.centred, academy_film.boxes(SUBTITLE, i)[0]) for i in subtitled)


def test_a_wide_window_slides_off_the_logo_and_names_the_subtitles_it_keeps(wide_film):
    crop = CropBox(0, 0, 640, 360, "full")
    truth = record(wide_film)
    window = place_window(crop, ClipConfig(), truth)
    [[logo_x, *_]] = truth.logos
    left = (logo_x - 540) // 2 * 2  # just clear of the logo
    assert window.region == (left, 0, 540, 360) and window.centred == [50, 0, 540, 360]
    assert window.avoided["logos"] == truth.logos
    assert window.shown == {"subtitle_bands": truth.subtitle_bands, "logos": []}
    assert (
        f"moved {50 - left} px left" in window.line()
        and "still shows subtitle band" in window.line()
    )
    # a second logo no slide can leave: moving saves no clip, so the window stays centred
    middle = OverlayRecord(logos=[*truth.logos, [300, 150, 40, 30]])
    assert place_window(crop, ClipConfig(), middle).region == tuple(window.centred)


def test_the_window_record_reads_back_as_written():
    window = place_window(
        CropBox(0, 0, 480, 360, "full"), ClipConfig(), OverlayRecord(subtitle_bands=[[330, 350]])
    )
    again = WindowRecord.from_dict(json.loads(json.dumps(window.to_dict())))
    assert again == window and again.region == window.region and again.line() == window.line()


# ------------------------------------------------------------------ through the pipeline


def given_config():
    """The configuration of a run whose overlays are given: the overlay pass is off, since its
    record would be replaced by the given one (it was 96 text detector calls a prepare, most of
    this film's run, for a record the window never saw)."""
    return local_config(overlays__enabled=False)


def cut_segments(path: Path, out: Path, overlays: OverlayRecord | None):
    """The pipeline's film path up to finalize (prepare, every segment) with the film's overlays
    given: what the overlay analysis would hand the window. The plan and the segments' stats."""
    config, ip = given_config(), load_ip(None)
    plan = prepare_film(PrepareJob(path, out, config, ip))
    assert isinstance(plan, FilmPlan)
    plan.window = place_window(plan.crop, config.clips, overlays)
    return plan, [run_stored_segment(segment_job(plan, config, ip, seg)) for seg in plan.segments]


def cut_with_overlays(path: Path, out: Path, overlays: OverlayRecord | None):
    """The whole film path, finalize included, with the film's overlays given."""
    plan, stats = cut_segments(path, out, overlays)
    return finalize_film(FinalizeJob(plan, given_config(), load_ip(None), stats, time.time()))


def shows_subtitle(film, region, frame_indices) -> bool:
    return any(overlaps(region, box) for i in frame_indices for box in film.boxes(SUBTITLE, i))


@pytest.mark.slow
def test_every_clip_of_a_4_3_film_shows_the_moved_window(academy_film, tmp_path):
    """With a perfect overlay record, no clip shows a subtitle; centred, every clip would."""
    result = cut_with_overlays(academy_film.path, tmp_path / "moved", record(academy_film))
    rows = pd.read_parquet(Path(result.film_dir) / "manifest.parquet")
    assert len(rows) == 4  # one 2-s window a shot
    window = result.summary.window
    assert window is not None and window.moved
    assert f"window 480x320 moved {20 - window.y} px up from the centre" in result.message
    centred = (0, 20, 480, 320)
    for row in rows.itertuples():
        assert (row.crop_x, row.crop_y, row.crop_w, row.crop_h) == window.region
        assert not shows_subtitle(academy_film, window.region, row.frame_indices)
        assert shows_subtitle(academy_film, centred, row.frame_indices)
        # ids follow the geometry: not those the centred window gives the same frames
        ids = {
            make_clip_id(row.film_id, list(row.frame_indices), region, (480, 720), "center_crop")
            for region in (window.region, centred)
        }
        assert row.clip_id in ids and len(ids) == 2
    page = build_report(open_dataset(Path(result.film_dir)), ReportOptions(max_previews=0))
    assert f"moved {20 - window.y} px up from the centre" in page


@pytest.mark.slow
def test_a_subtitled_4_3_film_keeps_its_clips_through_the_moved_window(academy_film, tmp_path):
    """The whole pipeline: the overlay pass finds the band, the window rises clear of it, and no
    clip is rejected for a subtitle; kept centred, clips are. Decided with the default
    thresholds, the logo rule included: the film has no logo, and none is found."""
    thresholds = RejectConfig()
    columns = ["frame_indices", "crop_x", "crop_y", "crop_w", "crop_h", "overlay_subtitle_area"]
    columns += ["overlay_logo_share", "quality_text_area", "quality_luma_mean", "status"]
    columns += ["quality_luma_peak", "motion_scope"]
    decided = {}
    for name, avoid in (("moved", "true"), ("centred", "false")):
        config = local_config(clips__avoid_overlays=avoid)
        result = run_film(academy_film.path, tmp_path / name, config, load_ip(None))
        assert result.summary.overlays is not None and result.summary.overlays.subtitle_bands
        assert result.summary.overlays.logos == []
        rows = shard_rows(Path(result.film_dir), columns)
        decided[name] = [(row, *decide(row, thresholds)) for row in rows]
    moved, centred = decided["moved"], decided["centred"]
    assert len(moved) == len(centred) == 4
    for row, usable, reasons in moved:
        assert usable, reasons
        region = (row["crop_x"], row["crop_y"], row["crop_w"], row["crop_h"])
        assert not shows_subtitle(academy_film, region, row["frame_indices"])
    assert any(SUBTITLE_REASON in reasons for _, _, reasons in centred)


def test_a_film_without_overlays_keeps_its_centred_window_and_ids(bikes_dataset):
    summary = json.loads((Path(bikes_dataset) / "summary.json").read_text())
    crop = CropBox(**{k: summary["crop"][k] for k in "xywh"}, source="")
    centred = output_region(crop, ClipConfig())
    window = summary["window"]
    assert [window[k] for k in "xywh"] == list(centred) == window["centred"]
    manifest = pd.read_parquet(Path(bikes_dataset) / "manifest.parquet")
    for row in manifest.itertuples():
        expected = make_clip_id(
            row.film_id, list(row.frame_indices), centred, (480, 720), "center_crop"
        )
        assert row.clip_id == expected


@pytest.mark.slow
def test_a_resumed_film_cuts_again_the_segments_made_with_another_window(academy_film, tmp_path):
    """A run stopped before its summary and resumed once the window has moved (the overlay pass
    saw the film anew) cuts its segments again: a film's clips all show one window. Resumed
    with the same window, it reuses them."""
    plan, stats = cut_segments(academy_film.path, tmp_path, None)  # stopped before finalize
    assert not any(s.skipped for s in stats)
    plan, stats = cut_segments(academy_film.path, tmp_path, None)
    assert all(s.skipped for s in stats)
    plan, stats = cut_segments(academy_film.path, tmp_path, record(academy_film))
    assert plan.window.moved and not any(s.skipped for s in stats)
    result = finalize_film(FinalizeJob(plan, given_config(), load_ip(None), stats, time.time()))
    rows = pd.read_parquet(Path(result.film_dir) / "manifest.parquet")
    assert {(r.crop_x, r.crop_y, r.crop_w, r.crop_h) for r in rows.itertuples()} == {
        plan.window.region
    }
