"""Run the pipeline on a corpus of films: every film's probe and border crop, its segments and its
finalize step are tasks on the executor, all films scheduled together (a bounded number in
flight), so a folder of short films keeps every CPU of a node or cluster busy. The driver only
routes task results; a film's output never depends on the order in which its tasks finish.

Output of a film: the folder OUT/<film_slug>/ that core/film.py describes (shards, manifest,
drops, summary.json, and work/ while segments are under way). OUT may be an fsspec URL: work is
then done in local scratch folders and published with core/storage.py's commit rules.

Reruns are safe: a complete film is skipped; an interrupted one redoes only the segments without
a DONE marker, then finalizes again: shards, manifest and drops are byte for byte those of an
uninterrupted run (summary.json differs only in its timings, segments_reused and where each
segment ran).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import storage
from core.cli import Interrupted
from core.film import (
    DONE_FILE,
    SUMMARY_FILE,
    WORK_DIR,
    CropRecord,
    Drop,
    FilmFacts,
    FilmFolder,
    FilmSummary,
    FolderError,
    OverlayRecord,
    SegmentSpan,
    SegmentStats,
)
from core.io import write_table_atomic
from core.resources import Resources
from core.schema import DROP_SCHEMA, SCHEMA_VERSION, rows_to_table
from core.shards import ShardWriter, read_clips
from pipeline.config import ConfigError, PipelineConfig, apply_mapping, check_choices
from pipeline.corpus import write_dataset_summary
from pipeline.executors import Executor, make_executor
from pipeline.folder_passes import caption_pass, quality_pass
from pipeline.ip import IP
from pipeline.manifest import write_manifest
from pipeline.segments import (
    SegmentJob,
    frame_stage_resources,
    limit_threads,
    plan_segments,
    run_segment,
)
from stages.base import build_clip_stages, clip_schema
from stages.clips import source_scale
from stages.crop import BorderCrop, CropBox, sample_luma_frames
from stages.overlays import film_overlays, overlay_frames
from stages.probe import FilmError, FilmInfo, Probe

log = logging.getLogger(__name__)


def _no_report(n: int) -> None:
    pass


@dataclass
class FilmResult:
    path: str
    film_dir: str | Path | None
    ok: bool
    message: str
    summary: FilmSummary | None = None


@dataclass
class PrepareJob:
    path: str | Path
    out_dir: str | Path
    config: PipelineConfig
    ip: IP
    force: bool = False  # cut again even if a complete run committed the film


@dataclass
class FilmPlan:
    """A probed film ready to be cut: its facts, crop box and segments."""

    film: FilmInfo
    crop: CropBox
    film_dir: str | Path  # a local path or an fsspec URL
    segments: list[SegmentSpan]
    seconds: dict[str, float]
    overlays: OverlayRecord | None = None  # None: overlays.enabled is off


@dataclass
class FinalizeJob:
    plan: FilmPlan
    config: PipelineConfig
    ip: IP
    segment_results: list
    started_at: float  # wall clock (time.time) when the film's first task was submitted


def film_config(base: PipelineConfig, ip: IP, film_path: str | Path) -> PipelineConfig:
    """The base configuration with the IP manifest's overrides for this film applied."""
    import copy

    config = copy.deepcopy(base)
    overrides = ip.overrides_for(film_path)
    if overrides:
        source = f"{ip.source}: overrides of {film_path}"
        apply_mapping(config, overrides, source=source)
        check_choices(config, source)
    return config


def run_films(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    config: PipelineConfig,
    ip: IP,
    executor: Executor | None = None,
    ip_for: dict[str, IP] | None = None,
    force: bool = False,
) -> list[FilmResult]:
    """All films at once: each film's probe, crop, segments and finalize are tasks, with a bounded
    number of films in flight; one bad film never stops the others. Results in input order.
    `ip_for` maps a film (str of its path) to its own IP; the others belong to `ip`. `force`
    cuts complete films again instead of skipping them."""
    with _executor_for(config, executor) as executor:
        return _run_films(paths, out_dir, config, ip, executor, ip_for, force)


