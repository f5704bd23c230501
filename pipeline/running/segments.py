"""One time segment of a film, processed in a single decoding pass.

Every frame of the segment is decoded once and stays in the decoder's YUV planes. A small BGR copy
of it feeds scene detection; the frame itself waits in a short queue until the detector can no
longer report a cut at or before it (its `lag`), then goes to the clip splitter, which crops and
scales only the frames it samples, plane by plane, into I420 (core/frames.py). Finished clips run
through the per-clip stages (motion, encoding) while their pixels are still in memory and are
written to part files, on a second thread (`_ClipLane`), so that encoding overlaps decoding where a
core is free. A DONE marker (core/film.py), written last, makes the segment skippable on rerun.

A segment is one task with one CPU: swscale, OpenCV and x264 run one thread each (OpenCV and torch
`run.task_threads`, 1 by default), so tasks side by side on a node never oversubscribe it. The
decoder runs `run.decode_threads` (1 by default: a second thread lets a lone segment's decoding
move onto an idle core, but where every core has a task it costs CPU, docs/speed.md).
`stage_seconds` are CPU seconds of the thread that ran each stage (decode: the decoder's own
threads as well).

A film of one segment that its prepare task decoded already (a short film:
pipeline/running/film_tasks.py) is cut from those frames, held in memory, instead of decoding it
again; the held decode's CPU counts as the segment's `decode`.

Segment boundaries are forced scene boundaries: the decoder starts a little before the segment
(warm-up, so a cut in the segment's first frames is still seen) and runs a little past its end
(so the detector confirms cuts in its last frames), but only the segment's own frames become clips.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import av
import cv2

from core import storage
from core.film import (
    Drop,
    FieldRecord,
    FilmFolder,
    OverlayRecord,
    SegmentSpan,
    SegmentStats,
    WindowRecord,
)
from core.frames import PlaneSource
from core.record import STATUS_OK, Clip
from core.resources import Resources
from core.shards import ShardWriter
from core.video import FrameReader, HeldFrames
from pipeline.data.config import PipelineConfig
from stages.base import ClipStage, FilmContext, Frame, build_clip_stages, clip_schema
from stages.clips import ClipSplitter
from stages.crop import CropBox
from stages.probe import FilmInfo
from stages.scenes import BlackRuns, BlendSpans, SceneConfig, SceneCuts
from stages.sources.blending import blended_frames
from stages.sources.field_restore import FieldRestorer
from stages.transnet import GatedTransNet, TransNetSpans

WARMUP_SECONDS = 1.0
SEGMENT_SLACK = 0.05  # of a segment: how far past `seconds` one may run


@dataclass
class SegmentJob:
    film: FilmInfo
    crop: CropBox
    config: PipelineConfig
    ip: str
    segment: SegmentSpan
    folder: FilmFolder  # always local: where the segment's parts and DONE.json are made
    store: str | None = None  # the film folder's URL when the outputs live in object storage
    overlays: OverlayRecord | None = (
        None  # the film's (stages/burned_in/overlays.py), None when off
    )
    window: WindowRecord = field(kw_only=True)  # what every clip shows (stages/clips.py)
    fields: FieldRecord | None = field(default=None, kw_only=True)  # the film's field structure

    @property
    def directory(self) -> Path:
        return self.folder.segment_dir(self.segment.index)


def plan_segments(film: FilmInfo, seconds: float) -> list[SegmentSpan]:
    """Cut the film into the fewest equal segments of at most `seconds` (5 % over is let pass, so
    that a film of exactly N times `seconds` makes N).

    At most, not about: a film a little longer than `seconds` makes two tasks, not one twice as
    long as its neighbours', so a folder of such films keeps every core busy to its end.
    The plan depends on the film and the configuration only, never on the machine, so the same
    film gives the same clips on a laptop and on any cluster. Every boundary is a forced scene
    boundary, which costs at most one clip.
    """
    count = max(1, math.ceil(film.duration / seconds - SEGMENT_SLACK))
    bounds = [round(i * film.num_frames / count) for i in range(count)] + [film.num_frames]
    return [
        SegmentSpan(index=i, start=bounds[i], stop=bounds[i + 1], is_last=i == count - 1)
        for i in range(count)
    ]


def completed(job: SegmentJob, fingerprint: str) -> SegmentStats | None:
    """The segment's stats if it finished under the same settings, IP, bounds and window, else
    None. The window comes from the film's overlays, which the settings alone do not fix (the
    overlay pass may see a film anew), and a film's clips all show one window."""
    stats = job.folder.read_segment_stats(job.segment.index)
    if stats is None:
        return None
    same = stats.fingerprint == fingerprint and stats.ip == job.ip and stats.segment == job.segment
    return stats if same and stats.window == list(job.window.region) else None


