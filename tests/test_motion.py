"""Motion scope (issue 3): the rule on clips with known motion, the levels, the MemFlow path,
recalibration of stored shards, motion-eval, and the level spread of real clips."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import make_clip

from bench.motion_bench import SINTEL, real_clip_levels
from core.io import write_json_atomic, write_table_atomic
from core.record import Clip, make_clip_id
from core.schema import MANIFEST_SCHEMA, rows_to_table
from core.shards import ShardConfig, ShardWriter, read_table
from core.video import decode_mp4, encode_mp4
from pipeline.cli import main as cli_main
from pipeline.data.config import ConfigError, load_config
from stages.motion import (
    HELD_CHECK_SIZE,
    MotionConfig,
    MotionError,
    MotionScope,
    grey_frames,
    held_pairs,
    pair_scope,
)
from stages.motion_levels import (
    DEFAULT_LEVELS,
    LevelsError,
    calibrate_levels,
    levels_from_dict,
    load_levels,
)

# ----------------------------------------------------------------------------- synthetic clips


def texture(height: int, width: int, seed: int) -> np.ndarray:
    """Random texture with detail at every scale (flat noise has nothing to track when shrunk)."""
    rng = np.random.default_rng(seed)
    layers = sum(
        cv2.resize(rng.random((height // c + 2, width // c + 2, 3)), (width, height))
        for c in (64, 32, 16, 8, 4)
    )
    return (255 * (layers - layers.min()) / np.ptp(layers)).astype(np.uint8)


def panning_clip(speed: float, frames: int = 16, size=(480, 720), seed: int = 1) -> np.ndarray:
    """The camera pans: every pixel moves `speed` px per frame (in the clip's own pixels)."""
    height, width = size
    scene = texture(height, width + int(abs(speed) * frames) + 8, seed)
    shifts = [np.float32([[1, 0, -speed * i], [0, 1, 0]]) for i in range(frames)]
    return np.stack([cv2.warpAffine(scene, m, (width, height)) for m in shifts])


def moving_object_clip(side: int, speed: float, frames: int = 16) -> np.ndarray:
    """A `side` x `side` textured square crossing a static textured background."""
    background, thing = texture(480, 720, 2), texture(side, side, 3)
    clips = []
    for i in range(frames):
        frame = background.copy()
        x = 100 + int(round(speed * i))
        frame[200 : 200 + side, x : x + side] = thing
        clips.append(frame)
    return np.stack(clips)


def on_twos(frames: np.ndarray) -> np.ndarray:
    """Each drawing shown for two frames, as anime animated 'on twos' looks at the clip rate."""
    return np.repeat(frames, 2, axis=0)[: len(frames)]


@pytest.fixture(scope="module")
def stage() -> MotionScope:
    motion = MotionScope()
    motion.setup()
    return motion


def clip_with(frames: np.ndarray | None) -> Clip:
    return make_clip(
        clip_id=make_clip_id("film", [0], (0, 0, 720, 480), (480, 720), "crop"),
        film_name="Film",
        end_frame=48,
        end_time=2.0,
        frames=frames,
    )


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("speed", [1.5, 6.0, 20.0, 40.0])
def test_a_pan_of_k_pixels_per_frame_has_scope_close_to_k(stage, speed):
    assert stage.measure(panning_clip(speed)).scope == pytest.approx(speed, rel=0.1)


def test_a_static_clip_is_level_1_even_through_h264(stage):
    still = np.repeat(texture(480, 720, 4)[None], 16, axis=0)
    still = decode_mp4(encode_mp4(still, 8.0, crf=30))  # compression noise, not bit-identical
    clip = stage.process(clip_with(still))
    assert (clip.motion_scope, clip.motion_level) == (0.0, 1)


def test_scope_grows_monotonically_with_speed(stage):
    scopes = [stage.measure(panning_clip(speed, frames=5)).scope for speed in (1, 2, 4, 8, 16, 32)]
    assert all(b > a for a, b in zip(scopes, scopes[1:])), scopes


def test_a_small_moving_object_is_not_washed_out_by_the_background(stage):
    frames = moving_object_clip(side=96, speed=8.0, frames=6)  # 2.7 % of the picture moves
    unfiltered = np.mean([s.mean() for s in stage.backend.speeds(frames, list(range(5)))])
    scope = stage.measure(frames).scope
    # Averaged over the frame the object is invisible (< 0.3 px); the filter keeps the object.
    assert unfiltered < 0.3
    assert 4.0 < scope < 10.0
    assert stage.levels.level(scope) == 3 == stage.levels.level(8.0)


def test_held_drawings_do_not_dilute_the_scope(stage):
    drawn = on_twos(panning_clip(6.0, frames=16))  # 6 px between drawings, each held 2 frames
    drawn = decode_mp4(encode_mp4(drawn, 8.0, crf=23))  # held frames differ by codec noise only
    measured = stage.measure(drawn)
    assert measured.held_pairs == 8 and measured.moving_pairs == 7
    assert measured.scope == pytest.approx(6.0, rel=0.1)  # the speed while things move
    blind = MotionScope(MotionConfig(held_max_fraction=-1.0))  # nothing counts as held
    assert blind.measure(drawn).scope < 0.7 * measured.scope


def test_held_pairs_are_told_apart_from_a_one_pixel_move():
    still = np.repeat(texture(480, 720, 5)[None], 2, axis=0)
    moved = panning_clip(1.0, frames=2)
    noisy = decode_mp4(encode_mp4(np.concatenate([still, moved]), 8.0, crf=35))
    assert held_pairs(grey_frames(noisy, HELD_CHECK_SIZE), 8.0, 0.002) == [True, False, False]


def test_scopes_are_in_480x720_pixels_whatever_the_frame_or_working_size(stage):
    full = stage.measure(panning_clip(8.0, frames=6)).scope
    half_size_clip = stage.measure(panning_clip(4.0, frames=6, size=(240, 360))).scope
    finer_flow = MotionScope(MotionConfig(dis_scale=0.5, dis_patch_stride=0))
    assert half_size_clip == pytest.approx(full, rel=0.08)
    assert finer_flow.measure(panning_clip(8.0, frames=6)).scope == pytest.approx(full, rel=0.08)


def test_pair_scope_keeps_pixels_at_or_above_r_times_the_reference():
    speed = np.zeros((10, 100))
    speed[0, :5] = 10.0  # 0.5 % of pixels at 10: the 99th percentile is below them
    speed[1:3, :] = 2.0  # 20 % at 2
    speed[3, :] = 0.3  # 10 % at 0.3: below 0.2 x 2 = 0.4, background
    assert pair_scope(speed, 0.2, 99.0) == pytest.approx((5 * 10 + 200 * 2) / 205)
    assert pair_scope(np.zeros((4, 4)), 0.2, 99.0) == 0.0
    with pytest.raises(MotionError, match="non-finite"):
        pair_scope(np.full((4, 4), np.nan), 0.2, 99.0)


# ----------------------------------------------------------------------------- the stage contract


def test_the_stage_fills_the_four_motion_fields(stage):
    clip = stage.process(clip_with(panning_clip(20.0)))
    assert clip.motion_level == 4 and clip.motion_scope == pytest.approx(20.0, rel=0.1)
    assert clip.motion_backend.startswith("opencv-dis:ultrafast:stride8@120x180;r0.2/p99")
    assert clip.motion_levels_version == DEFAULT_LEVELS
    assert clip.to_row()["motion_level"] == 4


def test_a_clip_without_frames_is_a_clear_error(stage):
    clip = clip_with(None)
    with pytest.raises(MotionError, match=f"clip {clip.clip_id}: .*clip.frames is None"):
        stage.process(clip)
    failed = stage.process_safely(clip_with(None))
    assert failed.status == "error" and failed.error.startswith("motion: MotionError")


def test_the_backend_is_one_configuration_value():
    config = load_config(overrides=["motion.backend=memflow", "motion.memflow_random_weights=true"])
    assert config.motion.backend == "memflow"
    assert MotionScope(config.motion).backend.name.startswith(
        "ptlflow-memflow:random-weights-TEST-ONLY"
    )
    assert MotionScope().resources.gpus == 0.0
    gpu = MotionConfig(backend="memflow", memflow_random_weights=True, memflow_device="cuda")
    assert MotionScope(gpu).resources.gpus == 1.0  # declared for the executor; nothing loaded yet
    with pytest.raises(MotionError, match="choose one of"):
        MotionScope(MotionConfig(backend="raft"))
    with pytest.raises(ConfigError, match="unknown setting 'motion.flow'"):
        load_config(overrides=["motion.flow=dis"])


# ----------------------------------------------------------------------------- levels


def test_default_levels_are_geometric_midpoints_of_the_decoder_values():
    levels = load_levels(DEFAULT_LEVELS)
    mids = [np.sqrt(a * b) for a, b in zip(levels.representative, levels.representative[1:])]
    assert levels.edges == pytest.approx(mids, abs=1e-3)
    assert [levels.level(v) for v in levels.representative] == [1, 2, 3, 4, 5]
    assert levels.level(levels.edges[1]) == 3  # a scope on an edge belongs to the upper level
    assert levels.level(0.0) == 1 and levels.level(1e6) == 5


def test_broken_level_files_are_clear_errors(tmp_path):
    with pytest.raises(LevelsError, match="strictly increasing"):
        levels_from_dict({"version": "x", "edges": [1, 5, 5, 20]}, source="mine.json")
    with pytest.raises(LevelsError, match="need 4 edges"):
        levels_from_dict({"version": "x", "edges": [1, 5, 20]}, source="mine.json")
    with pytest.raises(LevelsError, match="missing key 'version'"):
        levels_from_dict({"edges": [1, 2, 3, 4]}, source="mine.json")
    with pytest.raises(LevelsError, match=r"nowhere\.json: level-edges file not found"):
        load_levels(tmp_path / "nowhere.json")
    with pytest.raises(LevelsError, match="bundled: decoder-midpoints-v1"):
        load_levels("no-such-levels")


def test_equal_population_calibration_puts_a_fifth_of_the_clips_in_each_level():
    scopes = np.random.default_rng(0).lognormal(1.0, 1.0, 1000)
    levels = calibrate_levels(scopes)
    assert Counter(levels.levels(scopes).tolist()) == {k: 200 for k in range(1, 6)}
    assert levels.version.startswith("equal-population-")
    assert levels.version == calibrate_levels(scopes).version  # deterministic
    with pytest.raises(LevelsError, match="repeated edges"):
        calibrate_levels(np.r_[np.zeros(60), np.arange(1, 41)])  # 60 % static clips


# ----------------------------------------------------------------------------- MemFlow


def test_memflow_without_a_checkpoint_file_is_a_clear_error(tmp_path):
    with pytest.raises(MotionError, match="needs motion.memflow_checkpoint"):
        MotionScope(MotionConfig(backend="memflow"))
    with pytest.raises(MotionError, match=r"missing\.ckpt: no such file"):
        MotionScope(
            MotionConfig(backend="memflow", memflow_checkpoint=str(tmp_path / "missing.ckpt"))
        )
    with pytest.raises(MotionError, match="at least 128 pixels"):
        MotionScope(MotionConfig(backend="memflow", memflow_random_weights=True, memflow_scale=0.2))


@pytest.fixture(scope="module")
def memflow_stage():
    # TEST ONLY random weights, at MemFlow's smallest workable size (128x192): ~4 s a pair on
    # one CPU thread. One thread: on a shared machine, two threads wait on each other.
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = MotionConfig(
        backend="memflow",
        memflow_random_weights=True,
        memflow_scale=128 / 480,
        memflow_device="cpu",
    )
    motion = MotionScope(config)
    motion.setup()
    yield motion
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_memflow_runs_end_to_end_on_a_tiny_clip(memflow_stage):
    clip = memflow_stage.process(clip_with(panning_clip(12.0, frames=3)))
    assert clip.status == "ok" and np.isfinite(clip.motion_scope) and clip.motion_scope >= 0
    assert 1 <= clip.motion_level <= 5
    assert clip.motion_backend.startswith("ptlflow-memflow:random-weights-TEST-ONLY@128x192;")


@pytest.mark.slow
def test_memflow_loads_a_checkpoint_file(memflow_stage, tmp_path):
    import torch

    weights = memflow_stage.backend._model.state_dict()
    path = tmp_path / "memflow-test.ckpt"
    torch.save({"state_dict": weights, "hyper_parameters": {"train_avg_length": 6750}}, path)
    loaded = MotionScope(
        MotionConfig(
            backend="memflow",
            memflow_checkpoint=str(path),
            memflow_scale=128 / 480,
            memflow_device="cpu",
        )
    )
    loaded.setup()
    assert loaded.backend.name.startswith("ptlflow-memflow:memflow-test@")
    restored = loaded.backend._model.state_dict()
    assert all(torch.equal(restored[k], v) for k, v in weights.items())
    garbage = tmp_path / "truncated.ckpt"
    garbage.write_bytes(path.read_bytes()[:1000])
    broken = MotionScope(
        MotionConfig(
            backend="memflow",
            memflow_checkpoint=str(garbage),
            memflow_scale=128 / 480,
            memflow_device="cpu",
        )
    )
    with pytest.raises(MotionError, match=r"truncated\.ckpt: cannot build memflow"):
        broken.setup()


@pytest.mark.gpu
@pytest.mark.skipif("not __import__('torch').cuda.is_available()")
def test_memflow_on_the_gpu_at_480x720():
    motion = MotionScope(MotionConfig(backend="memflow", memflow_random_weights=True))
    motion.setup()
    assert np.isfinite(motion.measure(panning_clip(8.0, frames=3)).scope)


# ----------------------------------------------------------------------------- motion-calibrate


def write_film(
    root: Path, slug: str, scopes: list[float | None], caption_status: str = "pending"
) -> None:
    """A film folder as the pipeline writes it: shards (with video bytes), manifest, summary."""
    video = encode_mp4(np.zeros((2, 16, 16, 3), np.uint8), 8.0)
    clips = []
    for i, scope in enumerate(scopes):
        clip = clip_with(None)
        clip.clip_id, clip.film_id, clip.clip_index, clip.video = f"{slug}-{i}", slug, i, video
        clip.caption_status = caption_status
        if scope is not None:
            clip.motion_scope, clip.motion_backend = scope, "opencv-dis"
            clip.motion_level = load_levels(DEFAULT_LEVELS).level(scope)
            clip.motion_levels_version = DEFAULT_LEVELS
        clips.append(clip)
    small_shards = ShardConfig(rows_per_group=4, max_bytes=6000)  # several files, several groups
    with ShardWriter(root / slug / "shards", "clips", small_shards) as writer:
        writer.write_all(clips)
    manifest = rows_to_table(
        [{k: v for k, v in c.to_row().items() if k in MANIFEST_SCHEMA.names} for c in clips],
        MANIFEST_SCHEMA,
    )
    write_table_atomic(manifest, root / slug / "manifest.parquet")
    write_json_atomic(
        {"film": slug, "motion_levels": load_levels(DEFAULT_LEVELS).to_dict()},
        root / slug / "summary.json",
    )


def test_motion_calibrate_rewrites_levels_without_touching_anything_else(tmp_path, capsys):
    scopes = np.random.default_rng(1).lognormal(1.5, 1.0, 40).round(3).tolist()
    write_film(tmp_path, "film-a", scopes[:25] + [None])
    write_film(tmp_path, "film-b", scopes[25:])
    before = read_table(tmp_path)
    groups_before = {p: pq.ParquetFile(p).num_row_groups for p in tmp_path.rglob("clips-*.parquet")}

    assert cli_main(["motion-calibrate", str(tmp_path)]) == 0
    written = list((tmp_path / "motion_levels").glob("equal-population-*.json"))
    levels = load_levels(written[0])
    after = read_table(tmp_path)
    measured = after.filter(after["motion_scope"].is_valid())
    assert Counter(measured["motion_level"].to_pylist()) == {k: 8 for k in range(1, 6)}
    assert set(measured["motion_levels_version"].to_pylist()) == {levels.version}
    assert after.drop_columns(["motion_level", "motion_levels_version"]).equals(
        before.drop_columns(["motion_level", "motion_levels_version"])
    )  # video bytes included
    assert {p: pq.ParquetFile(p).num_row_groups for p in groups_before} == groups_before
    unmeasured = after.filter(after["motion_scope"].is_null())
    assert unmeasured["motion_level"].to_pylist() == [None]
    for slug in ("film-a", "film-b"):
        manifest = pq.read_table(tmp_path / slug / "manifest.parquet").to_pandas()
        manifest = manifest.dropna(subset=["motion_scope"])
        assert (
            manifest["motion_level"] == [levels.level(s) for s in manifest["motion_scope"]]
        ).all()
        summary = json.loads((tmp_path / slug / "summary.json").read_text())
        assert summary["motion_levels"]["version"] == levels.version and summary["film"] == slug
    assert "level 3:      8 clips" in capsys.readouterr().out

    assert cli_main(["motion-calibrate", str(tmp_path), "--apply", DEFAULT_LEVELS]) == 0
    restored = read_table(tmp_path).filter(after["motion_scope"].is_valid())
    assert (
        restored["motion_level"].to_pylist()
        == before.filter(before["motion_scope"].is_valid())["motion_level"].to_pylist()
    )


def test_motion_calibrate_reports_problems_instead_of_writing(tmp_path, capsys):
    assert cli_main(["motion-calibrate", str(tmp_path / "absent")]) == 2
    assert "absent: not a dataset or film folder" in capsys.readouterr().err
    write_film(tmp_path, "film", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert cli_main(["motion-calibrate", str(tmp_path), "--quantiles", "0.5,0.2,0.6,0.8"]) == 2
    assert "strictly increasing quantiles" in capsys.readouterr().err
    assert cli_main(["motion-calibrate", str(tmp_path), "--dry-run"]) == 0
    assert not (tmp_path / "motion_levels").exists()


def test_recalibrated_clips_lose_captions_written_for_their_old_level(tmp_path, capsys):
    scopes = np.random.default_rng(2).lognormal(1.5, 1.0, 30).round(3).tolist()
    write_film(tmp_path, "film", scopes, caption_status="ok")
    before = read_table(tmp_path).column("motion_level").to_pylist()
    assert cli_main(["motion-calibrate", str(tmp_path)]) == 0
    after = read_table(tmp_path)
    changed = [a != b for a, b in zip(before, after.column("motion_level").to_pylist())]
    assert any(changed) and not all(changed)
    status = after.column("caption_status").to_pylist()
    assert status == ["pending" if c else "ok" for c in changed]
    assert f"{sum(changed)} captioned clip(s) changed level" in capsys.readouterr().out
    assert json.loads((tmp_path / "film" / "summary.json").read_text())["captions"] == "incomplete"
    manifest = pq.read_table(tmp_path / "film" / "manifest.parquet")
    assert manifest.column("caption_status").to_pylist() == status


def test_calibration_refuses_edges_that_leave_a_level_empty():
    scopes = np.concatenate([np.zeros(30), np.linspace(0.5, 9, 70)])  # many still shots at 0.0
    with pytest.raises(LevelsError, match="leave a level empty"):
        calibrate_levels(scopes)


# ----------------------------------------------------------------------------- motion-eval


def test_motion_eval_reports_acc_f_and_mae_f(tmp_path, capsys):
    clips = tmp_path / "generated"
    clips.mkdir()
    # Generated at 240x360: speeds in 480x720 pixels are twice the clip's own.
    speeds = {"still": 0.0, "slow": 3.0, "medium": 8.0, "fast": 40.0}  # levels 1, 2, 3, 5
    for name, speed in speeds.items():
        frames = panning_clip(speed / 2, frames=9, size=(240, 360), seed=len(name))
        (clips / f"{name}.mp4").write_bytes(encode_mp4(frames, 8.0))
    requested = tmp_path / "requested.csv"
    requested.write_text("clip,level\nstill.mp4,1\nslow,2\nmedium,4\nfast,3\n")
    out = tmp_path / "eval.json"
    assert (
        cli_main(["motion-eval", str(clips), "--levels", str(requested), "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    assert {r["clip"]: r["measured"] for r in result["per_clip"]} == {
        "still.mp4": 1,
        "slow.mp4": 2,
        "medium.mp4": 3,
        "fast.mp4": 5,
    }
    assert result["acc_f"] == 0.5 and result["mae_f"] == 0.75  # |4-3| + |3-5| over 4 clips
    assert "ACC-F 0.500   MAE-F 0.750" in capsys.readouterr().out


def test_motion_eval_names_what_is_missing(tmp_path, capsys):
    (tmp_path / "a.mp4").write_bytes(encode_mp4(panning_clip(2.0, frames=3, size=(64, 96)), 8.0))
    levels = tmp_path / "levels.json"
    levels.write_text(json.dumps({"a": 2, "b": 3}))
    assert cli_main(["motion-eval", str(tmp_path), "--levels", str(levels)]) == 2
    assert "no mp4 for 1 requested clip(s): b" in capsys.readouterr().err
    levels.write_text(json.dumps({"a": 7}))
    assert cli_main(["motion-eval", str(tmp_path), "--levels", str(levels)]) == 2
    assert "asks for level 7" in capsys.readouterr().err


def test_motion_eval_samples_other_frame_rates_at_8_fps(tmp_path):
    from pipeline.motion_eval import read_clip_frames

    flat = np.stack([np.full((64, 96, 3), 10 * i, np.uint8) for i in range(24)])  # frame i = 10 i
    path = tmp_path / "clip24.mp4"
    path.write_bytes(encode_mp4(flat, 24.0, crf=10))
    sampled = read_clip_frames(path, fps=8.0)
    assert [round(f.mean() / 10) for f in sampled] == [0, 3, 6, 9, 12, 15, 18, 21]
    assert len(read_clip_frames(path, fps=24.0)) == 24


def test_motion_eval_leaves_out_unreadable_clips_and_refuses_slow_ones(tmp_path, capsys):
    from pipeline.motion_eval import read_clip_frames

    (tmp_path / "good.mp4").write_bytes(encode_mp4(panning_clip(2.0, frames=9, size=(64, 96)), 8.0))
    (tmp_path / "broken.mp4").write_bytes(b"not a video at all")
    slow = tmp_path / "slow.mp4"
    slow.write_bytes(encode_mp4(panning_clip(2.0, frames=9, size=(64, 96)), 4.0))
    levels = tmp_path / "levels.json"
    levels.write_text(json.dumps({"good": 2, "broken": 3, "slow": 2}))
    out = tmp_path / "eval.json"
    assert (
        cli_main(["motion-eval", str(tmp_path), "--levels", str(levels), "--json", str(out)]) == 0
    )
    printed = capsys.readouterr()
    assert "broken.mp4: not a readable video" in printed.err
    assert "1 clips (2 unreadable" in printed.out
    result = json.loads(out.read_text())
    assert result["clips"] == 1 and {f["clip"] for f in result["failed"]} == {
        "broken.mp4",
        "slow.mp4",
    }
    with pytest.raises(ValueError, match="runs at 4 fps, slower than the 8 fps"):
        read_clip_frames(slow, fps=8.0)
    assert cli_main(["motion-eval", str(tmp_path), "--levels", str(levels), "--fps", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err


# ----------------------------------------------------------------------------- real clips


@pytest.mark.slow
def test_real_clips_spread_over_several_levels():
    rows = real_clip_levels(SINTEL)
    counts = Counter(r["level"] for r in rows)
    print(
        f"\nSintel trailer, {len(rows)} cut-free 2-s windows, levels: {dict(sorted(counts.items()))}"
    )
    assert len(rows) >= 15
    assert len(counts) >= 3 and max(counts.values()) < 0.6 * len(rows)


@pytest.mark.slow  # imports ptlflow (lightning, timm) in a fresh process: about 6 s
def test_ptlflow_imports_beside_faiss_cpu_in_one_process():
    """Where faiss-cpu is installed (the project no longer needs it, an environment may still
    have it), MemFlow's ptlflow must still import after it (its SCV model's faiss probe raises
    AttributeError on faiss-cpu), and faiss must stay usable."""
    import subprocess
    import sys

    pytest.importorskip("faiss")

    script = (
        "import faiss\n"
        "from core.compat import import_ptlflow\n"
        "ptlflow = import_ptlflow()\n"
        "import sys\n"
        "assert sys.modules['faiss'] is faiss and hasattr(faiss, 'IndexBinaryFlat')\n"
        "assert callable(ptlflow.get_model)\n"
        "print('ok')\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "ok"
