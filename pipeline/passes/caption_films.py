"""Captioning a film folder that the pipeline already wrote: shards in, the same shards out.

`caption_film` (`caption_films` for several, sharing one loaded model) reads
OUT/<film>/shards/*.parquet one shard at a time, takes finished captions from
the cache, sends the rest to the caption stage in batches (in this process, or spread over Ray
actors that each hold one model replica), rewrites each shard under its own name with the caption
columns filled (written aside, then renamed over the old file), rebuilds manifest.parquet from the
shards, and records counts per caption_status in summary.json.

Without a model it captions nothing: clips with no caption_status are marked pending, and the
summary says how to caption later.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from core.film import CAPTION_REWRITE_DIR, CaptionCounts, FilmFolder
from core.record import CAPTION_FAILED, CAPTION_OK, CAPTION_PENDING, Clip
from core.shards import ShardConfig, ShardWriter, read_clips, shard_paths
from pipeline.data.config import PipelineConfig
from pipeline.data.ip import IP
from pipeline.data.manifest import write_manifest
from pipeline.data.review import Review, effective_quality, read_reviews
from pipeline.executors import StageRunner, make_stage_runner
from stages.base import clip_schema
from stages.captioning.cache import CaptionCache
from stages.captioning.stage import CaptionConfig, CaptionStage
from stages.scoring.clip_scores import ClipScores

log = logging.getLogger(__name__)


# Protagonists as an IP's manifest gives them, or as (name, reference images) pairs.
Protagonists = IP | Sequence[tuple[str, Sequence[Path]]] | None


def caption_film(
    film_dir: Path,
    config: PipelineConfig | CaptionConfig,
    ip: Protagonists = None,
    engine=None,
) -> CaptionCounts:
    """Caption every clip of `film_dir`; returns the `caption` section written to summary.json.

    `config`: a PipelineConfig (its `caption` and `shards` sections are used) or a CaptionConfig
    (shards written with the default settings). `ip`: an IP (pipeline.data.ip), (name, [image paths])
    pairs, or None (no character matching). `engine`: an already-built engine (in-process only;
    tests, notebooks).
    """
    return caption_films([film_dir], config, ip, engine)[0]


def caption_films(
    film_dirs: list[Path],
    config: PipelineConfig | CaptionConfig,
    ip: Protagonists = None,
    engine=None,
) -> list[CaptionCounts]:
    """`caption_film` for several films of one IP, loading the model (or starting the Ray
    actors) once for all of them: a 26B model takes minutes to load."""
    scores = None  # the clip scores' CLIP, for caption_match
    if isinstance(config, PipelineConfig):
        caption_config, shard_config = config.caption, config.shards
        scores = ClipScores(config.clip_scores) if config.clip_scores.model else None
    elif isinstance(config, CaptionConfig):
        caption_config, shard_config = config, ShardConfig()
    else:
        raise TypeError(f"expected a PipelineConfig or CaptionConfig, got {type(config).__name__}")
    # one entry per folder (a folder named twice is captioned once), all missing folders first
    film_shards = {Path(d).resolve(): _film_shards(Path(d)) for d in film_dirs}
    stage = CaptionStage(caption_config, protagonists_of(ip), engine=engine)
    if not caption_config.model:
        summaries = {
            film_dir: _pending_film(film_dir, shards, stage, shard_config)
            for film_dir, shards in film_shards.items()
        }
    else:
        stage.prepare()  # a bad prompt or reference image fails here, before any model loads
        runner = _make_runner(stage, caption_config, engine)
        try:
            summaries = {
                film_dir: _caption_film(
                    film_dir, shards, stage, runner, shard_config, engine, scores
                )
                for film_dir, shards in film_shards.items()
            }
        finally:
            runner.close()
    return [summaries[Path(d).resolve()] for d in film_dirs]  # one per input, in input order


def _caption_film(
    film_dir, shards, stage, runner, shard_config, engine, scores=None
) -> CaptionCounts:
    started = time.monotonic()
    cache = CaptionCache(FilmFolder(film_dir).caption_cache)
    reviews = read_reviews(FilmFolder(film_dir))
    counts, work = _caption_shards(shards, stage, cache, runner, shard_config, reviews, scores)
    summary = _summary(stage, counts, work, runner.take_stats(), started).updated(
        cache_unreadable_lines=cache.unreadable_lines
    )
    if engine is not None:  # an engine object given by the caller
        summary = summary.updated(engine=type(engine).__name__)
    write_manifest(FilmFolder(film_dir))
    _update_summary(film_dir, summary)
    return summary


def _pending_film(film_dir, shards, stage, shard_config) -> CaptionCounts:
    started = time.monotonic()
    counts = _mark_pending(shards, stage, shard_config)
    summary = _summary(stage, counts, Counter(), Counter(), started).updated(
        hint=caption_later_hint(film_dir)
    )
    write_manifest(FilmFolder(film_dir))
    _update_summary(film_dir, summary)
    return summary


def protagonists_of(ip: Protagonists) -> list[tuple[str, list[Path]]]:
    """(name, images) pairs from an IP, a list of pairs, or None."""
    if ip is None:
        return []
    if isinstance(ip, IP):
        return [(p.name, list(p.images)) for p in ip.protagonists]
    return [(name, list(images)) for name, images in ip]


def caption_later_hint(film_dir: Path) -> str:
    """The commands to caption `film_dir` later, ready to paste: the folder is shell-quoted
    (film names hold spaces and quotes)."""
    folder = shlex.quote(str(film_dir))
    return (
        f"captions pending for {film_dir}: caption later with "
        f"`make caption FILM={folder} MODEL=<InternVL checkpoint>` or "
        f"`animegamer caption {folder} --model <InternVL checkpoint> --ip manifests/<ip>.yaml`"
    )


def _film_shards(film_dir: Path) -> list[Path]:
    shards_dir = FilmFolder(film_dir).shards
    if not shards_dir.is_dir():
        raise FileNotFoundError(
            f"{film_dir}: no shards/ folder (is this a film folder of a dataset?)"
        )
    return shard_paths(shards_dir)


# ---- the work ------------------------------------------------------------------------------


def _caption_shards(
    shards,
    stage: CaptionStage,
    cache: CaptionCache,
    runner,
    shard_config,
    reviews: dict[str, Review] | None = None,
    scores: ClipScores | None = None,
):
    """Caption each shard's clips and, with a CLIP (`scores`), score each caption against its
    clip (`caption_match`), then rewrite the shard once."""
    counts: Counter[str | None] = Counter()
    work: Counter[str] = Counter()
    for path in shards:
        clips = _read_shard(path)
        stored_usable = _as_reviewed(clips, reviews or {})
        keys = [stage.cache_key(clip) for clip in clips]
        todo = []
        for clip, key in zip(clips, keys):
            if key is not None and key in cache:
                cache.apply(key, clip)
                work["cached"] += 1
            else:
                todo.append(clip)
        batches = [
            todo[i : i + stage.config.batch_size]
            for i in range(0, len(todo), stage.config.batch_size)
        ]
        for sent, done in runner.map(batches):
            _check_bound(sent, done, path)
            _replace_clips(clips, done)
            cache.put_many(  # a clip the model captioned always has a key
                [
                    (key, c)
                    for c in done
                    if c.caption_status == CAPTION_OK and (key := stage.cache_key(c)) is not None
                ]
            )
            work["sent_to_model"] += sum(
                c.caption_status in (CAPTION_OK, CAPTION_FAILED) for c in done
            )
        for clip in clips:  # the shard keeps the automatic flag; the review stays in its own file
            clip.usable = stored_usable[clip.clip_id]
        if scores is not None:
            work["caption_match"] += scores.caption_match(clips)
        _rewrite_shard(path, clips, shard_config)
        counts.update(c.caption_status for c in clips)
        log.info("%s: %d clips, %d from cache", path.name, len(clips), len(clips) - len(todo))
    return counts, work


def _as_reviewed(clips: list[Clip], reviews: dict[str, Review]) -> dict[str, bool]:
    """Let the caption stage see a person's decisions: a clip accepted in review is captioned
    even if the quality stage rejected it, one rejected in review is not (pipeline/data/review.py).
    Returns the stored flags, to be put back before the shard is rewritten."""
    stored = {clip.clip_id: clip.usable for clip in clips}
    for clip in clips:
        review = reviews.get(clip.clip_id)
        if review is not None:
            clip.usable, _ = effective_quality(clip.usable, clip.reject_reasons, review.decision)
    return stored


def _check_bound(sent: list[Clip], done: list[Clip], path: Path) -> None:
    """A batch must come back as the same clips in the same order, whatever the executor did."""
    if [c.clip_id for c in sent] != [c.clip_id for c in done]:
        raise RuntimeError(f"{path}: a caption batch came back with other clips than were sent")


def _replace_clips(clips: list[Clip], done: list[Clip]) -> None:
    """Clips from Ray actors are copies: put them in place of the originals, by clip id."""
    position = {clip.clip_id: i for i, clip in enumerate(clips)}
    for clip in done:
        clips[position[clip.clip_id]] = clip


def _mark_pending(shards, stage: CaptionStage, shard_config) -> Counter[str | None]:
    counts: Counter[str | None] = Counter()
    for path in shards:
        clips = _read_shard(path)
        if any(c.caption_status is None for c in clips):
            stage.process_batch(clips)
            _rewrite_shard(path, clips, shard_config)
        counts.update(c.caption_status for c in clips)
    return counts


# ---- executors: this process, or Ray actors -----------------------------------------------


def _make_runner(stage: CaptionStage, config: CaptionConfig, engine) -> StageRunner:
    executor = config.executor
    if executor == "auto":
        executor = "ray" if config.engine == "lmdeploy" else "local"
    if executor == "local":
        return make_stage_runner("local", stage)
    if executor != "ray":
        raise ValueError(f"caption.executor={config.executor!r}: choose auto, ray or local")
    if engine is not None:
        raise ValueError("an engine object cannot be shipped to Ray actors; use executor local")
    return make_stage_runner("ray", stage, config.workers)


# ---- files ---------------------------------------------------------------------------------


def _read_shard(path: Path) -> list[Clip]:
    return list(read_clips(path))  # checks the shard's schema version before anything is rewritten


def _rewrite_shard(path: Path, clips: list[Clip], shard_config: ShardConfig) -> None:
    """Write the captioned rows aside with the shard writer, then rename over the old shard."""
    if not clips:
        return  # an empty shard has nothing to caption
    aside = path.parent / CAPTION_REWRITE_DIR
    for stale in aside.glob("*") if aside.is_dir() else []:
        stale.unlink()  # left by an interrupted rewrite; the shard itself was never touched
    one_file = replace(shard_config, max_bytes=2**62)  # the same rows must stay in one file
    with ShardWriter(aside, path.stem, one_file, clip_schema()) as writer:
        writer.write_all(clips)
    [written] = writer.paths
    os.replace(written, path)
    aside.rmdir()


def _summary(
    stage: CaptionStage, counts: Counter, work: Counter, stats: Counter, started: float
) -> CaptionCounts:
    config = stage.config
    return CaptionCounts(
        model=config.model,
        engine=config.engine if config.model else None,
        prompt_version=stage.prompt_version if config.model else None,
        num_frames=config.num_frames,
        protagonists=[name for name, _ in stage.protagonists],
        clips=sum(counts.values()),
        by_status=dict(sorted(counts.items())),
        from_cache=work["cached"],
        sent_to_model=work["sent_to_model"],
        requests=stats["requests"],
        retried_requests=stats["retried_requests"],
        seconds=round(time.monotonic() - started, 2),
        pending=counts.get(CAPTION_PENDING, 0),
        absent=frozenset({"cache_unreadable_lines", "hint"}),  # each pass adds its own
    )


def _update_summary(film_dir: Path, caption_summary: CaptionCounts) -> None:
    FilmFolder(film_dir).update_summary(
        lambda summary: summary.updated(
            caption=caption_summary, captions=_captions_state(caption_summary)
        )
    )


def _captions_state(caption_summary: CaptionCounts) -> str:
    """The one-word state the film summary shows: pending, complete or incomplete."""
    by_status = caption_summary.by_status
    if not caption_summary.model:
        return CAPTION_PENDING
    return (
        "incomplete"
        if by_status.get(CAPTION_FAILED) or by_status.get(CAPTION_PENDING)
        else "complete"
    )
