"""Films scheduled together on the executor (pipeline/running/runner.py drives it): each film's prepare,
segment and finalize tasks, a bounded number of films in flight, each task's result routed to
its film's next step. The driver only routes results; a film's output never depends on the
order in which its tasks finish. A short film's prepare task may cut its one segment as well
(pipeline/running/film_tasks.py): its finalize follows its prepare."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import storage
from core.cli import Interrupted
from core.film import SegmentStats
from core.resources import Resources
from pipeline.data.config import PipelineConfig
from pipeline.data.ip import IP
from pipeline.executors import Executor
from pipeline.running.film_tasks import (
    FilmPlan,
    FilmResult,
    FinalizeJob,
    PrepareJob,
    finalize_film,
    prepare_film,
    run_stored_segment,
    segment_committed,
    segment_job,
)
from pipeline.running.segments import frame_stage_resources
from stages.base import build_clip_stages
from stages.probe import film_slug


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


class FilmScheduler:
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
        self.shared_names: set[str] = set()  # film names more than one film of the run has

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
        self.shared_names = _shared_names([path for _, path, _, _ in work])
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
        one_task = _folder_name(path) not in self.shared_names and not _needs_gpu(config)
        job = PrepareJob(path, self.out_dir, config, ip, self.force, cut_if_short=one_task)
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
        if value.cut is not None:  # a short film, cut in its prepare task (no GPU reserved)
            self.segments_planned += len(value.segments)
            self.cutting[index] = value
            results, value.cut = value.cut, None
            self._finalize(index, value, job, step.started, _placed_as(results, value.ran_on))
            return
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
        jobs = [segment_job(value, config, ip, s) for s in value.segments]
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
        self._finalize(index, step.plan, step.job, step.started, results)

    def _finalize(
        self, index: int, plan: FilmPlan, job: PrepareJob, started: float, results: list
    ) -> None:
        finalize = FinalizeJob(plan, job.config, job.ip, results, started)
        self.tasks[self.executor.submit(finalize_film, finalize)] = _Finalizing(index)


def _segments_finished(outcome) -> int:
    """Segments a film's result says are done: all of a complete film's, not the failed ones."""
    summary = outcome.summary if isinstance(outcome, FilmResult) else None
    return summary.segments - len(summary.failed_segments or {}) if summary else 0


def _committed_segments(plan: FilmPlan) -> int:
    """Segments of a film being cut whose DONE marker is written (a rerun reuses them)."""
    return sum(segment_committed(plan.film_dir, seg) for seg in plan.segments)


def _folder_name(path: str | Path) -> str:
    """The readable part of the film's output folder's name (stages/probe.py `film_slug`)."""
    return film_slug(Path(storage.name(path)).stem, "")


def _shared_names(paths: list[str | Path]) -> set[str]:
    """Names of output folders more than one film may share: two such films with the same
    content are one folder, which only the scheduler sees once both are prepared, so neither
    may cut a segment in its prepare task."""
    names = Counter(_folder_name(path) for path in paths)
    return {name for name, films in names.items() if films > 1}


def _needs_gpu(config: PipelineConfig) -> bool:
    """Whether the film's segment tasks reserve a GPU (a prepare task reserves none)."""
    return segment_resources(config).resources.needs_gpu()


def _placed_as(results: list, ran_on: dict[str, str] | None) -> list:
    """A prepare task's segment results, marked where that task ran (the executor marks the
    task's own result only)."""
    for stats in results:
        if isinstance(stats, SegmentStats):
            stats.ran_on = ran_on
    return results


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
