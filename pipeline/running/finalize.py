"""A film's finalize step: its segments' parts gathered into shards with film-wide clip and
scene numbering, the manifest and drops, and summary.json (read back to skip a film a complete
run committed); the one line a film's run ends with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from core import storage
from core.film import (
    SUMMARY_FILE,
    CropRecord,
    Drop,
    FilmFacts,
    FilmFolder,
    FilmSummary,
    FolderError,
    OverlayRecord,
    SegmentStats,
)
from core.io import write_table_atomic
from core.schema import DROP_SCHEMA, SCHEMA_VERSION, rows_to_table
from core.shards import ShardWriter, read_clips
from pipeline.data.config import PipelineConfig
from pipeline.data.ip import IP
from pipeline.data.manifest import write_manifest
from stages.base import clip_schema
from stages.clips import output_region, source_scale
from stages.crop import CropBox
from stages.probe import FilmInfo


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
        crop=CropRecord.of(crop.x, crop.y, crop.w, crop.h, crop.source, crop.strips),
        upscaled=source_scale(  # the window's size, as shown
            output_region(crop, config.clips, film.pixel_aspect), config.clips, film.pixel_aspect
        ),
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


def complete_summary(film_dir: str | Path, config: PipelineConfig, ip: IP) -> FilmSummary | None:
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


def summary_line(film: FilmInfo, summary: FilmSummary) -> str:
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
    # The notes follow the counts, so every line still starts `<film>: <state>:` for scripts.
    return (
        f"{film.film_name}: {state}: {summary.clips_written} clips "
        f"({summary.clips_failed} failed), {len(summary.scenes or [])} scenes, drops: {drops}; "
        f"{film.duration:.1f} s of film in {summary.wall_seconds or 0:.1f} s{reused}"
        + (f"; {summary.fields.line()}" if summary.fields and summary.fields.line() else "")
        + (f"; {summary.film.shape_words()}" if summary.film.shape_words() else "")
        + (f"; {summary.upscaled.note}" if summary.upscaled else "")
        + (f"; {summary.crop.line()}" if summary.crop and summary.crop.line() else "")
        + (f"; {summary.overlays.line()}" if summary.overlays is not None else "")
        + (f"; {summary.window.line()}" if summary.window and summary.window.line() else "")
    )