def run_segment(
    job: SegmentJob,
    report: Callable[[int], None] = lambda n: None,
    held: HeldFrames | None = None,
    stages: list[ClipStage] | None = None,
) -> SegmentStats:
    """Process one segment and return its stats (what its DONE.json marker holds). `held`: the
    film's frames, decoded already for a film of one segment (core/video.py `HeldFrames`);
    `stages`: the clip stages to run, None for those the job's configuration builds (a bench
    runs its own: bench/decode_costs.py keeps the clips as cut). A run with stages of its own is
    not the configuration's run: it neither skips on nor writes the configuration's DONE.json,
    which would otherwise let a later real run in that folder skip the segment."""
    fingerprint = job.config.fingerprint()
    done = completed(job, fingerprint) if stages is None else None
    if done is not None:
        report(job.segment.stop - job.segment.start)
        return done.updated(skipped=True)
    shutil.rmtree(job.directory, ignore_errors=True)  # leftovers of an interrupted attempt
    job.directory.mkdir(parents=True)
    stats = _SegmentRun(job, report, held, stages).run()
    stats = stats.updated(fingerprint=fingerprint, ip=job.ip, window=list(job.window.region))
    if stages is None:
        job.folder.write_segment_stats(job.segment.index, stats)
    return stats


def limit_threads(threads: int) -> None:
    """Cap the thread pools a task's libraries would otherwise size to the whole node."""
    import sys

    cv2.setNumThreads(threads)
    if "torch" in sys.modules:  # only MemFlow brings torch in; never import it for this
        sys.modules["torch"].set_num_threads(threads)


