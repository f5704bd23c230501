"""Run the pipeline on films: probe, border crop, segments in parallel, then one finalize step.

Output of a film, under OUT/<film_slug>/:
    shards/clips-NNNNN.parquet   clip rows with media bytes, rotated by size
    manifest.parquet              the same rows without media bytes (for notebooks)
    drops.parquet                 every window that did not become a clip, with its reason
    summary.json                  film facts, crop box, scenes, counts, stage seconds, config
    work/                         per-segment parts and DONE markers (removed once complete)

Reruns are safe: a complete film is skipped; an interrupted one redoes only the segments without
a DONE marker, then finalizes again: shards, manifest and drops are byte for byte those of an
uninterrupted run (summary.json differs only in its timings and segments_reused).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import ConfigError, PipelineConfig, apply_mapping, check_choices
from pipeline.executor import make_executor
from pipeline.ip import IP
from pipeline.schema import DROP_SCHEMA, SCHEMA_VERSION, rows_to_table
from pipeline.segments import SegmentJob, plan_segments, run_segment
from pipeline.shards import (
    ShardWriter,
    read_clips,
    write_json_atomic,
    write_manifest,
    write_table_atomic,
)
from stages.crop import BorderCrop
from stages.probe import FilmError, FilmInfo, Probe
from stages.quality import clip_reasons, decision

log = logging.getLogger(__name__)

SUMMARY = "summary.json"


@dataclass
class FilmResult:
    path: str
    film_dir: Path | None
    ok: bool
    message: str
    summary: dict | None = None


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
            result.summary = json.loads((result.film_dir / SUMMARY).read_text())
            quality = result.summary.get("quality", {})
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
    from pipeline.captioning.film import caption_films

    film_dirs = [r.film_dir for r in results if r.ok]
    for result, stats in zip([r for r in results if r.ok], caption_films(film_dirs, config, ip)):
        result.summary = json.loads((result.film_dir / SUMMARY).read_text())
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
    film_dir = Path(out_dir) / film.slug
    previous = _complete_summary(film_dir, config, ip)
    if previous is not None:
        return FilmResult(
            str(path),
            film_dir,
            True,
            f"{film.film_name}: already complete ({previous['clips_written']} clips "
            f"in {film_dir}); skipped",
            previous,
        )
    probe_seconds = time.perf_counter() - began
    crop_began = time.perf_counter()
    crop = BorderCrop(config.crop).process(film)
    crop_seconds = time.perf_counter() - crop_began
    segments = plan_segments(film, config.run.segment_seconds)
    jobs = [SegmentJob(film, crop, config, ip.name, seg, film_dir / "work") for seg in segments]
    results = executor.map(run_segment, jobs, film.num_frames, f"{film.film_name}")
    summary = finalize(
        film_dir, film, crop, config, ip, results, {"probe": probe_seconds, "crop": crop_seconds}
    )
    summary["segment_boundaries"] = [seg.start for seg in segments[1:]]
    summary["wall_seconds"] = round(time.perf_counter() - began, 3)
    write_json_atomic(summary, film_dir / SUMMARY)
    return FilmResult(
        str(path), film_dir, summary["complete"], _summary_line(film, summary), summary
    )


def finalize(
    film_dir: Path,
    film: FilmInfo,
    crop,
    config: PipelineConfig,
    ip: IP,
    results: list,
    extra_seconds: dict,
) -> dict:
    """Gather the segments' parts into shards with film-wide clip and scene numbering."""
    failed = {
        i: f"{type(r).__name__}: {r}" for i, r in enumerate(results) if isinstance(r, Exception)
    }
    done = [r for r in results if not isinstance(r, Exception)]
    work = film_dir / "work"
    staging = film_dir / "shards.staging"
    shutil.rmtree(staging, ignore_errors=True)
    scenes, drop_rows = [], []
    clip_index = scene_offset = 0
    with ShardWriter(staging, "clips", config.shards) as writer:
        for stats in done:
            seg = stats["segment"]["index"]
            for part in stats["parts"]:
                for clip in read_clips(work / f"segment-{seg:05d}" / part):
                    clip.clip_index = clip_index
                    clip.scene_index += scene_offset
                    # a clip that failed after the quality stage is unusable too
                    clip.usable, clip.reject_reasons = decision(
                        clip_reasons(clip.to_row(), config.reject)
                    )
                    clip_index += 1
                    writer.write(clip)
            scenes += stats["scenes"]
            scene_offset += len(stats["scenes"])
            drop_rows += [_drop_row(film, seg, d) for d in stats["drop_list"]]
    _replace_dir(staging, film_dir / "shards")
    write_manifest(film_dir)
    write_table_atomic(rows_to_table(drop_rows, DROP_SCHEMA), film_dir / "drops.parquet")
    summary = _summary(film, crop, config, ip, done, failed, scenes, drop_rows, extra_seconds)
    summary["quality"] = _quality_counts(film_dir, config)
    if summary["complete"]:
        shutil.rmtree(work, ignore_errors=True)
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


