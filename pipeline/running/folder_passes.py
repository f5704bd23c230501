"""The passes over the whole output folder once its films are cut (pipeline/running/runner.py runs them
after the films): the quality pass, which decides every clip with the folder's thresholds and
duplicate index, and the caption pass, one model load for every film cut."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from core import storage
from core.film import SUMMARY_FILE, FilmFolder
from pipeline.data.config import PipelineConfig
from pipeline.data.ip import IP
from pipeline.data.manifest import ReviewedCounts, reviewed_counts

if TYPE_CHECKING:
    from pipeline.running.film_tasks import FilmResult

log = logging.getLogger(__name__)


def quality_pass(results: list[FilmResult], out_dir: str | Path, config: PipelineConfig) -> None:
    """Decide every clip of the output folder, duplicates across its films included, with the
    folder's thresholds (written from this run's settings the first time)."""
    from pipeline.passes.similar import INDEX_DIR

    # s3://: a copy, with the semantic index (so that its search stays incremental), published back
    with storage.working_copy(out_dir, SUMMARY_FILE, beside=(INDEX_DIR,)) as local:
        _fetch_folder_files(out_dir, local)
        _decide_quality(results, out_dir, local, config)


def _fetch_folder_files(out_dir: str | Path, local: Path) -> None:
    """The folder's thresholds and duplicate index, which a copy of its films leaves out (each
    one object, written whole; the pass's new versions are uploaded with the films)."""
    from pipeline.passes.duplicates import INDEX_FILE
    from pipeline.passes.quality import THRESHOLDS_FILE

    if not storage.is_remote(out_dir):
        return
    for name in (THRESHOLDS_FILE, INDEX_FILE):
        remote = storage.join(out_dir, name)
        if storage.exists(remote):
            storage.download(remote, local / name)


def _decide_quality(results, out_dir, local: Path, config: PipelineConfig) -> None:
    from pipeline.passes.bitscan import search_threads
    from pipeline.passes.quality import apply_quality, load_thresholds, save_thresholds

    thresholds, saved = load_thresholds(local, config.reject)
    if saved and thresholds != config.reject:
        log.info(
            "quality: the thresholds of %s are kept (change them with animegamer "
            "quality-calibrate); this run's reject.* settings differ",
            storage.join(out_dir, "quality.json"),
        )
    if not saved:
        save_thresholds(local, thresholds)
    with search_threads(config.run.num_cpus):
        outcome = apply_quality(local, thresholds, config.run.progress)
    for result in results:
        if result.ok and result.film_dir is not None:
            folder = FilmFolder(local / storage.name(result.film_dir))
            result.summary = folder.read_summary()
            result.message += "; " + reviewed_counts(folder).line()  # as the manifest says
    every = sum(map(reviewed_counts, map(FilmFolder, FilmFolder.discover(local))), ReviewedCounts())
    log.info(
        "quality: %d of %d clips usable in %d film(s) of %s",
        every.usable,
        every.clips,
        outcome.films,
        out_dir,
    )


def caption_pass(results: list[FilmResult], config: PipelineConfig, ip: IP) -> None:
    """Caption every film that was cut, with one model load for all of them (films in object
    storage in local copies, published back with their summary.json last)."""
    from pipeline.passes.caption_films import caption_films

    cut = [r for r in results if r.ok and r.film_dir is not None]
    with storage.working_copies([r.film_dir for r in cut], SUMMARY_FILE) as film_dirs:
        for result, film_dir, stats in zip(cut, film_dirs, caption_films(film_dirs, config, ip)):
            result.summary = FilmFolder(film_dir).read_summary()
            counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_status.items()))
            result.message += f"; captions: {counts or 'none'}"
