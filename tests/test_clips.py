"""The clip contract on real and synthetic video: cuts, windows, frame accuracy, geometry."""

from __future__ import annotations

import json

import av
import numpy as np
import pandas as pd
import pytest
from conftest import BIKES, BIKES_CUTS, local_config, make_video

from core.shards import read_clips
from core.video import decode_image, decode_mp4
from pipeline.data.ip import load_ip
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.report import build_report
from pipeline.running.runner import run_film
from stages.clips import ClipConfig, fit_frame, output_region
from stages.crop import CropBox


def _manifest(film_dir):
    return pd.read_parquet(film_dir / "manifest.parquet")


def _summary(film_dir):
    return json.loads((film_dir / "summary.json").read_text())


# The tests of cuts, segments and sample times below run without the overlay pass: their films
# have no text or logo, and its 96 text detector calls are most of a short film's run (about
# 1.2 of 1.6 CPU-s). The tests of the whole run (determinism, rotation, VFR) keep it.
NO_OVERLAYS = {"overlays__enabled": False}


def _assert_no_clip_spans_a_cut(manifest, scenes):
    starts = [s for s, _ in scenes]
    for row in manifest.itertuples():
        inside = [c for c in starts if row.start_frame < c < row.end_frame]
        assert not inside, f"clip {row.clip_id} [{row.start_frame}, {row.end_frame}) spans {inside}"
        assert all(row.start_frame <= i < row.end_frame for i in row.frame_indices)


def test_bikes_cuts_found_exactly_and_three_clips(bikes_dataset):
    summary = _summary(bikes_dataset)
    assert [s for s, _ in summary["scenes"]] == [0, *BIKES_CUTS]
    manifest = _manifest(bikes_dataset)
    # scenes of 61, 50 and 55 frames at 25 fps hold one 2-s window each; the others are shorter
    assert manifest.start_frame.tolist() == [76, 137, 187]
    assert manifest.end_frame.tolist() == [126, 187, 237]
    assert manifest.clip_index.tolist() == [0, 1, 2]
    _assert_no_clip_spans_a_cut(manifest, summary["scenes"])
    assert summary["drops"] == {"short_scene": 3, "scene_tail": 2}


def test_bikes_clips_sample_16_frames_at_8_fps(bikes_dataset):
    manifest = _manifest(bikes_dataset)
    for row in manifest.itertuples():
        indices = list(row.frame_indices)
        assert len(indices) == 16 and indices == sorted(indices)
        # 25 fps source, 8 fps samples: frame shown at t0 + m/8 is floor(m * 25/8) after start
        assert indices == [row.start_frame + int(m * 25 / 8 + 1e-9) for m in range(16)]
        assert (row.height, row.width, row.num_frames, row.fps) == (480, 720, 16, 8.0)
        assert row.end_time - row.start_time == pytest.approx(2.0)