@contextmanager
def _executor_for(config: PipelineConfig, executor: Executor | None) -> Iterator[Executor]:
    """`executor`, which stays open for its owner, or one made from `config.run` and closed
    afterwards, whatever happens (a caller that keeps the exception, a notebook, would otherwise
    keep its idle workers alive)."""
    if executor is not None:
        yield executor
        return
    made = make_executor(config.run.executor, config.run.num_cpus, config.run.progress)
    interrupted = False
    try:
        yield made
    except (KeyboardInterrupt, Interrupted):
        # Ctrl-C ends the process, whose exit closes the executor after the one line is printed.
        # Closing here shut Ray down while its workers took the same SIGINT, and their
        # complaints ('task_manager.cc: Failed to push error') reached the user before the line.
        interrupted = True
        raise
    finally:
        if not interrupted:
            made.close()


def _run_films(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    config: PipelineConfig,
    ip: IP,
    executor: Executor,
    ip_for: dict[str, IP] | None,
    force: bool,
) -> list[FilmResult]:
    results: list[FilmResult | None] = [None] * len(paths)
    work = []
    for index, path in enumerate(paths):
        film_ip = (ip_for or {}).get(str(path), ip)
        try:
            work.append((index, path, film_config(config, film_ip, path), film_ip))
        except ConfigError as exc:
            results[index] = FilmResult(str(path), None, False, str(exc))
    scheduler = _FilmScheduler(executor, out_dir, config.run.films_in_flight, force)
    for index, outcome in scheduler.run_resumable(work).items():
        results[index] = _as_result(paths[index], outcome)
    done = [r for r in results if r is not None]
    if any(r.ok for r in done):
        quality_pass(done, out_dir, config)
    if config.caption.model:
        caption_pass(done, config, ip)
    unprocessed = [{"path": r.path, "error": r.message} for r in done if r.film_dir is None]
    write_dataset_summary(out_dir, unprocessed)
    return done


def run_film(
    path: str | Path,
    out_dir: str | Path,
    config: PipelineConfig,
    ip: IP,
    executor: Executor | None = None,
) -> FilmResult:
    """One film with exactly `config` (no manifest overrides); a bad film raises FilmError."""
    with _executor_for(config, executor) as executor:
        outcome = _FilmScheduler(executor, out_dir, 1).run([(0, path, config, ip)])[0]
    if isinstance(outcome, FilmError):
        raise outcome
    result = _as_result(path, outcome)
    if result.ok:
        quality_pass([result], out_dir, config)  # the one decision, as after `dataset`
    return result


@dataclass
class FilmDryRun:
    """What a run would do with one film: its length, segments and output folder."""

    path: str
    ip: str = ""
    duration: float = 0.0
    frames: int = 0
    segments: list[tuple[int, int]] | None = None
    film_dir: str = ""
    complete: bool = False
    error: str = ""


def plan_films(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    config: PipelineConfig,
    ip: IP,
    ip_for: dict[str, IP] | None = None,
) -> list[FilmDryRun]:
    """Probe each film (packets only, nothing decoded but one frame) and plan its segments."""
    plans = []
    for path in paths:
        film_ip = (ip_for or {}).get(str(path), ip)
        try:
            film_cfg = film_config(config, film_ip, path)
            film = Probe().process(_fetched_film(path))
        except (FilmError, ConfigError) as exc:
            plans.append(FilmDryRun(str(path), error=str(exc)))
            continue
        film_dir = storage.join(out_dir, film.slug)
        segments = plan_segments(film, film_cfg.run.segment_seconds)
        plans.append(
            FilmDryRun(
                str(path),
                film_ip.name,
                film.duration,
                film.num_frames,
                [(seg.start, seg.stop) for seg in segments],
                str(film_dir),
                _complete_summary(film_dir, film_cfg, film_ip) is not None,
            )
        )
    return plans


def _as_result(path: str | Path, outcome) -> FilmResult:
    if isinstance(outcome, FilmResult):
        return outcome
    if isinstance(outcome, FilmError | ConfigError):
        return FilmResult(str(path), None, False, str(outcome))
    return FilmResult(str(path), None, False, f"{path}: {type(outcome).__name__}: {outcome}")


@dataclass(frozen=True)
class SegmentResources:
    """What each segment task of a film reserves, and the stages that asked for a GPU."""

    resources: Resources
    gpu_stages: tuple[str, ...]


