"""Bad and unusual input: a clear one-line error or a correct result, never a lost film."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
from conftest import BIKES, animegamer, damaged_copy, local_config, make_video

from core.shards import read_clips
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.probe import FilmError, Probe


def _dataset(*args, out):
    """`animegamer dataset ARGS --out OUT` in this process's executor, without a progress bar."""
    return animegamer("dataset", *args, "--out", out, "--executor", "local", "--quiet")


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _audio_only(path):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        for i in range(40):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 16000, i * 1024
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda d: d / "missing.mp4", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d / "empty.mp4", b""), "the file is empty"),
        (lambda d: _write(d / "notes.mp4", b"not a video\n" * 50), "not a readable video"),
        (lambda d: _audio_only(d / "sound.m4a"), "has no video stream"),
    ],
)
def test_probe_rejects_bad_files_naming_them(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(FilmError) as error:
        Probe().process(path)
    message = str(error.value)
    assert message.startswith(str(path)) and expected in message
    assert "\n" not in message


def test_video_shorter_than_a_clip_is_a_clear_error(tmp_path):
    film = make_video(tmp_path / "short.mp4", num_frames=30, fps=24)
    with pytest.raises(FilmError, match=r"short.mp4: the video is 1.25 s long; a clip needs 2 s"):
        run_film(film, tmp_path / "out", local_config(), load_ip(None))


def test_truncated_file_keeps_what_can_be_read(tmp_path):
    data = BIKES.read_bytes()
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(data[: int(len(data) * 0.6)])
    try:
        result = run_film(truncated, tmp_path / "out", local_config(), load_ip(None))
    except FilmError as error:  # the index (moov) lies past the cut: nothing is readable
        assert str(truncated) in str(error)
        return
    clips = list(read_clips(result.film_dir))
    assert all(c.status == "ok" for c in clips)
    assert all(max(c.frame_indices) < result.summary.film.num_frames for c in clips)


@pytest.mark.slow
def test_corrupt_packets_are_counted_not_fatal(tmp_path):
    corrupt = damaged_copy(BIKES, tmp_path / "corrupt.mp4", seed=3)
    result = run_film(corrupt, tmp_path / "out", local_config(), load_ip(None))
    summary = result.summary
    assert summary.complete
    # whatever the decoder could not use is either a counted drop or a concealed frame
    assert summary.clips_written + sum(summary.drops.values()) >= 3


def test_unusual_codec_and_container(tmp_path):
    # small frames: the codec and container are the point, and the film pictures' text detection
    # costs a third of a 360x640 film's
    film = make_video(
        tmp_path / "mpeg4.avi", codec="mpeg4", size=(144, 256), cuts=(60,), num_frames=120, fps=25
    )
    result = run_film(film, tmp_path / "out", local_config(), load_ip(None))
    assert result.summary.film.codec == "mpeg4"
    assert [s for s, _ in result.summary.scenes] == [0, 60]
    assert result.summary.clips_written == 2


@pytest.mark.slow
def test_cli_reports_bad_film_and_still_processes_the_good_one(tmp_path):
    good = make_video(tmp_path / "good.mp4", cuts=(50,), num_frames=110, fps=24)
    bad = tmp_path / "bad.mp4"
    bad.write_text("garbage")
    run = _dataset(bad, good, out=tmp_path / "out")
    assert run.returncode == 1
    assert f"error: {bad}: not a readable video" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    summaries = list((tmp_path / "out").glob("good-*/summary.json"))
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["clips_written"] == 2


@pytest.mark.slow
def test_cli_help_lists_every_setting():
    run = animegamer("dataset", "--help", timeout=120)
    assert run.returncode == 0
    for name in (
        "crop.box",
        "scenes.detector",
        "clips.resize",
        "run.segment_seconds",
        "shards.max_bytes",
        "motion.enabled",
        "caption.model",
    ):
        assert name in run.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "clips.resize=squash"], "clips.resize='squash': choose one of"),
        # each case is a subprocess (over 4 s here): one runs in make test-fast, all in make test
        pytest.param(
            ["--set", "scenes.detector=magic"],
            "scenes.detector='magic': choose one of",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["--set", "clips.crf=[1"], "the value is not valid YAML", marks=pytest.mark.slow
        ),
        pytest.param(["--set", "motion.backend=memflow"], "memflow", marks=pytest.mark.slow),
    ],
)
def test_bad_settings_stop_before_any_film_with_one_line(tmp_path, args, message):
    run = _dataset(BIKES, *args, out=tmp_path)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not list(tmp_path.iterdir())


def test_bad_manifests_are_refused_when_loaded(tmp_path):
    from pipeline.data.ip import ManifestError

    manifest = tmp_path / "ip.yaml"
    manifest.write_text(
        "name: x\nfilms:\n  - path: a.mp4\n    overrides: {scene: {threshold: 3}}\n"
    )
    with pytest.raises(ManifestError, match="unknown section 'scene'"):
        load_ip(manifest)
    manifest.write_text("name: x\nfilms: [a.mp4\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_ip(manifest)


@pytest.mark.slow
def test_a_crop_box_that_does_not_fit_fails_only_its_film(tmp_path):
    make_video(tmp_path / "good.mp4", cuts=(50,), num_frames=110, fps=24)
    small = make_video(tmp_path / "small.mp4", size=(120, 160), num_frames=60, fps=24)
    manifest = tmp_path / "ip.yaml"
    manifest.write_text(
        "name: x\nfilms:\n  - path: small.mp4\n"
        "    overrides: {crop: {box: [0, 0, 640, 360]}}\n  - path: good.mp4\n"
    )
    run = _dataset("--ip", manifest, out=tmp_path / "out")
    assert run.returncode == 1
    assert f"error: {small.resolve()}: crop box [0, 0, 640, 360] does not fit" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert list((tmp_path / "out").glob("good-*/summary.json"))
