"""A film's tasks on the executor: prepare (probe, border crop, the segment plan), one task per
segment, finalize; the jobs they take and the results they give (`FilmResult`). Each runs in a
worker, and a film in object storage is worked on in local scratch folders.

A short film is decoded once: where the scheduler allows it (`PrepareJob.cut_if_short`), a film
of one segment whose decoded frames fit in `run.decode_once_mib` is decoded first to last in its
prepare task, the frames held in memory (core/video.py `HeldFrames`); its samples, field runs and
its one segment read them, and the segment runs in that task (`FilmPlan.cut`). Otherwise prepare
decodes the frames it samples and each segment task decodes its frames again (126 and 144 of a
6-s film's 144 frames)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import av

from core import storage
from core.film import (
    DONE_FILE,
    SUMMARY_FILE,
    WORK_DIR,
    FieldRecord,
    FilmFolder,
    FilmSummary,
    OverlayRecord,
    SegmentSpan,
    SegmentStats,
    WindowRecord,
)
from core.video import HeldFrames
from pipeline.data.config import PipelineConfig
from pipeline.data.ip import IP
from pipeline.executors import sendable
from pipeline.running.finalize import complete_summary, finalize, summary_line
from pipeline.running.segments import SegmentJob, limit_threads, plan_segments, run_segment
from stages.burned_in.overlays import OverlayConfig, film_overlays, overlay_sample_plan
from stages.clips import place_window
from stages.crop import BorderCrop, CropBox
from stages.probe import FilmError, FilmInfo, Probe
from stages.sources.field_pass import find_fields, sampled_and_probed
from stages.sources.field_restore import restored
from stages.sources.film_samples import sample_film, sample_luma_frames, spread_indices


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
    # a film of one segment may be cut in this task from frames decoded once (the scheduler's
    # call: its segment needs no GPU, and no other film of the run may share its folder)
    cut_if_short: bool = False


@dataclass
class FilmPlan:
    """A probed film ready to be cut: its facts, crop box and segments."""

    film: FilmInfo
    crop: CropBox
    film_dir: str | Path  # a local path or an fsspec URL
    segments: list[SegmentSpan]
    seconds: dict[str, float]
    overlays: OverlayRecord | None = None  # None: overlays.enabled is off
    window: WindowRecord = field(kw_only=True)  # what every clip shows: place_window's answer
    fields: FieldRecord | None = field(default=None, kw_only=True)  # None: fields.enabled off
    # a short film's segment results (SegmentStats, or the exception it raised), cut in the
    # prepare task from the frames decoded once; None: its segments are tasks of their own
    cut: list | None = field(default=None, kw_only=True)
    ran_on: dict[str, str] | None = field(default=None, kw_only=True)  # set by the executor


@dataclass
class FinalizeJob:
    plan: FilmPlan
    config: PipelineConfig
    ip: IP
    segment_results: list
    started_at: float  # wall clock (time.time) when the film's first task was submitted


def prepare_film(job: PrepareJob, report=None) -> FilmPlan | FilmResult:
    """Probe the film and find its crop box (a task): a plan, or the result of a finished film."""
    began = time.perf_counter()
    film = Probe().process(fetched_film(job.path))
    if film.duration < job.config.clips.seconds:
        raise FilmError(
            f"{job.path}: the video is {film.duration:.2f} s long; a clip needs "
            f"{job.config.clips.seconds:g} s"
        )
    film_dir = storage.join(job.out_dir, film.slug)
    previous = None if job.force else complete_summary(film_dir, job.config, job.ip)
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
    segments = plan_segments(film, job.config.run.segment_seconds)
    held = held_frames(film, film_dir, segments, job.config) if job.cut_if_short else None
    crop, overlay_record, fields, seconds = _film_pictures(film, job.config, held)
    seconds = {"probe": probe_seconds, **seconds}
    window = place_window(crop, job.config.clips, overlay_record, film.pixel_aspect)
    if storage.is_remote(job.path):
        film.path = str(job.path)  # every task fetches the film by its URL (once per node)
    plan = FilmPlan(
        film, crop, film_dir, segments, seconds, overlay_record, window=window, fields=fields
    )
    if held is not None:
        plan.cut = [_cut_held(plan, job, held, report or _no_report)]
    return plan


def held_frames(
    film: FilmInfo, film_dir: str | Path, segments: list[SegmentSpan], config: PipelineConfig
) -> HeldFrames | None:
    """A short film's frames, decoded once for its prepare step and its one segment: a film of
    one segment, not committed already (a rerun's segment is skipped, nothing to decode), whose
    frames fit in `run.decode_once_mib`; else None. A film the decoder fails on is left to the
    passes that decode it on their own, to fail where they always did (prepare, or its segment)."""
    limit = config.run.decode_once_mib * 2**20
    if len(segments) != 1 or limit <= 0 or segment_committed(film_dir, segments[0]):
        return None
    try:
        return HeldFrames.decode(film.path, film.frame_pts, config.run.decode_threads, limit)
    except av.error.FFmpegError:
        return None


def segment_committed(film_dir: str | Path, segment: SegmentSpan) -> bool:
    """Whether the segment's DONE marker is written (a rerun may reuse its parts)."""
    parts = FilmFolder(Path()).done_marker(segment.index).parts
    return storage.exists(storage.join(film_dir, *parts))


def _cut_held(
    plan: FilmPlan, job: PrepareJob, held: HeldFrames, report
) -> SegmentStats | Exception:
    """The film's one segment, cut in this task from its held frames: its stats, or as when it
    runs as a task of its own, the exception it raised (its finalize records it)."""
    segment = segment_job(plan, job.config, job.ip, plan.segments[0])
    try:
        return run_stored_segment(segment, report, held)
    except Exception as exc:
        return sendable(exc)


def _film_pictures(
    film: FilmInfo, config: PipelineConfig, held: HeldFrames | None = None
) -> tuple[CropBox, OverlayRecord | None, FieldRecord | None, dict[str, float]]:
    """The border crop, the overlay pass and the field pass, on one sample of the film's frames,
    decoded once (stages/sources/film_samples.py; each pass timed as its own stage, the decode as the
    crop's; `held`: the film's frames, decoded already); a pass switched off gives None (the crop
    then reads its key frames)."""
    began = time.perf_counter()
    overlays = config.overlays if config.overlays.enabled else None
    runs, indices = None, None
    if overlays is not None:
        frames, indices, runs = _samples(film, config, overlays, held)
    elif config.crop.box is None:
        frames = sample_luma_frames(film, config.crop.samples)
    else:
        frames = None
    crop = BorderCrop(config.crop).process(film, frames)
    seconds = {"crop": time.perf_counter() - began}
    fields = None
    if config.fields.enabled:
        began = time.perf_counter()
        fields = find_fields(film, frames, config.fields, runs, held)
        seconds["fields"] = time.perf_counter() - began
    if overlays is None:
        return crop, None, fields, seconds
    began = time.perf_counter()
    passes = film_overlays(config)
    crop, player = passes.without_player(frames or [], crop)
    times = [film.frame_time(i) for i in indices] if indices is not None else None
    record = passes.process(frames or [], crop, player, times, film.duration)
    seconds["overlays"] = time.perf_counter() - began
    return crop, record, fields, seconds


def _samples(
    film: FilmInfo, config: PipelineConfig, overlays: OverlayConfig, held: HeldFrames | None
):
    """The film's samples (the crop's and the overlay pass's), their frame indices, and the
    field pass's probed runs where one decode gives both (a short film:
    stages/sources/field_pass.py `sampled_and_probed`; the crop's time then holds the runs'
    too), else None for the runs."""
    plan = overlay_sample_plan(film, overlays, max(config.crop.samples, overlays.samples))
    if plan.spread and config.fields.enabled:
        wanted = spread_indices(film, plan.count)
        shared = sampled_and_probed(film, wanted, config.fields, held)
        if shared is not None:
            return shared
    samples = sample_film(film, plan, held)
    return samples.frames, samples.indices, None


def fetched_film(path: str | Path) -> Path:
    if not storage.is_remote(path):
        return Path(path)
    try:
        return storage.local_film(path)
    except FileNotFoundError:
        raise FilmError(f"{path}: no such object") from None
    except OSError as exc:
        raise FilmError(f"{path}: cannot be read ({exc})") from None


def segment_job(plan: FilmPlan, config: PipelineConfig, ip: IP, segment: SegmentSpan) -> SegmentJob:
    """A segment's job: its folder is the film's, or for a film in object storage a local scratch
    folder standing in for it (`store` then names the real one)."""
    remote = storage.is_remote(plan.film_dir)
    folder = FilmFolder(storage.scratch_dir(plan.film_dir) if remote else Path(plan.film_dir))
    store = str(plan.film_dir) if remote else None
    return SegmentJob(
        plan.film,
        plan.crop,
        config,
        ip.name,
        segment,
        folder,
        store,
        plan.overlays,
        window=plan.window,
        fields=plan.fields,
    )


def run_stored_segment(
    job: SegmentJob, report=_no_report, held: HeldFrames | None = None
) -> SegmentStats:
    """A segment of a local film folder runs in place. One in object storage runs in its local
    scratch folder and is published part by part, its DONE.json last (the commit point).
    `held`: the film's frames, decoded already (a film of one segment)."""
    if job.store is None:
        return run_segment(job, report, held)
    name = job.directory.name
    remote = storage.join(job.store, WORK_DIR, name)
    shutil.rmtree(job.directory, ignore_errors=True)
    marker = storage.read_text(storage.join(remote, DONE_FILE))
    if marker is not None:  # committed earlier: run_segment decides whether it still holds
        job.directory.mkdir(parents=True)
        (job.directory / DONE_FILE).write_text(marker)
    stats = run_segment(job, report, held)
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
    ).updated(window=plan.window, fields=restored(plan.fields, job.segment_results, plan.film.fps))
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
        summary_line(plan.film, summary),
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
