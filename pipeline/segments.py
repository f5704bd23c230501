"""One time segment of a film, processed in a single decoding pass.

Every frame of the segment is decoded once. A small BGR copy of it feeds scene detection; the
frame itself waits in a short queue until the detector can no longer report a cut at or before it
(its `lag`), then goes to the clip splitter, which converts only the frames it samples. Finished
clips run through the per-clip stages (motion, encoding) while their pixels are still in memory and
are written to part files. A DONE marker (core/film.py), written last, makes the segment skippable on rerun.

Segment boundaries are forced scene boundaries: the decoder starts a little before the segment
(warm-up, so a cut in the segment's first frames is still seen) and runs a little past its end
(so the detector confirms cuts in its last frames), but only the segment's own frames become clips.
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import cv2
import numpy as np

from core import storage
from core.film import FilmFolder, SegmentStats
from core.record import STATUS_OK
from core.shards import ShardWriter
from core.video import FrameReader, rotate_frame
from pipeline.config import PipelineConfig
from stages.base import Frame, build_clip_stages
from stages.clips import ClipSplitter, Drop
from stages.crop import CropBox
from stages.probe import FilmInfo
from stages.scenes import BlackRuns, SceneCuts

WARMUP_SECONDS = 1.0


@dataclass(frozen=True)
class Segment:
    index: int
    start: int  # first frame the segment owns
    stop: int  # exclusive
    is_last: bool


@dataclass
class SegmentJob:
    film: FilmInfo
    crop: CropBox
    config: PipelineConfig
    ip: str
    segment: Segment
    folder: FilmFolder  # always local: where the segment's parts and DONE.json are made
    store: str | None = None  # the film folder's URL when the outputs live in object storage

    @property
    def directory(self) -> Path:
        return self.folder.segment_dir(self.segment.index)


def plan_segments(film: FilmInfo, seconds: float) -> list[Segment]:
    """Cut the film into equal segments of about `seconds`.

    The plan depends on the film and the configuration only, never on the machine, so the same
    film gives the same clips on a laptop and on any cluster. Every boundary is a forced scene
    boundary, which costs at most one clip.
    """
    count = max(1, round(film.duration / seconds))
    bounds = [round(i * film.num_frames / count) for i in range(count)] + [film.num_frames]
    return [Segment(i, bounds[i], bounds[i + 1], i == count - 1) for i in range(count)]


def completed(job: SegmentJob, fingerprint: str) -> SegmentStats | None:
    """The segment's stats if it finished under the same settings, IP and bounds, else None."""
    stats = job.folder.read_segment_stats(job.segment.index)
    if stats is None:
        return None
    same = (
        stats.fingerprint == fingerprint
        and stats.ip == job.ip
        and stats.segment == asdict(job.segment)
    )
    return stats if same else None


def run_segment(job: SegmentJob, report: Callable[[int], None] = lambda n: None) -> SegmentStats:
    """Process one segment and return its stats (what its DONE.json marker holds)."""
    fingerprint = job.config.fingerprint()
    done = completed(job, fingerprint)
    if done is not None:
        report(job.segment.stop - job.segment.start)
        return done.updated(skipped=True)
    shutil.rmtree(job.directory, ignore_errors=True)  # leftovers of an interrupted attempt
    job.directory.mkdir(parents=True)
    stats = _SegmentRun(job, report).run().updated(fingerprint=fingerprint, ip=job.ip)
    job.folder.write_segment_stats(job.segment.index, stats)
    return stats


def limit_threads(threads: int) -> None:
    """Cap the thread pools a task's libraries would otherwise size to the whole node."""
    import sys

    cv2.setNumThreads(threads)
    if "torch" in sys.modules:  # only MemFlow brings torch in; never import it for this
        sys.modules["torch"].set_num_threads(threads)