def test_clip_frames_match_the_source_frames(bikes_dataset):
    """Frame accuracy: each stored frame is the recorded source frame, cropped and resized."""
    clips = list(read_clips(bikes_dataset))
    wanted = {i + step for clip in clips for i in clip.frame_indices for step in (0, 1)}
    source = {}  # the frames sampled and the ones after them, as RGB (only those converted)
    with av.open(str(BIKES)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                source[i] = frame.to_ndarray(format="rgb24")
    config = ClipConfig()
    for clip in clips:
        frames = decode_mp4(clip.video)
        assert frames.shape == (16, 480, 720, 3)
        region = (clip.crop_x, clip.crop_y, clip.crop_w, clip.crop_h)
        for k, index in enumerate(clip.frame_indices):
            expected = fit_frame(source[index], region, config).astype(int)
            error = np.abs(frames[k].astype(int) - expected).mean()
            neighbour = np.abs(
                frames[k].astype(int) - fit_frame(source[index + 1], region, config).astype(int)
            ).mean()
            assert error < 6, f"frame {k} of {clip.clip_id} differs from source {index}"
            assert error < neighbour, "the stored frame is closer to the next source frame"
        first = decode_image(clip.first_frame)
        assert np.abs(first.astype(int) - frames[0].astype(int)).mean() < 6


@pytest.mark.slow
def test_synthetic_cuts_and_segment_boundaries(tmp_path):
    film = make_video(tmp_path / "cuts.mp4", cuts=(30, 100, 150), num_frames=260, fps=24)
    config = local_config(run__segment_seconds=6, **NO_OVERLAYS)
    result = run_film(film, tmp_path / "out", config, load_ip(None))
    summary = result.summary
    boundaries = summary.segment_boundaries
    assert boundaries == [130]  # 10.8 s in segments of at most 6 s: two equal halves
    starts = sorted({s for s, _ in summary.scenes})
    assert starts == [0, 30, 100, 130, 150]  # the detector's cuts plus the forced boundary
    manifest = _manifest(result.film_dir)
    _assert_no_clip_spans_a_cut(manifest, summary.scenes)
    # scene [30,100): 70 frames = one 48-frame window; [100,130): none (segment tail);
    # [130,150): none; [150,260): 110 frames = two windows
    assert manifest.start_frame.tolist() == [30, 150, 198]
    assert summary.drops["segment_tail"] == 1
    assert manifest.scene_index.is_monotonic_increasing and manifest.clip_index.tolist() == [
        0,
        1,
        2,
    ]


@pytest.mark.slow
def test_output_is_deterministic(tmp_path):
    film = make_video(tmp_path / "det.mp4", cuts=(50,), num_frames=120, fps=24)
    first = run_film(film, tmp_path / "a", local_config(), load_ip(None))
    second = run_film(film, tmp_path / "b", local_config(), load_ip(None))
    rows_a = [c.to_row() for c in read_clips(first.film_dir)]
    rows_b = [c.to_row() for c in read_clips(second.film_dir)]
    assert rows_a and len(rows_a) == len(rows_b)
    for a, b in zip(rows_a, rows_b):  # ids, geometry, motion and the media bytes themselves
        assert [k for k in a if a[k] != b[k]] == []


@pytest.mark.slow
def test_sintel_letterbox_is_cropped(sintel_dataset):
    crop = _summary(sintel_dataset)["crop"]
    assert crop["source"] == "detected"
    assert (crop["x"], crop["w"]) == (0, 854)  # no pillarbox
    assert 50 <= crop["y"] <= 64 and 352 <= crop["h"] <= 380  # about 58 px bars top and bottom
    manifest = _manifest(sintel_dataset)
    # 14 since every cut and every black run splits (issue 13); 11 once fades are trimmed and
    # the fog of frames 117-128 is a boundary (issue 18); 7 once the opening fade, the dragon's
    # dissolve and the logo fading in are blend spans (stages/scenes/blends.py BlendSpans)
    assert len(manifest) >= 7
    _assert_no_clip_spans_a_cut(manifest, _summary(sintel_dataset)["scenes"])


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("center_crop", (154, 20, 546, 364)),  # 854x364 picture cut to 3:2: (854 - 546) / 2 = 154
        ("pad", (0, 20, 854, 364)),
        ("stretch", (0, 20, 854, 364)),
    ],
)
def test_output_region_per_resize_mode(mode, expected):
    assert output_region(CropBox(0, 20, 854, 364, "detected"), ClipConfig(resize=mode)) == expected


def test_pad_mode_keeps_aspect_with_black_bars():
    frame = np.full((364, 854, 3), 200, np.uint8)
    out = fit_frame(frame, (0, 0, 854, 364), ClipConfig(resize="pad"))
    assert out.shape == (480, 720, 3)
    assert out[:80].max() == 0 and out[-80:].max() == 0  # bars above and below the picture
    assert out[240, 360].tolist() == [200, 200, 200]


