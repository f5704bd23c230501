"""Clip quality (issue 13): the real sample film, and synthetic video made here from its frames.

What is rejected and why is printed by the sample-film test (run pytest with -s to read it)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from captioning import ScriptedEngine, answer_well
from conftest import SINTEL, _texture, local_config, make_clip
from quality_clips import THRESHOLDS, judged, write_film

from pipeline.cli import main as cli_main
from pipeline.data.ip import load_ip
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.report import build_report
from pipeline.running.runner import run_films
from stages.captioning.stage import CaptionConfig
from stages.motion import MotionConfig, MotionScope
from stages.quality import (
    QualityStage,
    RejectConfig,
    clip_reasons,
    decide,
    fades,
    flashes,
    hamming,
    own_reasons,
)
from trainer.shared.data import ClipCatalog


@pytest.fixture(scope="module")
def sintel_out(tmp_path_factory) -> Path:
    """A dataset folder made by `run_films` (the dataset command's path) from the sample film."""
    out = tmp_path_factory.mktemp("quality_sintel")
    [result] = run_films([SINTEL], out, local_config(), load_ip(None))
    assert result.ok, result.message
    return out


def stage_config(**settings):
    """For the synthetic films of the cut and duplicate tests: no motion and no overlay pass
    (they have no text or logo, and the pass's 96 text detector calls are most of a short
    film's run); the cuts, the quality stage and the folder pass run as in `dataset`."""
    return local_config(motion__enabled=False, overlays__enabled=False, **settings)


def manifest_of(out: Path) -> pd.DataFrame:
    return open_dataset(out).manifest


# ------------------------------------------------------------------ the sample film


@pytest.mark.slow
def test_sample_film_keeps_real_shots_and_rejects_black_title_logo_and_credits(sintel_out):
    m = manifest_of(sintel_out)
    for row in m.itertuples():
        print(
            f"{row.start_time:6.2f}s [{row.start_frame:4d},{row.end_frame:4d}) "
            f"{'usable' if row.usable else 'REJECTED ' + ','.join(row.reject_reasons)} "
            f"text {row.quality_text_area:.4f}"
        )
    at = {round(r.start_time, 1): r for r in m.itertuples()}
    # "the Blender Foundation presents" on black, fading out
    title = next(r for r in m.itertuples() if 9.0 <= r.start_time < 9.5)
    assert not title.usable and "text" in title.reject_reasons and "black" in title.reject_reasons
    logos = [r for r in m.itertuples() if 42.0 <= r.start_time < 47.0]  # SINTEL logo on black
    assert len(logos) == 2 and all("text" in r.reject_reasons for r in logos)
    credits = at[48.5]
    assert credits.reject_reasons == ["text"] and credits.quality_text_area > 0.05
    # the opening shot fades in from black over 4 s: the fade (frames 50-90) is a blend span,
    # and the shot before the fog has 18 frames left, under a clip's 48
    assert not [r.start_frame for r in m.itertuples() if r.start_frame < 218]
    kept = m[m["usable"]]
    # the city, the hand and the desert: the only shots of 2 s or more without text once the
    # dissolve and the fades are trimmed (the dragon's shot keeps 25 frames between its fade-in
    # and its dissolve; docs/scenes.md counts them by eye)
    assert len(kept) >= 3
    assert (kept["quality_text_area"] == 0.0).all()
    assert {571, 869} <= set(kept["start_frame"])
    # the hand's shot fades in from black: trimmed (the fade is a transition span,
    # stages/scenes/black.py), so its clip starts where the picture is whole
    assert any(682 < r.start_frame < 710 for r in kept.itertuples())
    # no kept clip holds the white fog (117-128), the dragon's dissolve into the desert
    # (about 827-867) or the SINTEL logo fading in over the desert (from about 950)
    for start, stop in ((117, 129), (827, 868), (950, 1003)):
        assert not [
            r.start_frame for r in kept.itertuples() if r.start_frame < stop and start < r.end_frame
        ]
    # a kept clip never starts on (or holds more than two) black frames
    for row in kept.itertuples():
        black = [p <= THRESHOLDS.black_luma for p in row.quality_luma_peak]
        assert not black[0] and sum(black) <= THRESHOLDS.black_max_frames
    assert m["duplicate_of"].isna().all()  # 14 different shots: no duplicate
    summary = json.loads(next(sintel_out.glob("*/summary.json")).read_text())["quality"]
    assert summary["usable"] == len(kept) and summary["rejected"] == len(m) - len(kept)
    counts = pd.Series([r for rs in m["reject_reasons"] for r in rs]).value_counts().to_dict()
    assert summary["by_reason"] == counts
    assert summary["duplicates_checked"] is True


@pytest.mark.slow
def test_black_runs_are_scene_boundaries_and_close_cuts_are_kept_on_the_sample(sintel_out):
    summary = json.loads(next(sintel_out.glob("*/summary.json")).read_text())
    starts = [s for s, _ in summary["scenes"]]
    assert summary["black_frames"] > 200  # about 10 s of the trailer is black: counted
    assert 35 in starts  # the opening's black ends at frame 34: the first window starts at 35
    assert manifest_of(sintel_out)["start_frame"].iloc[0] in starts
    short = [b - a for a, b in summary["scenes"] if b - a < 15]
    assert len(short) >= 5  # shots under 15 frames are scenes of their own, not swallowed
    m = manifest_of(sintel_out)
    for row in m.itertuples():
        assert not [c for c in starts if row.start_frame < c < row.end_frame], row.clip_id


@pytest.mark.slow
def test_different_shots_of_one_scene_are_far_apart(sintel_out):
    """The flight scene's shots (frames 682-769 and 775-1014) and the desert's clips are
    different pictures of one place: their hashes are far from the duplicate threshold."""
    m = manifest_of(sintel_out)
    kept = m[m["usable"]]
    hashes = np.stack([np.asarray(h, np.int64) for h in kept["quality_hashes"]])
    distance = hamming(hashes[:, None, :], hashes[None, :, :]).mean(axis=2)
    off_diagonal = distance[~np.eye(len(kept), dtype=bool)]
    assert off_diagonal.min() > 1.5 * THRESHOLDS.duplicate_max_distance


# ------------------------------------------------------------------ cuts close together


@pytest.mark.slow
def test_cuts_1_to_15_frames_apart_all_split(tmp_path, shots):
    """Real shots of the sample separated by synthetic inserts of 1 to 15 frames: every cut
    starts a scene, no clip spans one, and each 2.5-s real shot gives exactly one clip."""
    rng = np.random.default_rng(3)
    pictures = list(shots.values())
    sequence, cuts, frame = [], [], 0
    for k in range(1, 16):
        sequence.append((pictures[k % len(pictures)], 60))
        insert = cv2.resize(_texture(rng, (240, 360), k), (720, 480))
        sequence.append((insert, k))
        cuts += [frame + 60, frame + 60 + k]
        frame += 60 + k
    sequence.append((pictures[0], 60))
    film = write_film(tmp_path / "fast_cuts.mp4", sequence)
    config = stage_config(clips__height=96, clips__width=160)  # the geometry is not tested
    [result] = run_films([film], tmp_path / "out", config, load_ip(None))
    starts = [s for s, _ in result.summary.scenes]
    assert set(cuts) <= set(starts), sorted(set(cuts) - set(starts))
    m = manifest_of(tmp_path / "out")
    for row in m.itertuples():
        assert not [c for c in cuts if row.start_frame < c < row.end_frame]
    assert len(m) == 16


# ------------------------------------------------------------------ fades, flashes, motion


def _ramp(picture: np.ndarray, gains) -> np.ndarray:
    return np.stack([np.clip(picture * g, 0, 255).astype(np.uint8) for g in gains])


def test_fades_from_and_to_black_are_rejected_but_cuts_and_steady_shots_are_not(shots):
    picture = shots[580].astype(np.float32)
    means = lambda *clips: np.array([[float(f.mean()) for f in c] for c in clips])  # noqa: E731
    fade_in = _ramp(picture, np.linspace(0.15, 1.0, 16))
    steady = _ramp(picture, np.ones(16))
    cut = _ramp(picture, [0.2] * 8 + [1.0] * 8)  # a dark shot cut to a bright one
    # fade in, fade out, a steady shot, a cut: one row each
    found = fades(means(fade_in, fade_in[::-1], steady, cut), THRESHOLDS)
    assert found.tolist() == [True, True, False, False]
    flash = _ramp(picture, [1.0] * 7 + [3.0] + [1.0] * 8)
    assert flashes(means(flash, fade_in), THRESHOLDS).tolist() == [True, False]


def test_stage_rejects_a_black_start_and_a_fade(quality_stage, shots):
    picture = shots[850].astype(np.float32)
    black_start = _ramp(picture, [0.0] + [1.0] * 15)
    assert judged(quality_stage.process(make_clip(frames=black_start))) == (False, ["black"])
    fade = quality_stage.process(make_clip(frames=_ramp(picture, np.linspace(0.2, 1.0, 16))))
    assert judged(fade) == (False, ["fade"])
    steady = quality_stage.process(make_clip(frames=_ramp(picture, np.ones(16))))
    assert judged(steady) == (True, []) and len(steady.quality_hashes) == 4


def test_brightness_changes_do_not_inflate_motion_scope(shots):
    stage = MotionScope(MotionConfig())
    stage.setup()
    picture = shots[700].astype(np.float32)
    still = _ramp(picture, np.linspace(0.75, 1.0, 16))  # a still shot brightening by a third
    assert stage.measure(still).scope == 0.0
    pan = np.stack([np.roll(picture, 4 * k, axis=1) for k in range(16)])
    steady = stage.measure(np.clip(pan, 0, 255).astype(np.uint8)).scope
    gains = np.linspace(0.75, 1.0, 16)
    brightening = np.stack([np.clip(f * g, 0, 255) for f, g in zip(pan, gains)])
    brightening = stage.measure(brightening.astype(np.uint8)).scope
    assert brightening == pytest.approx(steady, rel=0.15)


# ------------------------------------------------------------------ duplicates across films


def _episodes(tmp_path: Path, shots) -> list[Path]:
    """Two episodes sharing a 3-shot opening; the second's is re-encoded smaller, at a lower
    quality and a little brighter. Each then has two shots of its own (synthetic textures)."""
    rng = np.random.default_rng(11)
    opening = [(shots[i], 60) for i in (580, 700, 850)]
    own = [
        [(cv2.resize(_texture(rng, (240, 360), s), (720, 480)), 60) for s in (1, 2)],
        [(cv2.resize(_texture(rng, (240, 360), s), (720, 480)), 60) for s in (3, 4)],
    ]
    tmp_path.mkdir(parents=True, exist_ok=True)
    first = write_film(tmp_path / "ep01.mp4", opening + own[0], size=(240, 360), crf=18)
    second = write_film(
        tmp_path / "ep02.mp4", opening + own[1], size=(160, 240), crf=32, gain=1.05, offset=4
    )
    return [first, second]


def _duplicates(out: Path) -> dict[tuple[str, int], tuple[str, int] | None]:
    m = manifest_of(out)
    where = {r.clip_id: (r.film_name, r.start_frame) for r in m.itertuples()}
    return {
        (r.film_name, r.start_frame): where.get(r.duplicate_of) if r.duplicate_of else None
        for r in m.itertuples()
    }


@pytest.mark.slow
def test_a_shared_opening_is_a_duplicate_in_the_second_episode_whatever_the_order(tmp_path, shots):
    first, second = _episodes(tmp_path / "films", shots)
    together = tmp_path / "together"
    # 240x160 clips, 3:2 as the default 720x480 and still above the 180x120 grey copy a frame's
    # hash is made from (stages/quality/measures.py HASH_INPUT_SIZE): the rule sees the same pictures
    config = stage_config(clips__height=160, clips__width=240)
    results = run_films([second, first], together, config, load_ip(None))
    assert all(r.ok for r in results)
    duplicates = _duplicates(together)
    opening_starts = [0, 60, 120]
    for start in opening_starts:
        assert duplicates[("ep02", start)] == ("ep01", start)
        assert duplicates[("ep01", start)] is None
    assert all(duplicates[(name, s)] is None for name in ("ep01", "ep02") for s in (180, 240))
    # a film added later to the folder is compared with what is there, and the same copy is kept
    later = tmp_path / "later"
    run_films([second], later, config, load_ip(None))
    assert all(v is None for v in _duplicates(later).values())
    run_films([first], later, config, load_ip(None))
    assert _duplicates(later) == duplicates
    rows = manifest_of(later)
    assert (rows["usable"] == rows["duplicate_of"].isna()).all()


# ------------------------------------------------------------------ re-thresholding, consumers


@pytest.mark.slow
def test_quality_calibrate_rewrites_decisions_from_stored_values(sintel_out, tmp_path, capsys):
    out = tmp_path / "ds"
    shutil.copytree(sintel_out, out)
    before = manifest_of(out)
    [shard] = list(out.glob("*/shards/*.parquet"))
    videos = pq.read_table(shard, columns=["clip_id", "video"]).to_pylist()
    assert cli_main(["quality-calibrate", str(out), "--set", "reject.text_max_area=1.0"]) == 0
    after = manifest_of(out)
    assert not any("text" in rs for rs in after["reject_reasons"])
    credits = after[after["start_time"].round(1) == 48.5].iloc[0]
    assert credits["usable"] and credits["caption_status"] == "pending"
    assert json.loads((out / "quality.json").read_text())["thresholds"]["text_max_area"] == 1.0
    assert pq.read_table(shard, columns=["clip_id", "video"]).to_pylist() == videos
    summary = json.loads(next(out.glob("*/summary.json")).read_text())["quality"]
    assert "text" not in summary["by_reason"] and summary["usable"] == int(after["usable"].sum())
    assert cli_main(["quality-calibrate", str(out), "--defaults"]) == 0
    again = manifest_of(out)
    columns = ["clip_id", "usable", "reject_reasons", "duplicate_of", "caption_status"]
    for frame in (again, before):
        frame["reject_reasons"] = frame["reject_reasons"].apply(list)
    assert again[columns].to_dict("records") == before[columns].to_dict("records")
    capsys.readouterr()
    assert cli_main(["quality-calibrate", str(out), "--set", "motion.backend=dis"]) == 2
    error = capsys.readouterr().err
    assert "only reject.*" in error and error.count("\n") == 1  # one line, on stderr


@pytest.mark.slow
def test_quality_calibrate_dry_run_counts_film_by_film_and_writes_nothing(sintel_out, capsys):
    before = {p: p.stat().st_mtime_ns for p in sintel_out.rglob("*") if p.is_file()}
    assert cli_main(["quality-calibrate", str(sintel_out), "--dry-run"]) == 0
    out = capsys.readouterr().out
    m = manifest_of(sintel_out)
    assert out.startswith(f"{len(m)} clips;")
    own = pd.Series([r for rs in m["reject_reasons"] for r in rs if r != "duplicate"])
    for reason, count in own.value_counts().items():
        assert f"  {reason}: {count}" in out
    assert {p: p.stat().st_mtime_ns for p in sintel_out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_captioning_skips_unusable_clips(sintel_out, tmp_path):
    from pipeline.passes.caption_films import caption_film

    out = tmp_path / "ds"
    shutil.copytree(sintel_out, out)
    film_dir = next(p for p in out.iterdir() if p.is_dir())
    before = manifest_of(out)
    assert set(before[~before["usable"]]["caption_status"]) == {"skipped_unusable"}
    assert set(before[before["usable"]]["caption_status"]) == {"pending"}
    engine = ScriptedEngine(answer_well)
    config = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96)
    summary = caption_film(film_dir, config, None, engine=engine)
    after = manifest_of(out)
    assert len(engine.requests) == int(before["usable"].sum())  # no characters: state only
    assert summary.by_status["skipped_unusable"] == int((~before["usable"]).sum())
    assert set(after[after["usable"]]["caption_status"]) == {"ok"}
    included = replace(config, include_unusable=True)
    engine = ScriptedEngine(answer_well)
    caption_film(film_dir, included, None, engine=engine)
    assert set(manifest_of(out)["caption_status"]) == {"ok"}


@pytest.mark.slow
def test_trainer_reads_only_usable_clips_unless_told(sintel_out):
    m = manifest_of(sintel_out)
    catalog = ClipCatalog([sintel_out])
    trainable = [catalog.trainable(i) for i in range(len(catalog))]
    assert sum(trainable) == int(m["usable"].sum()) and catalog.unusable == int(
        (~m["usable"]).sum()
    )
    included = ClipCatalog([sintel_out], include_unusable=True)
    assert all(included.trainable(i) for i in range(len(included)))


@pytest.mark.slow
def test_report_and_notebook_show_rejected_clips_by_reason(sintel_out):
    dataset = open_dataset(sintel_out)
    by_reason = dataset.rejected_by_reason()
    assert set(by_reason) >= {"text", "black"}
    assert len(dataset.usable) + len(dataset.rejected) == len(dataset.manifest)
    page = build_report(dataset)
    assert "<h3>Rejected clips</h3>" in page
    for reason, count in by_reason.items():
        assert f'id="rejected-{reason}">{reason}: {count} clips' in page
    # each measured value beside its threshold, the ones that rejected the clip in bold
    assert re.search(r"<b>text area 0\.\d{4} \(text: over 0\.004\)</b>", page)
    # (the sample has no fade rejected since fades are transition spans: the black title's
    # black measure is the bold one, and the fade measure is shown, measured but not deciding)
    assert re.search(r"<b>black frames \d+ of 16, first (not )?black \(rejected: ", page)
    assert re.search(
        r"[^>]brightness \d+ to \d+, median \d+; the darker end [\d.]+x darker "
        r"\(fade: at least 1\.6x, climbing steadily\)",
        page,
    )
    # the timeline tells usable from rejected clips, and the missing captions are said once
    assert 'clips: <span class="swatch" style="background:#2e9e5b"></span>usable' in page
    assert "#c7c7c7" in page and page.count("no instruction yet") == 1


@pytest.mark.slow
def test_run_film_goes_through_the_folder_pass_like_dataset(sintel_dataset, sintel_out):
    """The fixtures' path (run_film) and the dataset command's (run_films) give one decision."""
    film = Path(sintel_dataset)
    assert (film.parent / "quality.json").is_file()
    summary = json.loads((film / "summary.json").read_text())["quality"]
    assert summary["duplicates_checked"] is True
    columns = ["clip_id", "usable", "duplicate_of", "caption_status"]
    fixture, dataset = manifest_of(film.parent), manifest_of(sintel_out)
    assert fixture[columns].to_dict("records") == dataset[columns].to_dict("records")
    assert list(map(list, fixture["reject_reasons"])) == list(map(list, dataset["reject_reasons"]))


def test_decide_adds_the_duplicate_to_a_clips_own_reasons():
    row = {"status": "error", "duplicate_of": "a" * 32}
    assert decide(row, THRESHOLDS) == (False, ["error", "duplicate"])
    assert decide({"status": "ok", "duplicate_of": None}, THRESHOLDS) == (True, [])


def test_clip_reasons_is_the_one_rule_for_stored_rows():
    row = {
        "status": "ok",
        "quality_luma_mean": [100.0] * 16,
        "quality_luma_peak": [200.0] * 16,
        "quality_text_area": 0.0,
        "motion_scope": 0.0,
    }
    assert clip_reasons(row, THRESHOLDS) == []
    assert clip_reasons(row, RejectConfig(reject_static=True)) == ["static"]
    assert clip_reasons({**row, "status": "error"}, THRESHOLDS) == ["error"]
    assert clip_reasons({**row, "quality_text_area": 0.01}, THRESHOLDS) == ["text"]
    unmeasured = {"status": "ok"}
    assert clip_reasons(unmeasured, THRESHOLDS) == []


def reasons_clip_by_clip(row: dict, t: RejectConfig) -> list[str]:
    """The rule as it was written for one clip before the pass judged a film's table at once
    (numpy on one clip's lists): the oracle for `own_reasons`."""
    reasons = []
    if row.get("status", "ok") != "ok":
        reasons.append("error")
    peaks, means = row.get("quality_luma_peak"), row.get("quality_luma_mean")
    if peaks:
        black = [p <= t.black_luma for p in peaks]
        if black[0] or sum(black) > t.black_max_frames:
            reasons.append("black")
    if means and "black" not in reasons:
        m = np.asarray(means, dtype=float) + 4.0
        median = float(np.median(m))
        for series in (m, m[::-1]):
            if median / series[0] < t.fade_min_ratio:
                continue
            climb = series[: int(np.argmax(series >= median)) + 1]
            rise, steps = climb[-1] - climb[0], np.diff(climb)
            steady = rise >= t.fade_min_steadiness * float(np.abs(steps).sum())
            if steady and float(steps.max(initial=0.0)) <= 0.5 * rise:
                reasons.append("fade")
                break
    if means and t.flash_min_jump >= 0 and len(means) >= 3:
        m = np.asarray(means)
        if ((m[1:-1] - np.maximum(m[:-2], m[2:])) >= t.flash_min_jump).any():
            reasons.append("flash")
    area = row.get("quality_text_area")
    if area is not None and area > t.text_max_area:
        reasons.append("text")
    if t.reject_static and row.get("motion_scope") == 0.0:
        reasons.append("static")
    return reasons


def random_quality_rows(rng, count: int) -> list[dict]:
    """Rows of every kind the rule meets: noise, fades (noisy and in whole grey levels, where
    ties are exact), flat clips with a flash, slow climbs; 16, 8, 3, 2 or 0 frames; nulls."""
    rows = []
    for _ in range(count):
        length = int(rng.choice([16, 16, 16, 8, 3, 2, 0]))
        kind = rng.integers(5)
        if kind == 0:
            means = rng.uniform(0, 255, length)
        elif kind == 1:
            means = np.linspace(rng.uniform(0, 30), rng.uniform(30, 200), length)
            means = (means + rng.normal(0, 3, length))[:: int(rng.choice([1, -1]))]
        elif kind == 2:
            means = np.round(np.linspace(0, rng.integers(5, 100), length))
        elif kind == 3:
            means = np.full(length, float(rng.integers(0, 50)))
            means[rng.integers(max(length, 1)) if length else slice(0)] += rng.integers(0, 100)
        else:
            means = np.cumsum(rng.integers(0, 6, length)).astype(float)
        peaks = np.clip(means + rng.uniform(0, 40, length), 0, 255)
        maybe = lambda value, share: value if rng.random() > share else None  # noqa: E731
        rows.append(
            {
                "status": maybe(str(rng.choice(["ok", "ok", "ok", "error"])), 0.01),
                "quality_luma_mean": maybe(means.tolist(), 0.02),
                "quality_luma_peak": maybe(peaks.tolist(), 0.02),
                "quality_text_area": maybe(float(rng.choice([0.0, 0.004, 0.0041, 0.01])), 0.05),
                "motion_scope": maybe(float(rng.choice([0.0, 0.5])), 0.05),
            }
        )
    return rows


@pytest.fixture(scope="module")
def random_rows() -> tuple[tuple[dict, ...], pa.Table]:
    """6000 random rows and their table, made once for the three sets of thresholds (0.86 CPU-s
    each time); read, never changed."""
    rows = tuple(random_quality_rows(np.random.default_rng(3), 6000))
    return rows, pa.Table.from_pylist(list(rows))


@pytest.mark.parametrize(
    "thresholds",
    [
        RejectConfig(),
        RejectConfig(reject_static=True, flash_min_jump=-1),
        RejectConfig(fade_min_ratio=1.0, fade_min_steadiness=0.5, black_max_frames=0),
    ],
)
def test_a_films_table_is_judged_exactly_as_clip_by_clip(random_rows, thresholds):
    rows, table = random_rows
    expected = [reasons_clip_by_clip(row, thresholds) for row in rows]
    assert own_reasons(table, thresholds) == expected
    assert [clip_reasons(row, thresholds) for row in rows[:300]] == expected[:300]
    assert {r for reasons in expected for r in reasons} >= {"error", "black", "fade", "text"}


def test_a_missing_text_model_is_a_clear_error(tmp_path):
    from stages.burned_in.text_detector import TextModelError
    from stages.quality import QualityConfig

    with pytest.raises(TextModelError, match="quality.text_model=.*no such file"):
        QualityStage(QualityConfig(text_model=str(tmp_path / "det.onnx")))