class _SegmentRun:
    def __init__(self, job: SegmentJob, report: Callable[[int], None]):
        self.job = job
        self.report = report
        film, config, seg = job.film, job.config, job.segment
        self.detector = SceneCuts(config.scenes, film.fps)
        self.black_runs = BlackRuns(config.scenes, film.fps)
        self.splitter = ClipSplitter(config.clips, film, job.crop, job.ip, seg.index, seg.is_last)
        self.stages = build_clip_stages(config)
        self.small_size = _small_size(film, config.scenes.width)
        self.seconds: dict[str, float] = defaultdict(float)
        self.drops: list[Drop] = []
        self.clips_written = 0
        self.clips_failed = 0
        self.frames_decoded = 0
        self.settled = job.segment.start - 1  # the last frame handed to the clip splitter
        self.late_cuts = 0
        self.detect_box = _detect_box(film, job.crop, self.small_size)

    def run(self) -> SegmentStats:
        film, seg = self.job.film, self.job.segment
        for stage in self.stages:
            self._timed(stage.name, stage.setup)
        threads = self.job.config.run.task_threads
        limit_threads(threads)
        lag = max(self.detector.lag, self.black_runs.lag)
        warmup = int(WARMUP_SECONDS * film.fps) + lag
        reader = FrameReader(str(storage.local_film(film.path)), film.frame_pts, threads)
        cuts: set[int] = set()
        waiting: deque[tuple[int, Frame]] = deque()
        last = seg.start
        with ShardWriter(self.job.directory, "part", self.job.config.shards) as writer:
            self.writer = writer
            frames = reader.frames(max(0, seg.start - warmup), min(film.num_frames, seg.stop + lag))
            # A frame waits until `lag` more frames were decoded after it (counted in frames
            # decoded, so a gap in the indices cannot shorten the wait).
            for decoded, (index, picture) in enumerate(self._timed_iter("decode", frames)):
                last = index
                frame = self._frame(index, picture)
                for cut in self._timed("scenes", self.detector.process, frame):
                    self._add_cut(cut, cuts)
                for cut in self._timed("black", self.black_runs.process, frame):
                    self._add_cut(cut, cuts)
                if seg.start <= index < seg.stop:
                    waiting.append((decoded, frame))
                while waiting and waiting[0][0] <= decoded - lag:
                    self._settle(waiting.popleft()[1], cuts)
            for cut in self.detector.finish(last + 1):
                self._add_cut(cut, cuts)
            self.black_runs.finish(last + 1)
            while waiting:
                self._settle(waiting.popleft()[1], cuts)
            self._handle(self.splitter.finish(seg.stop))
        return self._stats(reader)

    def _add_cut(self, cut: int, cuts: set[int]) -> None:
        """A cut reported after its frame was already cut into clips (a detector that reports
        later than its lag, e.g. the threshold detector in a long fade) starts the scene at the
        next frame instead, and is counted: raise scenes.lag_seconds if late_cuts is not 0."""
        if cut <= self.settled:
            self.late_cuts += cut >= self.job.segment.start
            cut = self.settled + 1
        cuts.add(cut)

    def _settle(self, frame: Frame, cuts: set[int]) -> None:
        self.settled = frame.index
        frame.starts_scene = frame.index == self.job.segment.start or frame.index in cuts
        self.frames_decoded += 1
        if self.frames_decoded % 64 == 0:
            self.report(64)
        self._handle(self._timed("split", self.splitter.process, frame))

    def _frame(self, index: int, picture: av.VideoFrame) -> Frame:
        small = self._small(picture)  # always needed, by scene detection, right away
        return Frame(index, small=lambda: small, rgb=lambda: self._rgb(picture))

    def _handle(self, items: list) -> None:
        for item in items:
            if isinstance(item, Drop):
                self.drops.append(item)
                continue
            clip = item
            for stage in self.stages:
                clip = self._timed(stage.name, stage.process_safely, clip)
            clip.frames = None  # a failed stage may leave pixels behind: never hold them
            self._timed("write", self.writer.write, clip)
            self.clips_written += 1
            self.clips_failed += clip.status != STATUS_OK

    def _small(self, frame: av.VideoFrame) -> np.ndarray:
        """The cropped picture at detection size, in BGR as PySceneDetect expects."""
        width, height = self.small_size
        small = frame.reformat(width=width, height=height, format="bgr24").to_ndarray()
        small = rotate_frame(small, self.job.film.rotation)
        x0, y0, x1, y1 = self.detect_box
        return np.ascontiguousarray(small[y0:y1, x0:x1])

    def _rgb(self, frame: av.VideoFrame) -> np.ndarray:
        return rotate_frame(frame.to_ndarray(format="rgb24"), self.job.film.rotation)

    def _timed(self, name: str, fn, *args):
        began = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds[name] += time.perf_counter() - began

    def _timed_iter(self, name: str, iterator):
        while True:
            began = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                self.seconds[name] += time.perf_counter() - began
                return
            self.seconds[name] += time.perf_counter() - began
            yield item

    def _stats(self, reader: FrameReader) -> SegmentStats:
        self.report(self.frames_decoded % 64)
        return SegmentStats(
            segment=asdict(self.job.segment),
            clips_written=self.clips_written,
            clips_failed=self.clips_failed,
            frames=self.frames_decoded,
            corrupt_packets=reader.corrupt_packets,
            unmatched_frames=reader.unmatched_frames,
            late_cuts=self.late_cuts,
            black_frames=self.black_runs.frames_within(
                self.job.segment.start, self.job.segment.stop
            ),
            drop_list=[asdict(d) for d in self.drops],
            scenes=self.splitter.scenes,
            parts=sorted(p.name for p in self.writer.paths),
            stage_seconds={k: round(v, 4) for k, v in self.seconds.items()},
            absent=frozenset({"fingerprint", "ip"}),  # set once the segment is done
        )


def _detect_box(film: FilmInfo, crop: CropBox, small_size: tuple[int, int]) -> tuple[int, ...]:
    """The crop box in the (upright) detection-size frame: x0, y0, x1, y1."""
    width, height = small_size
    if film.rotation in (90, 270):
        width, height = height, width
    sx, sy = width / film.width, height / film.height
    x0, y0 = int(crop.x * sx), int(crop.y * sy)
    return (
        x0,
        y0,
        max(x0 + 2, int((crop.x + crop.w) * sx)),
        max(y0 + 2, int((crop.y + crop.h) * sy)),
    )


def _small_size(film: FilmInfo, width: int) -> tuple[int, int]:
    """Detection size in decoded (unrotated) orientation, scaled to `width` across the picture."""
    coded_w, coded_h = (
        (film.height, film.width) if film.rotation in (90, 270) else (film.width, film.height)
    )
    scale = min(1.0, width / max(film.width, 1))
    return max(2, int(coded_w * scale) // 2 * 2), max(2, int(coded_h * scale) // 2 * 2)