def test_rotated_video_is_turned_upright(tmp_path):
    film = make_video(tmp_path / "rot.mp4", size=(240, 320), cuts=(), num_frames=60, rotation=90)
    # the overlay pass runs on the upright frames too, on 8 sampled frames instead of 48 (its
    # text detector calls were most of this film's run)
    config = local_config(overlays__samples=8)
    result = run_film(film, tmp_path / "out", config, load_ip(None))
    facts = result.summary.film
    assert (facts.width, facts.height, facts.rotation) == (240, 320, 90)
    clip = next(read_clips(result.film_dir))
    assert clip.crop_w / clip.crop_h == pytest.approx(1.5, abs=0.02)
    assert clip.crop_w <= 240  # the portrait picture was cut, not the landscape coded frame


@pytest.mark.slow
def test_variable_frame_rate_clips_follow_timestamps(tmp_path):
    # alternating 1/24 s and 1/12 s frame durations: 16 fps on average
    durations = np.where(np.arange(119) % 2 == 0, 1 / 24, 1 / 12)
    times = np.concatenate([[0.0], np.cumsum(durations)])
    film = make_video(tmp_path / "vfr.mp4", cuts=(), num_frames=120, frame_times=times)
    result = run_film(film, tmp_path / "out", local_config(), load_ip(None))
    assert result.summary.film.vfr is True
    for clip in read_clips(result.film_dir):
        for m, index in enumerate(clip.frame_indices):
            instant = clip.start_time + m / 8
            # the sampled frame is the one on screen at that instant
            assert times[index] <= instant + 1e-3
            assert index + 1 >= len(times) or times[index + 1] > instant - 1e-3


def test_motion_columns_and_level_edges_are_filled(bikes_dataset):
    summary = _summary(bikes_dataset)
    levels = summary["motion_levels"]
    assert levels["version"] == "decoder-midpoints-v1" and len(levels["edges"]) == 4
    manifest = _manifest(bikes_dataset)
    assert manifest.motion_scope.notna().all() and (manifest.motion_scope > 0).all()
    assert manifest.motion_level.between(1, 5).all()
    assert set(manifest.motion_levels_version) == {levels["version"]}
    assert manifest.motion_backend.str.startswith("opencv-dis:").all()
    assert summary["stage_seconds"]["motion"] > 0


@pytest.mark.slow
def test_segment_plan_depends_on_the_film_and_settings_only(tmp_path):
    from pipeline.running.segments import plan_segments
    from stages.probe import Probe

    # 60 s; the plan reads only the frame count and rate, so the frames are small
    film = Probe().process(make_video(tmp_path / "s.mp4", size=(72, 128), num_frames=1440, fps=24))
    lengths = lambda plan: [s.stop - s.start for s in plan]  # noqa: E731
    assert lengths(plan_segments(film, 120)) == [1440]
    assert lengths(plan_segments(film, 30)) == [720, 720]
    assert lengths(plan_segments(film, 25)) == [480, 480, 480]  # 2.4: none longer than 25 s
    assert lengths(plan_segments(film, 58)) == [1440]  # 3 % over 58 s is let pass
    assert lengths(plan_segments(film, 20)) == [480, 480, 480]
    plan = plan_segments(film, 10)
    assert len(plan) == 6 and plan[0].start == 0 and plan[-1].stop == 1440 and plan[-1].is_last
    assert all(a.stop == b.start for a, b in zip(plan, plan[1:]))


@pytest.mark.parametrize("rate", ["24000/1001", "30000/1001"])
@pytest.mark.slow
def test_ntsc_frame_rates_keep_every_window(tmp_path, rate):
    """Most anime is 23.976 fps: window starts then fall inside a frame, which must not cost the
    following windows of a scene."""
    from fractions import Fraction

    fps = Fraction(rate)
    # the sample times are tested: small frames and clips, no motion
    film = make_video(tmp_path / "ntsc.mp4", size=(180, 320), num_frames=int(20.5 * fps), fps=fps)
    config = local_config(clips__height=96, clips__width=160, motion__enabled=False, **NO_OVERLAYS)
    result = run_film(film, tmp_path / "out", config, load_ip(None))
    manifest = _manifest(result.film_dir)
    assert len(manifest) == 10 and "decode_gap" not in result.summary.drops
    times = [i / float(fps) for i in range(int(20.5 * fps))]
    for row in manifest.itertuples():
        assert row.frame_indices[0] == row.start_frame  # the range starts with the first sample
        for m, index in enumerate(row.frame_indices):
            instant = row.start_time + m / 8
            assert times[index] <= instant + 1e-6 < times[index + 1]  # the frame on screen then