def segment_resources(config: PipelineConfig) -> SegmentResources:
    """One CPU, and the most GPU any stage of the segment declares (MemFlow or TransNetV2 on
    CUDA): Ray (or the process pool) then never puts two segments' models on one GPU, and a task
    that reserved no GPU sees none (both hide them), so 'auto' resolves to the CPU inside it too."""
    declared = {stage.name: stage.resources for stage in build_clip_stages(config)}
    declared |= frame_stage_resources(config)
    gpus = max((resources.gpus for resources in declared.values()), default=0.0)
    gpu_stages = tuple(name for name, resources in declared.items() if resources.needs_gpu())
    return SegmentResources(Resources(cpus=1.0, gpus=gpus), gpu_stages)


# The scheduler's record of each task in flight: which film it serves and what comes after it.
@dataclass
class _Preparing:
    index: int
    job: PrepareJob
    started: float  # wall clock (time.time) when the film's first task was submitted


@dataclass
class _Cutting:
    index: int
    plan: FilmPlan
    job: PrepareJob
    started: float


@dataclass
class _Finalizing:
    index: int


_Step = _Preparing | _Cutting | _Finalizing


class _FilmScheduler:
    """Drives films through prepare -> segments -> finalize on the executor. Only this loop runs
    in the driver; it touches no film data, it only submits tasks and routes their results."""

    def __init__(
        self,
        executor: Executor,
        out_dir: str | Path,
        films_in_flight: int | None,
        force: bool = False,
    ):
        self.executor, self.out_dir, self.force = executor, out_dir, force
        self.limit = films_in_flight or 2 * executor.slots()
        self.tasks: dict[Hashable, _Step] = {}  # every task in flight, with its step
        self.segments: dict[int, list[Hashable]] = {}  # film index -> its segment tasks, in order
        # a finished segment task's result, kept until its film's last one (the executor gives a
        # result once)
        self.segment_results: dict[Hashable, Any] = {}
        self.running: dict[int, int] = {}  # film index -> its segments not finished yet
        self.outcomes: dict[int, object] = {}
        self.claimed: dict[str, PrepareJob] = {}  # film folder -> the film this run cuts into it
        # for the line that Ctrl-C prints: segments of the films probed so far, those of the
        # films finished (or complete before this run), the films being cut, those not probed yet
        self.segments_planned = self.segments_finished = self.films_waiting = 0
        self.cutting: dict[int, FilmPlan] = {}

    def run_resumable(self, work: list[tuple[int, str | Path, PipelineConfig, IP]]) -> dict:
        """`run`, where Ctrl-C becomes `Interrupted` saying how far the run got (what a rerun
        of the same command skips)."""
        try:
            return self.run(work)
        except KeyboardInterrupt:
            raise Interrupted(self.interrupted_line()) from None

    def interrupted_line(self) -> str:
        """What a rerun will not redo: the finished films' segments and the committed segments
        (DONE markers) of the films being cut."""
        done = self.segments_finished + sum(map(_committed_segments, self.cutting.values()))
        waiting = f", {self.films_waiting} film(s) not started" if self.films_waiting else ""
        return (
            "interrupted; run the same command again to resume "
            f"({done} of {self.segments_planned} segments done{waiting})"
        )

    def run(self, work: list[tuple[int, str | Path, PipelineConfig, IP]]) -> dict[int, object]:
        queue = list(reversed(work))
        self.films_waiting = len(queue)
        with self.executor.progress_bar("films") as self.bar:
            while queue or self.tasks:
                while queue and self._films_in_flight() < self.limit:
                    self._start(*queue.pop())
                    self.films_waiting = len(queue)
                for task in self.executor.wait(list(self.tasks)):
                    self._advance(task)
        return self.outcomes

    def _films_in_flight(self) -> int:
        return len({step.index for step in self.tasks.values()})

    def _start(self, index: int, path, config: PipelineConfig, ip: IP) -> None:
        job = PrepareJob(path, self.out_dir, config, ip, self.force)
        self.tasks[self.executor.submit(prepare_film, job)] = _Preparing(index, job, time.time())

    def _advance(self, task: Hashable) -> None:
        step = self.tasks.pop(task)
        value = self.executor.result(task)
        if isinstance(step, _Preparing):
            self._prepared(step, value)
        elif isinstance(step, _Cutting):
            self.segment_results[task] = value
            self._segment_done(step)
        else:
            self.segments_finished += _segments_finished(value)
            self.cutting.pop(step.index)
            self.outcomes[step.index] = value
            self.bar.set_postfix_str(f"{len(self.outcomes)} films done")

    def _prepared(self, step: _Preparing, value) -> None:
        index, job = step.index, step.job
        if not isinstance(value, FilmPlan):  # skipped (complete) or failed
            self.segments_planned += _segments_finished(value)
            self.segments_finished += _segments_finished(value)
            self.outcomes[index] = value
            return
        first = self.claimed.setdefault(str(value.film_dir), job)
        if first is not job:  # the same name and content twice: one folder, cut once
            self.outcomes[index] = _duplicate(job, first, value)
            return
        self.bar.total = (self.bar.total or 0) + value.film.num_frames
        self.bar.refresh()
        config, ip = job.config, job.ip
        declared = segment_resources(config)
        shortfall = self.executor.shortfall(declared.resources)
        if shortfall:
            stages = ", ".join(declared.gpu_stages)
            message = (
                f"{job.path}: a segment task {shortfall} (stages that declare a GPU: {stages})"
            )
            self.outcomes[index] = FilmResult(str(job.path), None, False, message)
            return
        jobs = [_segment_job(value, config, ip, s) for s in value.segments]
        self.segments_planned += len(jobs)
        self.cutting[index] = value
        tasks = [self.executor.submit(run_stored_segment, seg, declared.resources) for seg in jobs]
        self.segments[index], self.running[index] = tasks, len(tasks)
        for task in tasks:
            self.tasks[task] = _Cutting(index, value, job, step.started)

    def _segment_done(self, step: _Cutting) -> None:
        index = step.index
        self.running[index] -= 1
        if self.running[index]:
            return  # the film's other segments are still running
        results = [self.segment_results.pop(t) for t in self.segments.pop(index)]
        job = FinalizeJob(step.plan, step.job.config, step.job.ip, results, step.started)
        self.tasks[self.executor.submit(finalize_film, job)] = _Finalizing(index)


