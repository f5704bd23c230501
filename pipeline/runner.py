"""Run the pipeline on films: probe, border crop, segments in parallel, then one finalize step.

Output of a film: the folder OUT/<film_slug>/ that core/film.py describes (shards, manifest,
drops, summary.json, and work/ while segments are under way).

Reruns are safe: a complete film is skipped; an interrupted one redoes only the segments without
a DONE marker, then finalizes again: shards, manifest and drops are byte for byte those of an
uninterrupted run (summary.json differs only in its timings and segments_reused).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.film import CropRecord, FilmFacts, FilmFolder, FilmSummary, FolderError, SegmentStats
from core.io import write_table_atomic
from core.schema import DROP_SCHEMA, SCHEMA_VERSION, rows_to_table
from core.shards import ShardWriter, read_clips, write_manifest
from pipeline.config import ConfigError, PipelineConfig, apply_mapping, check_choices
from pipeline.executor import make_executor
from pipeline.ip import IP
from pipeline.segments import SegmentJob, plan_segments, run_segment
from stages.crop import BorderCrop, CropBox
from stages.probe import FilmError, FilmInfo, Probe
from stages.quality import clip_reasons, decision

log = logging.getLogger(__name__)


@dataclass
class FilmResult:
    path: str
    film_dir: Path | None
    ok: bool
    message: str
    summary: FilmSummary | None = None


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
    paths: list[str | Path], out_dir: str | Path, config: PipelineConfig, ip: IP, executor=None
) -> list[FilmResult]:
    """Each film in turn (its segments in parallel); one bad film never stops the others."""
    executor = executor or make_executor(
        config.run.executor, config.run.num_cpus, config.run.progress
    )
    results = []
    for path in paths:
        try:
            results.append(run_film(path, out_dir, film_config(config, ip, path), ip, executor))
        except (FilmError, ConfigError) as exc:
            results.append(FilmResult(str(path), None, False, str(exc)))
    if any(r.ok for r in results):
        _quality_pass(results, out_dir, config)
    if config.caption.model:
        _caption(results, config, ip)
    return results


def _quality_pass(results: list[FilmResult], out_dir: str | Path, config: PipelineConfig) -> None:
    """Decide every clip of the output folder, duplicates across its films included, with the
    folder's thresholds (written from this run's settings the first time)."""
    from pipeline.quality import apply_quality, load_thresholds, save_thresholds

    thresholds, saved = load_thresholds(Path(out_dir), config.reject)
    if saved and thresholds != config.reject:
        log.info(
            "quality: the thresholds of %s are kept (change them with animegamer "
            "quality-calibrate); this run's reject.* settings differ",
            Path(out_dir) / "quality.json",
        )
    if not saved:
        save_thresholds(Path(out_dir), thresholds)
    outcome = apply_quality(Path(out_dir), thresholds)
    for result in results:
        if result.ok and result.film_dir is not None:
            result.summary = FilmFolder(result.film_dir).read_summary()
            quality = (result.summary.quality if result.summary else None) or {}
            reasons = ", ".join(f"{k} {v}" for k, v in quality.get("by_reason", {}).items())
            result.message += (
                f"; quality: {quality.get('usable', 0)} usable, "
                f"{quality.get('rejected', 0)} rejected ({reasons or 'none'})"
            )
    log.info(
        "quality: %d of %d clips usable in %d film(s) of %s",
        outcome.usable,
        outcome.clips,
        outcome.films,
        out_dir,
    )


def _caption(results: list[FilmResult], config: PipelineConfig, ip: IP) -> None:
    """Caption every film that was cut, with one model load for all of them."""
    from pipeline.caption_films import caption_films

    cut = [(r, r.film_dir) for r in results if r.ok and r.film_dir is not None]
    summaries = caption_films([film_dir for _, film_dir in cut], config, ip)
    for (result, film_dir), stats in zip(cut, summaries):
        result.summary = FilmFolder(film_dir).read_summary()
        counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.get("by_status", {}).items()))
        result.message += f"; captions: {counts or 'none'}"


def run_film(
    path: str | Path, out_dir: str | Path, config: PipelineConfig, ip: IP, executor=None
) -> FilmResult:
    executor = executor or make_executor(
        config.run.executor, config.run.num_cpus, config.run.progress
    )
    began = time.perf_counter()
    film = Probe().process(path)
    if film.duration < config.clips.seconds:
        raise FilmError(
            f"{path}: the video is {film.duration:.2f} s long; a clip needs "
            f"{config.clips.seconds:g} s"
        )
    folder = FilmFolder(Path(out_dir) / film.slug)
    previous = _complete_summary(folder, config, ip)
    if previous is not None:
        return FilmResult(
            str(path),
            folder.path,
            True,
            f"{film.film_name}: already complete ({previous.clips_written} clips "
            f"in {folder.path}); skipped",
            previous,
        )
    probe_seconds = time.perf_counter() - began
    crop_began = time.perf_counter()
    crop = BorderCrop(config.crop).process(film)
    crop_seconds = time.perf_counter() - crop_began
    segments = plan_segments(film, config.run.segment_seconds)
    jobs = [SegmentJob(film, crop, config, ip.name, seg, folder) for seg in segments]
    results = executor.map(run_segment, jobs, film.num_frames, f"{film.film_name}")
    summary = finalize(
        folder, film, crop, config, ip, results, {"probe": probe_seconds, "crop": crop_seconds}
    )
    summary = summary.updated(
        segment_boundaries=[seg.start for seg in segments[1:]],
        wall_seconds=round(time.perf_counter() - began, 3),
    )
    folder.write_summary(summary)
    return FilmResult(
        str(path), folder.path, summary.complete, _summary_line(film, summary), summary
    )


def finalize(
    folder: FilmFolder,
    film: FilmInfo,
    crop: CropBox,
    config: PipelineConfig,
    ip: IP,
    results: list[SegmentStats | Exception],
    extra_seconds: dict[str, float],
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
    with ShardWriter(folder.shards_staging, "clips", config.shards) as writer:
        for stats in done:
            seg = stats.segment["index"]
            for part in stats.parts:
                for clip in read_clips(folder.segment_dir(seg) / part):
                    clip.clip_index = clip_index
                    clip.scene_index += scene_offset
                    # a clip that failed after the quality stage is unusable too
                    clip.usable, clip.reject_reasons = decision(
                        clip_reasons(clip.to_row(), config.reject)
                    )
                    clip_index += 1
                    writer.write(clip)
            scenes += stats.scenes
            scene_offset += len(stats.scenes)
            drop_rows += [_drop_row(film, seg, d) for d in stats.drop_list]
    _replace_dir(folder.shards_staging, folder.shards)
    write_manifest(folder)
    write_table_atomic(rows_to_table(drop_rows, DROP_SCHEMA), folder.drops)
    summary = _summary(film, crop, config, ip, done, failed, scenes, drop_rows, extra_seconds)
    summary = summary.updated(quality=_quality_counts(folder, config))
    if summary.complete:
        shutil.rmtree(folder.work, ignore_errors=True)
    return summary


def _drop_row(film: FilmInfo, segment: int, drop: dict) -> dict:
    return {
        "film_id": film.film_id,
        "segment_index": segment,
        "reason": drop["reason"],
        "start_frame": drop["start_frame"],
        "end_frame": drop["end_frame"],
        "start_time": drop["start_time"],
        "end_time": drop["end_time"],
        "detail": drop["detail"] or None,
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
        segments=len(done) + len(failed),
        segments_reused=sum(stats.skipped for stats in done),
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
        # set by run_film once the segments are gathered (quality by finalize); not written
        # before that
        absent=frozenset({"segment_boundaries", "wall_seconds", "caption", "quality"}),
    )


def _quality_counts(folder: FilmFolder, config: PipelineConfig) -> dict:
    """Clips per reject reason of one film, before the dataset pass adds duplicates."""
    from pipeline.quality import quality_summary

    columns = ["usable", "reject_reasons", "duplicate_of"]
    clips = read_clips(folder.shards, columns)
    decided = [(c.usable, c.reject_reasons, c.duplicate_of) for c in clips]
    return quality_summary(decided, config.reject) | {"duplicates_checked": False}


def _motion_levels(config: PipelineConfig) -> dict | None:
    if not config.motion.enabled:
        return None
    from stages.motion_levels import load_levels

    return load_levels(config.motion.level_edges).to_dict()


def _complete_summary(folder: FilmFolder, config: PipelineConfig, ip: IP) -> FilmSummary | None:
    try:
        summary = folder.read_summary()
    except FolderError:
        return None  # unreadable: the film is redone
    if summary is None:
        return None
    same = summary.fingerprint == config.fingerprint() and summary.ip == ip.name
    return summary if same and summary.complete else None


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
    return (
        f"{film.film_name}: {state}: {summary.clips_written} clips "
        f"({summary.clips_failed} failed), {len(summary.scenes or [])} scenes, drops: {drops}; "
        f"{film.duration:.1f} s of film in {summary.wall_seconds or 0:.1f} s{reused}"
    )