@pytest.mark.slow
def test_cuts_reported_late_are_counted_and_lag_seconds_absorbs_them(tmp_path):
    # the threshold detector puts a fade's cut in the middle of the black (frame 50) but can only
    # report it when the picture comes back (frame 60)
    film = make_video(tmp_path / "fade.mp4", num_frames=150, fps=24, black=range(40, 60))
    # no black runs, no blend rule and no effects held back: their lag would give the detector
    # the time it needs
    settings = {
        "scenes__detector": "threshold",
        "scenes__black_min_seconds": -1,
        "scenes__blend_gate": -1,
        "scenes__effect_seconds": 0,
        **NO_OVERLAYS,
    }
    late = run_film(film, tmp_path / "a", local_config(**settings), load_ip(None)).summary
    assert late.late_cuts >= 1
    held = run_film(
        film, tmp_path / "b", local_config(scenes__lag_seconds=1.0, **settings), load_ip(None)
    )
    assert held.summary.late_cuts == 0
    assert 50 in [s for s, _ in held.summary.scenes]
    _assert_no_clip_spans_a_cut(_manifest(held.film_dir), held.summary.scenes)


def test_a_one_frame_flash_is_not_sampled_and_costs_no_clip(tmp_path):
    """A white frame inside a still shot splits nothing, and the clip over it stores the frame
    before it instead (its index in frame_indices), so the quality flash rule keeps the clip."""
    flash = 21  # the 8th sample of the scene's first window (every 3rd frame at 24 fps)
    film = make_video(tmp_path / "flash.mp4", num_frames=60, motion=0, white=(flash,))
    config = local_config(motion__enabled=False, clips__height=96, clips__width=160, **NO_OVERLAYS)
    result = run_film(film, tmp_path / "out", config, load_ip(None))
    assert [s for s, _ in result.summary.scenes] == [0]
    manifest = _manifest(result.film_dir)
    assert len(manifest) == 1 and manifest["usable"].all(), manifest["reject_reasons"].tolist()
    indices = manifest.iloc[0]["frame_indices"].tolist()
    assert flash not in indices and indices[7] == flash - 1


@pytest.mark.slow
def test_a_source_smaller_than_the_clip_is_named_and_can_be_refused(tmp_path):
    """A 480x360 film shows 480x320 of itself in a 720x480 clip: summary.json, the console line
    and the report say so; clips.min_source_height refuses its windows as counted drops."""
    film = make_video(tmp_path / "small.mp4", size=(360, 480), num_frames=60)
    config = local_config(motion__enabled=False, **NO_OVERLAYS)
    kept = run_film(film, tmp_path / "kept", config, load_ip(None))
    note = "upscaled 1.50x from 480x320"
    assert kept.summary.upscaled.note == note and note in kept.message
    assert _summary(kept.film_dir)["upscaled"] == {"factor": 1.5, "width": 480, "height": 320}
    assert kept.summary.clips_written == 1
    assert note in build_report(open_dataset(kept.film_dir))
    refused = run_film(
        film,
        tmp_path / "refused",
        local_config(clips__min_source_height=480, **NO_OVERLAYS),
        load_ip(None),
    )
    assert refused.summary.clips_written == 0 and refused.summary.drops["small_source"] == 1
    drops = pd.read_parquet(refused.film_dir / "drops.parquet")
    [detail] = drops[drops.reason == "small_source"]["detail"]
    assert detail == f"{note}: 320 source rows, under clips.min_source_height 480"
    large = make_video(tmp_path / "large.mp4", size=(480, 720), num_frames=60)
    assert run_film(large, tmp_path / "large_out", config, load_ip(None)).summary.upscaled is None