def _segments_finished(outcome) -> int:
    """Segments a film's result says are done: all of a complete film's, not the failed ones."""
    summary = outcome.summary if isinstance(outcome, FilmResult) else None
    return summary.segments - len(summary.failed_segments or {}) if summary else 0


def _committed_segments(plan: FilmPlan) -> int:
    """Segments of a film being cut whose DONE marker is written (a rerun reuses them)."""
    markers = (FilmFolder(Path()).done_marker(seg.index).parts for seg in plan.segments)
    return sum(storage.exists(storage.join(plan.film_dir, *parts)) for parts in markers)


def _duplicate(job: PrepareJob, first: PrepareJob, plan: FilmPlan) -> FilmResult:
    """A film with the file name and content of another film of the run (a copy in another
    folder): the same output folder, so it is cut once; under other settings or another IP that
    is an error, not a silent overwrite."""
    same = job.config.fingerprint() == first.config.fingerprint() and job.ip.name == first.ip.name
    if same:
        message = (
            f"{job.path}: the same film as {first.path} (identical content); "
            f"its clips are in {plan.film_dir}"
        )
        return FilmResult(str(job.path), plan.film_dir, True, message)
    message = (
        f"{job.path}: the same film as {first.path} (identical content) under other settings "
        f"or another IP; one folder holds one film's clips: run it on its own"
    )
    return FilmResult(str(job.path), None, False, message)


def prepare_film(job: PrepareJob, report=None) -> FilmPlan | FilmResult:
    """Probe the film and find its crop box (a task): a plan, or the result of a finished film."""
    began = time.perf_counter()
    film = Probe().process(_fetched_film(job.path))
    if film.duration < job.config.clips.seconds:
        raise FilmError(
            f"{job.path}: the video is {film.duration:.2f} s long; a clip needs "
            f"{job.config.clips.seconds:g} s"
        )
    film_dir = storage.join(job.out_dir, film.slug)
    previous = None if job.force else _complete_summary(film_dir, job.config, job.ip)
    if previous is not None:
        return FilmResult(
            str(job.path),
            film_dir,
            True,
            f"{film.film_name}: already complete ({previous.clips_written} clips "
            f"in {film_dir}); skipped",
            previous,
        )
    probe_seconds = time.perf_counter() - began
    limit_threads(job.config.run.task_threads)
    crop, overlay_record, seconds = _film_pictures(film, job.config)
    seconds = {"probe": probe_seconds, **seconds}
    segments = plan_segments(film, job.config.run.segment_seconds)
    if storage.is_remote(job.path):
        film.path = str(job.path)  # every task fetches the film by its URL (once per node)
    return FilmPlan(film, crop, film_dir, segments, seconds, overlay_record)


