"""A short film is decoded once (issue 39): a film of one segment whose frames fit in
`run.decode_once_mib` is decoded first to last in its prepare task, which cuts its segment from
the held frames, and the clips are byte for byte those of a prepare and a segment that each
decode it. Counted through real runs on a 6-s film encoded as delivered clips are (x264 veryfast:
B-frames, few key frames), whose samples and field runs come from one pass over its start."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from conftest import BIKES, assert_same_parquet, local_config, write_frames

from core.video import FrameReader, HeldFrames
from pipeline.data.ip import load_ip
from pipeline.running.film_tasks import (
    FilmPlan,
    PrepareJob,
    prepare_film,
    run_stored_segment,
    segment_job,
)
from pipeline.running.runner import run_film, run_films
from stages.probe import Probe

SIZE = (640, 360)
FRAMES = 144  # 6 s at 24 fps, as the bench's folder of short films


@pytest.fixture(scope="module")
def six_second_film(tmp_path_factory) -> Path:
    """bikes.mp4's first 144 frames at 640x360, 24 fps, x264 veryfast (few key frames)."""
    pictures = []
    with av.open(str(BIKES)) as source:
        for frame in source.decode(video=0):
            pictures.append(cv2.resize(frame.to_ndarray(format="rgb24"), SIZE))
            if len(pictures) == FRAMES:
                break
    path = tmp_path_factory.mktemp("decode_once") / "short.mp4"
    return write_frames(path, pictures, 24, crf=20, preset="veryfast")


class DecodedFrames:
    """Frames the decoder gives out for each film, through FrameReader's two ways in: every
    pass that decodes a film's frames uses one of them (the probe decodes its first frame on
    its own)."""

    def __init__(self, monkeypatch):
        self.frames: Counter[str] = Counter()
        for name in ("frames", "keyframes"):
            monkeypatch.setattr(FrameReader, name, self._counted(getattr(FrameReader, name)))

    def _counted(self, method):
        def counted(reader, *args, **kwargs):
            for item in method(reader, *args, **kwargs):
                self.frames[str(reader.path)] += 1
                yield item

        return counted


def _cut(film: Path, out: Path, **settings):
    result = run_film(film, out, local_config(**settings), load_ip(None))
    assert result.ok, result.message
    return result


def test_a_short_film_is_decoded_once_with_the_same_clips(tmp_path, six_second_film, monkeypatch):
    film = Probe().process(six_second_film)
    assert film.num_frames == FRAMES and film.keyframes < 8  # samples from one pass, not key frames
    decoded = DecodedFrames(monkeypatch)
    once = _cut(six_second_film, tmp_path / "once")
    assert decoded.frames[str(six_second_film)] == FRAMES  # each frame once, prepare and segment
    assert once.summary.segments == 1 and once.summary.clips_written > 0
    assert once.summary.segment_runs[0]["ran_on"]["node"] == "local"

    decoded.frames.clear()
    twice = _cut(six_second_film, tmp_path / "twice", run__decode_once_mib="0")
    assert decoded.frames[str(six_second_film)] >= 1.5 * FRAMES  # samples, runs, then segment
    assert_same_parquet(Path(once.film_dir), Path(twice.film_dir))

    decoded.frames.clear()
    too_big = _cut(six_second_film, tmp_path / "too_big", run__decode_once_mib="1")
    assert decoded.frames[str(six_second_film)] >= 1.5 * FRAMES  # 144 frames of 340 KiB
    assert_same_parquet(Path(too_big.film_dir), Path(once.film_dir))


def test_a_short_films_committed_segment_is_not_decoded_again(
    tmp_path, six_second_film, monkeypatch
):
    """A rerun after the segment committed (its DONE marker) but before the film did: prepare
    decodes its samples alone, the segment task skips, the outputs are the same."""
    config, ip, out = local_config(), load_ip(None), tmp_path / "out"
    plan = prepare_film(PrepareJob(six_second_film, out, config, ip))
    assert isinstance(plan, FilmPlan) and plan.cut is None  # only the scheduler allows it
    run_stored_segment(segment_job(plan, config, ip, plan.segments[0]))
    decoded = DecodedFrames(monkeypatch)
    again = _cut(six_second_film, out)
    assert 0 < decoded.frames[str(six_second_film)] < FRAMES
    assert again.summary.segments_reused == 1
    assert_same_parquet(
        Path(again.film_dir), Path(_cut(six_second_film, tmp_path / "fresh").film_dir)
    )


@pytest.mark.slow
def test_the_pool_cuts_a_short_film_in_its_prepare_task_as_the_local_executor(
    tmp_path, six_second_film
):
    local = _cut(six_second_film, tmp_path / "local", run__decode_once_mib="0")
    pool = _cut(six_second_film, tmp_path / "pool", run__executor="processes", run__num_cpus="1")
    assert pool.summary.segment_runs[0]["ran_on"]["node"] == "local"
    assert_same_parquet(Path(pool.film_dir), Path(local.film_dir))
    rerun = run_films([six_second_film], tmp_path / "pool", local_config(), load_ip(None))
    assert rerun[0].ok and "already complete" in rerun[0].message


def test_held_frames_are_the_readers_from_the_films_start(six_second_film):
    film = Probe().process(six_second_film)
    held = HeldFrames.decode(str(six_second_film), film.frame_pts, 1, 256 * 2**20)
    assert held is not None
    read = FrameReader(str(six_second_film), film.frame_pts, threads=2).frames(0, 100)
    pairs = list(zip(held.frames(0, 100), read, strict=True))
    assert [i for (i, _), _ in pairs] == list(range(100))
    for (index, kept), (same, frame) in pairs:
        assert index == same
        assert np.array_equal(kept.to_ndarray(format="yuv420p"), frame.to_ndarray(format="yuv420p"))
    assert held.corrupt_packets == held.unmatched_frames == 0
    with pytest.raises(ValueError, match="from the film's start"):
        next(held.frames(10, 20))
    frame_bytes = SIZE[0] * SIZE[1] * 3 // 2
    assert HeldFrames.decode(str(six_second_film), film.frame_pts, 1, 100 * frame_bytes) is None


def test_films_that_may_share_a_folder_are_prepared_and_cut_apart(
    tmp_path, six_second_film, monkeypatch
):
    """Two films of one name in two folders share an output folder when their content is the
    same, which the scheduler learns only once both are prepared: neither may cut its segment
    in its prepare task (under the process pool, two tasks would write one folder at once)."""
    films = []
    for series in ("a", "b"):
        (tmp_path / series).mkdir()
        films.append(shutil.copy(six_second_film, tmp_path / series / "short.mp4"))
    decoded = DecodedFrames(monkeypatch)
    results = run_films(films, tmp_path / "out", local_config(), load_ip(None))
    assert [r.ok for r in results] == [True, True]
    assert "the same film as" in results[1].message
    assert decoded.frames[str(films[0])] >= 1.5 * FRAMES  # its samples, then its segment task
    assert 0 < decoded.frames[str(films[1])] < FRAMES  # its samples; no segment of its own