class _SegmentRun:
    def __init__(
        self,
        job: SegmentJob,
        report: Callable[[int], None],
        held: HeldFrames | None = None,
        stages: list[ClipStage] | None = None,
    ):
        self.job = job
        self.report = report
        self.held = held
        film, config, seg = job.film, job.config, job.segment
        held_rule = (config.motion.held_pixel_delta, config.motion.held_max_fraction)
        self.detector = SceneCuts(config.scenes, film.fps, held_rule)
        self.black_runs = BlackRuns(config.scenes, film.fps)
        # a blend is judged once every cut within its reach is known
        cut_lag = max(self.detector.lag, self.black_runs.min_frames)
        self.blends = BlendSpans(config.scenes, film.fps, cut_lag)
        self.gradual = _gradual_detector(config.scenes)
        self.blended = blended_frames(config.blending)  # frames mixed by a rate change
        self.gated = _gated_detector(config.scenes)
        # frames a window still to be judged may reach back: its length and the gate's context
        self.gated_reach = (
            math.ceil(config.clips.seconds * film.fps) + 2 + GatedTransNet.GATE_CONTEXT
        )
        small_size = _small_size(film, config.scenes.width)
        self.pictures = PlaneSource(
            film.rotation, small_size, _detect_box(film, job.crop, small_size)
        )
        self.splitter = ClipSplitter(
            config.clips,
            film,
            job.window.region,
            job.ip,
            seg.index,
            seg.is_last,
            to_bt601=self.pictures.to_bt601,
        )
        self.stages = build_clip_stages(config) if stages is None else stages
        self.seconds: dict[str, float] = defaultdict(float)
        self.drops: list[Drop] = []
        self.frames_decoded = 0
        self.settled = job.segment.start - 1  # the last frame handed to the clip splitter
        self.late_cuts = 0
        self.restorer = (
            FieldRestorer(job.fields, film.time_base, film.fps)
            if job.fields is not None and job.fields.restoration is not None
            else None
        )
        self.shown: Frame | None = None  # the last frame settled, stand-in for a left-out one

    def run(self) -> SegmentStats:
        cv2.setNumThreads(1)  # one CPU per segment task (see the module's docstring)
        config = self.job.config
        context = FilmContext(
            self.job.overlays,
            config.clips.resize,
            config.quality.text_model,
            config.quality.text_pixel_probability,
            (self.job.crop.x, self.job.crop.y, self.job.crop.w, self.job.crop.h),
        )
        for stage in self.stages:
            stage.for_film(context)
            _timed(self.seconds, stage.name, stage.setup)
        limit_threads(config.run.task_threads)
        film = self.job.film
        reader = self.held or FrameReader(
            str(storage.local_film(film.path)), film.frame_pts, config.run.decode_threads
        )
        shards = self.job.config.shards
        with ShardWriter(self.job.directory, "part", shards, clip_schema()) as writer:
            self.lane = _ClipLane(self.stages, writer)
            try:
                self._decode_and_cut(reader)
                self.seconds["decode"] += reader.codec_thread_seconds
                self.lane.drain()
            finally:
                self.lane.close()
        return self._stats(reader)

    def _decode_and_cut(self, reader: FrameReader | HeldFrames) -> None:
        film, seg = self.job.film, self.job.segment
        lag = max(
            self.detector.lag,
            self.black_runs.lag,
            self.blends.lag,
            self.gradual.lag if self.gradual else 0,
            self.gated.lag if self.gated else 0,
            self.blended.lag if self.blended else 0,
        )
        warmup = int(WARMUP_SECONDS * film.fps) + lag
        cuts: set[int] = set()
        self.transition_frames: set[int] = set()
        self.flash_frames: set[int] = set()
        waiting: deque[tuple[int, Frame]] = deque()
        last = seg.start
        frames = reader.frames(max(0, seg.start - warmup), min(film.num_frames, seg.stop + lag))
        frames = self._timed_iter("decode", frames)
        if self.restorer is not None:  # the restored pictures, as the film pass decided
            frames = self.restorer.frames(frames)
        # A frame waits until `lag` more frames were decoded after it (counted in frames
        # decoded, so a gap in the indices cannot shorten the wait).
        for decoded, (index, picture) in enumerate(frames):
            last = index
            frame = self._frame(index, picture)
            self._detect(frame, cuts)
            if seg.start <= index < seg.stop:
                waiting.append((decoded, frame))
            while waiting and waiting[0][0] <= decoded - lag:
                self._settle(waiting.popleft()[1], cuts)
        self._finish_detecting(last + 1, cuts)
        while waiting:
            self._settle(waiting.popleft()[1], cuts)
        self._stand_in(seg.stop)
        self._handle(self.splitter.finish(seg.stop))

    def _detect(self, frame: Frame, cuts: set[int]) -> None:
        """Every frame-level detector's look at one decoded frame, in this order (the blend rule
        is told the cuts the other two found first): cuts into `cuts`, flashes and transition
        frames into their sets."""
        for cut in _timed(self.seconds, "scenes", self.detector.process, frame):
            self._add_cut(cut, cuts)
        self.flash_frames.update(self.detector.take_flashes())
        for cut in _timed(self.seconds, "boundaries", self.black_runs.process, frame):
            self._add_cut(cut, cuts)
        self.transition_frames.update(self.black_runs.take_transition_frames())
        self.transition_frames.update(_timed(self.seconds, "blends", self.blends.process, frame))
        if self.blended is not None:
            _timed(self.seconds, "blending", self.blended.process, frame)
        if self.gradual is not None:
            found = _timed(self.seconds, "transitions", self.gradual.process, frame)
            self.transition_frames.update(found)
        if self.gated is not None:
            oldest = self.settled - self.gated_reach
            _timed(self.seconds, "transitions", self.gated.add, frame, oldest)

    def _finish_detecting(self, end: int, cuts: set[int]) -> None:
        """No frame at or after `end` will come: what each detector still held."""
        for cut in self.detector.finish(end):
            self._add_cut(cut, cuts)
        self.flash_frames.update(self.detector.take_flashes())
        self.black_runs.finish(end)
        self.transition_frames.update(_timed(self.seconds, "blends", self.blends.finish, end))
        if self.gradual is not None:
            found = _timed(self.seconds, "transitions", self.gradual.finish, end)
            self.transition_frames.update(found)

    def _add_cut(self, cut: int, cuts: set[int]) -> None:
        """A cut reported after its frame was already cut into clips (a detector that reports
        later than its lag, e.g. the threshold detector in a long fade) starts the scene at the
        next frame instead, and is counted: raise scenes.lag_seconds if late_cuts is not 0."""
        self.blends.cut(cut)
        if cut <= self.settled:
            self.late_cuts += cut >= self.job.segment.start
            cut = self.settled + 1
        cuts.add(cut)

    def _settle(self, frame: Frame, cuts: set[int]) -> None:
        self._stand_in(frame.index)
        self.settled = frame.index
        frame.starts_scene = frame.index == self.job.segment.start or frame.index in cuts
        frame.in_transition = frame.index in self.transition_frames
        frame.is_flash = frame.index in self.flash_frames
        self.frames_decoded += 1
        if self.frames_decoded % 64 == 0:
            self.report(64)
        self._handle(_timed(self.seconds, "split", self.splitter.process, frame))
        self.shown = frame

    def _stand_in(self, index: int) -> None:
        """Frames decimation left out before `index` (stages/sources/field_restore.py) reach the clip
        splitter as one-frame flashes do: a sample due at one shows the kept frame before it."""
        if self.restorer is None or self.shown is None:
            return
        shown = self.shown
        for left_out in range(self.settled + 1, index):
            if left_out in self.restorer.dropped:
                stand_in = Frame(
                    left_out,
                    small=shown.small,
                    planes=shown.planes,
                    in_transition=shown.in_transition,
                    is_flash=True,
                )
                self._handle(_timed(self.seconds, "split", self.splitter.process, stand_in))

    def _frame(self, index: int, picture: av.VideoFrame) -> Frame:
        pictures = self.pictures
        small = _timed(self.seconds, "scenes", pictures.small_bgr, picture)  # needed right away
        return Frame(index, small=lambda: small, planes=lambda: pictures.planes(picture))

    def _handle(self, items: list) -> None:
        for item in items:
            if isinstance(item, Drop):
                self.drops.append(item)
            elif (dropped := self._judged(item)) is not None:
                self.drops.append(dropped)
            else:
                if self.blended is not None:  # every frame of the window was judged by now
                    share = self.blended.share(item.start_frame, item.end_frame)
                    item.blended = round(share, 5)
                self.lane.submit(item)

    def _judged(self, clip: Clip) -> Drop | None:
        """With scenes.gradual=gated, a clip whose window TransNetV2 marks becomes a drop."""
        if self.gated is None:
            return None
        why = _timed(
            self.seconds, "transitions", self.gated.judge, clip.start_frame, clip.end_frame
        )
        if why is None:
            return None
        return Drop(
            reason="transition",
            start_frame=clip.start_frame,
            end_frame=clip.end_frame,
            start_time=clip.start_time,
            end_time=clip.end_time,
            detail=why,
        )

    def _timed_iter(self, name: str, iterator):
        while True:
            began = time.thread_time()
            try:
                item = next(iterator)
            except StopIteration:
                self.seconds[name] += time.thread_time() - began
                return
            self.seconds[name] += time.thread_time() - began
            yield item

    def _stage_seconds(self) -> dict[str, float]:
        total = defaultdict(float, self.seconds)
        if self.restorer is not None:  # restoring is its own stage, not decoding
            total["field_restore"] += self.restorer.seconds
        for name, seconds in self.lane.seconds.items():
            total[name] += seconds
        return total

    def _stats(self, reader: FrameReader | HeldFrames) -> SegmentStats:
        self.report(self.frames_decoded % 64)
        return SegmentStats(
            segment=self.job.segment,
            clips_written=self.lane.written,
            clips_failed=self.lane.failed,
            frames=self.frames_decoded,
            corrupt_packets=reader.corrupt_packets,
            unmatched_frames=reader.unmatched_frames,
            late_cuts=self.late_cuts,
            fields_dropped=len(self._dropped_here()),
            black_frames=self.black_runs.frames_within(
                self.job.segment.start, self.job.segment.stop
            ),
            drop_list=list(self.drops),
            scenes=self.splitter.scenes,
            parts=sorted(p.name for p in self.lane.writer.paths),
            stage_seconds={k: round(v, 4) for k, v in self._stage_seconds().items()},
            absent=frozenset({"fingerprint", "ip"}),  # set once the segment is done
        )

    def _dropped_here(self) -> set[int]:
        if self.restorer is None:
            return set()
        seg = self.job.segment
        return {i for i in self.restorer.dropped if seg.start <= i < seg.stop}