def _summary(film, crop, config, ip, done, failed, scenes, drop_rows, extra_seconds) -> dict:
    seconds: dict[str, float] = dict(extra_seconds)
    for stats in done:
        for name, value in stats["stage_seconds"].items():
            seconds[name] = seconds.get(name, 0.0) + value
    drops: dict[str, int] = {}
    for row in drop_rows:
        drops[row["reason"]] = drops.get(row["reason"], 0) + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": not failed,
        "film": film.facts(),
        "ip": ip.name,
        "crop": {"x": crop.x, "y": crop.y, "w": crop.w, "h": crop.h, "source": crop.source},
        "segments": len(done) + len(failed),
        "segments_reused": sum(bool(s.get("skipped")) for s in done),
        "failed_segments": failed,
        "scenes": scenes,
        "clips_written": sum(s["clips_written"] for s in done),
        "clips_failed": sum(s["clips_failed"] for s in done),
        "frames_decoded": sum(s["frames"] for s in done),
        "corrupt_packets": sum(s["corrupt_packets"] for s in done),
        "unmatched_frames": sum(s.get("unmatched_frames", 0) for s in done),
        "late_cuts": sum(s.get("late_cuts", 0) for s in done),
        "black_frames": sum(s.get("black_frames", 0) for s in done),
        "drops": drops,
        "stage_seconds": {k: round(v, 3) for k, v in seconds.items()},
        "captions": "pending",
        "motion_levels": _motion_levels(config),
        "fingerprint": config.fingerprint(),
        "config": config.to_dict(),
    }


def _quality_counts(film_dir: Path, config: PipelineConfig) -> dict:
    """Clips per reject reason of one film, before the dataset pass adds duplicates."""
    from pipeline.quality import quality_summary

    columns = ["usable", "reject_reasons", "duplicate_of"]
    decided = [(c.usable, c.reject_reasons, c.duplicate_of) for c in read_clips(film_dir, columns)]
    return quality_summary(decided, config.reject) | {"duplicates_checked": False}


def _motion_levels(config: PipelineConfig) -> dict | None:
    if not config.motion.enabled:
        return None
    from stages.motion_levels import load_levels

    return load_levels(config.motion.level_edges).to_dict()


def _complete_summary(film_dir: Path, config: PipelineConfig, ip: IP) -> dict | None:
    path = film_dir / SUMMARY
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    same = summary.get("fingerprint") == config.fingerprint() and summary.get("ip") == ip.name
    return summary if same and summary.get("complete") else None


def _replace_dir(new: Path, target: Path) -> None:
    """Swap a finished folder into place (the old one is gone only once the new one is whole)."""
    new.mkdir(parents=True, exist_ok=True)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _summary_line(film: FilmInfo, summary: dict) -> str:
    drops = ", ".join(f"{k} {v}" for k, v in sorted(summary["drops"].items())) or "none"
    failed = summary["failed_segments"]
    reused = (
        f"; resumed with {summary['segments_reused']} of {summary['segments']} segments "
        f"already done"
        if summary.get("segments_reused")
        else ""
    )
    state = (
        "done"
        if summary["complete"]
        else (
            f"INCOMPLETE ({len(failed)} of {summary['segments']} segments failed, first: "
            f"{next(iter(failed.values()))}; rerun to retry)"
        )
    )
    return (
        f"{film.film_name}: {state}: {summary['clips_written']} clips "
        f"({summary['clips_failed']} failed), {len(summary['scenes'])} scenes, drops: {drops}; "
        f"{film.duration:.1f} s of film in {summary.get('wall_seconds', 0):.1f} s{reused}"
    )
