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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core import storage
from core.cli import Interrupted
from pipeline.data.config import ConfigError, PipelineConfig, apply_mapping, check_choices
from pipeline.data.corpus import write_dataset_summary
from pipeline.data.ip import IP
from pipeline.executors import Executor, make_executor
from pipeline.running.film_tasks import FilmResult, fetched_film
from pipeline.running.finalize import complete_summary
from pipeline.running.folder_passes import caption_pass, quality_pass
from pipeline.running.scheduler import FilmScheduler
from pipeline.running.segments import plan_segments
from stages.probe import FilmError, Probe


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
    scheduler = FilmScheduler(executor, out_dir, config.run.films_in_flight, force)
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
        outcome = FilmScheduler(executor, out_dir, 1).run([(0, path, config, ip)])[0]
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
            film = Probe().process(fetched_film(path))
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
                complete_summary(film_dir, film_cfg, film_ip) is not None,
            )
        )
    return plans


def _as_result(path: str | Path, outcome) -> FilmResult:
    if isinstance(outcome, FilmResult):
        return outcome
    if isinstance(outcome, FilmError | ConfigError):
        return FilmResult(str(path), None, False, str(outcome))
    return FilmResult(str(path), None, False, f"{path}: {type(outcome).__name__}: {outcome}")