def _film_pictures(
    film: FilmInfo, config: PipelineConfig
) -> tuple[CropBox, OverlayRecord | None, dict[str, float]]:
    """The border crop and the overlay pass, on one sample of the film's key frames (each timed
    as its own stage); the overlay pass is None when `overlays.enabled` is off."""
    began = time.perf_counter()
    overlays = config.overlays if config.overlays.enabled else None
    samples = max(config.crop.samples, overlays.samples) if overlays else config.crop.samples
    needed = config.crop.box is None or overlays is not None
    frames = sample_luma_frames(film, samples) if needed else None
    crop = BorderCrop(config.crop).process(film, frames)
    seconds = {"crop": time.perf_counter() - began}
    if overlays is None:
        return crop, None, seconds
    began = time.perf_counter()
    pictures = overlay_frames(film, frames or [], overlays)
    record = film_overlays(config).process(pictures, crop)
    seconds["overlays"] = time.perf_counter() - began
    return crop, record, seconds


def _fetched_film(path: str | Path) -> Path:
    if not storage.is_remote(path):
        return Path(path)
    try:
        return storage.local_film(path)
    except FileNotFoundError:
        raise FilmError(f"{path}: no such object") from None
    except OSError as exc:
        raise FilmError(f"{path}: cannot be read ({exc})") from None


def _segment_job(
    plan: FilmPlan, config: PipelineConfig, ip: IP, segment: SegmentSpan
) -> SegmentJob:
    """A segment's job: its folder is the film's, or for a film in object storage a local scratch
    folder standing in for it (`store` then names the real one)."""
    if not storage.is_remote(plan.film_dir):
        folder = FilmFolder(Path(plan.film_dir))
        return SegmentJob(
            plan.film, plan.crop, config, ip.name, segment, folder, overlays=plan.overlays
        )
    folder = FilmFolder(storage.scratch_dir(plan.film_dir))
    return SegmentJob(
        plan.film, plan.crop, config, ip.name, segment, folder, str(plan.film_dir), plan.overlays
    )


def run_stored_segment(job: SegmentJob, report=_no_report) -> SegmentStats:
    """A segment of a local film folder runs in place. One in object storage runs in its local
    scratch folder and is published part by part, its DONE.json last (the commit point)."""
    if job.store is None:
        return run_segment(job, report)
    name = job.directory.name
    remote = storage.join(job.store, WORK_DIR, name)
    shutil.rmtree(job.directory, ignore_errors=True)
    marker = storage.read_text(storage.join(remote, DONE_FILE))
    if marker is not None:  # committed earlier: run_segment decides whether it still holds
        job.directory.mkdir(parents=True)
        (job.directory / DONE_FILE).write_text(marker)
    stats = run_segment(job, report)
    if not stats.skipped:
        storage.remove(storage.join(remote, DONE_FILE))
        for part in stats.parts:
            storage.upload(job.directory / part, storage.join(remote, part))
        storage.upload(job.directory / DONE_FILE, storage.join(remote, DONE_FILE))
    shutil.rmtree(job.directory, ignore_errors=True)
    return stats


def finalize_film(job: FinalizeJob, report=None) -> FilmResult:
    """Gather a film's segments into its outputs and write summary.json last (a task)."""
    began = time.perf_counter()
    plan = job.plan
    remote = storage.is_remote(plan.film_dir)
    folder = FilmFolder(storage.scratch_dir(plan.film_dir) if remote else Path(plan.film_dir))
    if remote:
        _fetch_parts(plan.film_dir, folder, job.segment_results)
    summary = finalize(
        folder,
        plan.film,
        plan.crop,
        job.config,
        job.ip,
        job.segment_results,
        plan.seconds,
        plan.overlays,
    )
    seconds = dict(summary.stage_seconds or {})
    seconds["finalize"] = round(time.perf_counter() - began, 3)
    summary = summary.updated(
        segment_boundaries=[seg.start for seg in plan.segments[1:]],
        wall_seconds=round(time.time() - job.started_at, 3),
        stage_seconds=seconds,
    )
    folder.write_summary(summary)
    if remote:
        _publish_film(folder.path, plan.film_dir, summary.complete)
    return FilmResult(
        str(plan.film.path),
        plan.film_dir,
        summary.complete,
        _summary_line(plan.film, summary),
        summary,
    )