class _ClipLane:
    """The per-clip stages and the part writer, on one thread beside the decoding loop.

    Clips go through one at a time, in the order they were cut, so bytes and part files are those
    of a sequential run; at most `depth` clips wait, so memory stays at a few clips' pixels. On a
    busy node the two threads share the task's CPU; where a core is idle (the last segments of a
    film) encoding runs beside decoding. An error in the lane (a failing write) is raised again
    in the segment's thread by the next `submit` or `drain`.
    """

    def __init__(self, stages: list[ClipStage], writer: ShardWriter, depth: int = 2):
        self.stages, self.writer, self.depth = stages, writer, depth
        self.seconds: dict[str, float] = defaultdict(float)
        self.written = 0
        self.failed = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clip-lane")
        self._pending: deque[Future] = deque()

    def submit(self, clip: Clip) -> None:
        self._pending.append(self._pool.submit(self._finish, clip))
        while len(self._pending) > self.depth:
            self._pending.popleft().result()

    def drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        """Wait for the lane to stop (the writer must not close under a write)."""
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)

    def _finish(self, clip: Clip) -> None:
        for stage in self.stages:
            clip = _timed(self.seconds, stage.name, stage.process_safely, clip)
        clip.frames = None  # a failed stage may leave pixels behind: never hold them
        _timed(self.seconds, "write", self.writer.write, clip)
        self.written += 1
        self.failed += clip.status != STATUS_OK


def _timed(seconds: dict[str, float], name: str, fn, *args):
    """Call fn(*args), adding the CPU seconds this thread spent in it to seconds[name]."""
    began = time.thread_time()
    try:
        return fn(*args)
    finally:
        seconds[name] += time.thread_time() - began


def frame_stage_resources(config: PipelineConfig) -> dict[str, Resources]:
    """What the frame-level stages a segment runs with `config` reserve, by name (those that
    reserve nothing beyond the task's CPU are left out): the learned transition detector when it
    runs on a GPU."""
    gradual = _gradual_detector(config.scenes) or _gated_detector(config.scenes)  # loads nothing
    return {"transitions": gradual.resources} if gradual is not None else {}


def _gradual_detector(config: SceneConfig) -> TransNetSpans | None:
    if config.gradual != "transnetv2":
        return None
    return TransNetSpans(config.gradual_threshold, config.gradual_min_frames, config.gradual_device)


def _gated_detector(config: SceneConfig) -> GatedTransNet | None:
    if config.gradual != "gated":
        return None
    return GatedTransNet(
        config.gradual_gate,
        config.gradual_threshold,
        config.gradual_min_frames,
        config.gradual_device,
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