def _fetch_parts(remote_dir: str | Path, folder: FilmFolder, segment_results: list) -> None:
    """The committed parts of every finished segment, into a fresh local film folder."""
    shutil.rmtree(folder.path, ignore_errors=True)
    for stats in segment_results:
        if isinstance(stats, Exception):
            continue
        local = folder.segment_dir(stats.segment.index)
        for part in stats.parts:
            storage.download(storage.join(remote_dir, WORK_DIR, local.name, part), local / part)


def _publish_film(local_dir: Path, remote_dir: str | Path, complete: bool) -> None:
    """Upload a finalized film, its summary.json (the commit point) last; a complete film's
    segment parts are removed after it."""
    shutil.rmtree(local_dir / WORK_DIR, ignore_errors=True)  # the parts are in the store already
    storage.publish_folder(local_dir, remote_dir, SUMMARY_FILE)
    if complete:
        storage.remove(storage.join(remote_dir, WORK_DIR))
    shutil.rmtree(local_dir, ignore_errors=True)


def finalize(
    folder: FilmFolder,
    film: FilmInfo,
    crop: CropBox,
    config: PipelineConfig,
    ip: IP,
    results: list[SegmentStats | Exception],
    extra_seconds: dict[str, float],
    overlays: OverlayRecord | None = None,
) -> FilmSummary:
    """Gather the segments' parts into shards with film-wide clip and scene numbering."""
    failed = {
        i: f"{type(r).__name__}: {r}" for i, r in enumerate(results) if isinstance(r, Exception)
    }
    done = [r for r in results if not isinstance(r, Exception)]
    shutil.rmtree(folder.shards_staging, ignore_errors=True)
    scenes: list[list[int]] = []
    drop_rows: list[dict[str, Any]] = []
    clip_index = scene_offset = 0
    with ShardWriter(folder.shards_staging, "clips", config.shards, clip_schema()) as writer:
        for stats in done:
            seg = stats.segment.index
            for part in stats.parts:
                for clip in read_clips(folder.segment_dir(seg) / part):
                    clip.clip_index = clip_index
                    clip.scene_index += scene_offset
                    clip_index += 1
                    writer.write(clip)
            scenes += stats.scenes
            scene_offset += len(stats.scenes)
            drop_rows += [_drop_row(film, seg, d) for d in stats.drop_list]
    _replace_dir(folder.shards_staging, folder.shards)
    write_manifest(folder)
    write_table_atomic(rows_to_table(drop_rows, DROP_SCHEMA), folder.drops)
    summary = _summary(film, crop, config, ip, done, failed, scenes, drop_rows, extra_seconds)
    summary = summary.updated(overlays=overlays)
    if summary.complete:
        shutil.rmtree(folder.work, ignore_errors=True)
    return summary


def _drop_row(film: FilmInfo, segment: int, drop: Drop) -> dict:
    """A row of drops.parquet (core/schema.py DROP_SCHEMA)."""
    return {
        "film_id": film.film_id,
        "segment_index": segment,
        **drop.to_dict(),
        "detail": drop.detail or None,
    }


def _summary(
    film: FilmInfo,
    crop: CropBox,
    config: PipelineConfig,
    ip: IP,
    done: list[SegmentStats],
    failed: dict[int, str],
    scenes: list[list[int]],
    drop_rows: list[dict[str, Any]],
    extra_seconds: dict[str, float],
) -> FilmSummary:
    seconds: dict[str, float] = dict(extra_seconds)
    for stats in done:
        for name, value in stats.stage_seconds.items():
            seconds[name] = seconds.get(name, 0.0) + value
    drops: dict[str, int] = {}
    for row in drop_rows:
        drops[row["reason"]] = drops.get(row["reason"], 0) + 1
    return FilmSummary(
        schema_version=SCHEMA_VERSION,
        complete=not failed,
        film=FilmFacts.from_dict(film.facts()),
        ip=ip.name,
        crop=CropRecord(x=crop.x, y=crop.y, w=crop.w, h=crop.h, source=crop.source),
        upscaled=source_scale(crop, config.clips),
        segments=len(done) + len(failed),
        segments_reused=sum(stats.skipped for stats in done),
        segment_runs=[_segment_run(stats) for stats in done],
        failed_segments=dict(failed),
        scenes=scenes,
        clips_written=sum(s.clips_written for s in done),
        clips_failed=sum(s.clips_failed for s in done),
        frames_decoded=sum(s.frames for s in done),
        corrupt_packets=sum(s.corrupt_packets for s in done),
        unmatched_frames=sum(s.unmatched_frames for s in done),
        late_cuts=sum(s.late_cuts for s in done),
        black_frames=sum(s.black_frames for s in done),
        drops=drops,
        stage_seconds={k: round(v, 3) for k, v in seconds.items()},
        captions="pending",
        motion_levels=_motion_levels(config),
        fingerprint=config.fingerprint(),
        config=config.to_dict(),
        # set by finalize_film once the segments are gathered, quality by the folder pass; not
        # written before that
        absent=frozenset({"segment_boundaries", "wall_seconds", "caption", "quality"}),
    )


def _motion_levels(config: PipelineConfig) -> dict | None:
    if not config.motion.enabled:
        return None
    from stages.motion_levels import load_levels

    return load_levels(config.motion.level_edges).to_dict()


def _segment_run(stats: SegmentStats) -> dict[str, Any]:
    """One segment's line in summary.json: its frames, where it ran, how long it took."""
    return {
        "index": stats.segment.index,
        "start_frame": stats.segment.start,
        "stop_frame": stats.segment.stop,
        "clips_written": stats.clips_written,
        "reused": stats.skipped,
        "ran_on": stats.ran_on,
        "seconds": round(sum(stats.stage_seconds.values()), 3),
    }


def _complete_summary(film_dir: str | Path, config: PipelineConfig, ip: IP) -> FilmSummary | None:
    """The film's summary when a complete run under the same settings and IP committed it."""
    try:
        summary = _read_summary(film_dir)
    except FolderError:
        return None  # unreadable: the film is redone
    if summary is None:
        return None
    same = summary.fingerprint == config.fingerprint() and summary.ip == ip.name
    return summary if same and summary.complete else None


def _read_summary(film_dir: str | Path) -> FilmSummary | None:
    if not storage.is_remote(film_dir):
        return FilmFolder(Path(film_dir)).read_summary()
    text = storage.read_text(storage.join(film_dir, SUMMARY_FILE))
    try:
        return None if text is None else FilmSummary.from_dict(json.loads(text))
    except (json.JSONDecodeError, AttributeError) as exc:
        raise FolderError(f"{film_dir}/{SUMMARY_FILE}: not a JSON object ({exc})") from None


def _replace_dir(new: Path, target: Path) -> None:
    """Swap a finished folder into place (the old one is gone only once the new one is whole)."""
    new.mkdir(parents=True, exist_ok=True)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _summary_line(film: FilmInfo, summary: FilmSummary) -> str:
    drops = ", ".join(f"{k} {v}" for k, v in sorted((summary.drops or {}).items())) or "none"
    failed = summary.failed_segments
    reused = (
        f"; resumed with {summary.segments_reused} of {summary.segments} segments already done"
        if summary.segments_reused
        else ""
    )
    state = (
        "done"
        if summary.complete
        else (
            f"INCOMPLETE ({len(failed)} of {summary.segments} segments failed, first: "
            f"{next(iter(failed.values()))}; rerun to retry)"
        )
    )
    upscaled = f" ({summary.upscaled.note})" if summary.upscaled else ""
    return (
        f"{film.film_name}{upscaled}: {state}: {summary.clips_written} clips "
        f"({summary.clips_failed} failed), {len(summary.scenes or [])} scenes, drops: {drops}; "
        f"{film.duration:.1f} s of film in {summary.wall_seconds or 0:.1f} s{reused}"
        + (f"; {summary.overlays.line()}" if summary.overlays is not None else "")
    )
