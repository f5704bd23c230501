"""Where work runs: in this process, in worker processes on this machine, as Ray tasks, or on Ray
actors. The rest of the pipeline imports this module only: the contracts (from `base.py`) and
the factories. Each executor is a module of its own, imported when one is made (`local.py`,
`processes.py` with `process_worker.py`, `ray.py`: the only module that imports Ray); what they
share is in `base.py` (the contracts), `jobs.py` (a job's progress and place), `cpus.py` (cores
and cgroup quotas) and `checkout.py`. None of them imports this module, so there is no cycle.

`Executor` is the one contract the runner schedules through; `LocalExecutor`, `ProcessExecutor`
(the default on one machine) and `RayExecutor` (a cluster, or `run.executor=ray`) implement it.
`StageRunner` is the contract of a batched clip stage's replicas (the caption pass):
`LocalStageRunner` in this process, `StageActorPool` on Ray actors. What a task or replica
reserves is a `core.resources.Resources`, declared by the stage.

`map(fn, jobs, total, desc)` calls `fn(job, report)` for each job and returns the results in job
order; `report(n)` advances a progress bar by n units of work from wherever the job runs. A job
that raises does not stop the others: its result is the exception, for the caller to record. A
job's result with a `ran_on` field (or key) gets the Ray node id (or "local") and host name where
it ran.

Which executor runs a film folder (`run.executor=auto`, the default): Ray when RAY_ADDRESS names a
cluster, else `ProcessExecutor`. On one machine the embedded Ray costs a third more CPU than the
work itself on a folder of short films (docs/corpus.md, "One machine"): its helper processes (API
server, monitors, agents) and every worker's own start and imports. A pool of processes forked
from one that has imported the pipeline costs next to nothing and runs the same tasks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipeline.executors.base import ONE_CPU, Executor, JobFn, JobReport, StageRunner, sendable

if TYPE_CHECKING:
    from stages.base import ClipStage

__all__ = [  # the contracts (defined in base.py, which the executors' modules import) and factories
    "EXECUTORS",
    "ONE_CPU",
    "Executor",
    "JobFn",
    "JobReport",
    "StageRunner",
    "make_executor",
    "make_stage_runner",
    "prestart",
    "resolve_executor",
    "sendable",
]


EXECUTORS = ("auto", "processes", "ray", "local")  # run.executor's choices


def resolve_executor(name: str) -> str:
    """`run.executor`: 'auto' is Ray where RAY_ADDRESS names a cluster, else worker processes."""
    if name == "auto":
        return "ray" if os.environ.get("RAY_ADDRESS") else "processes"
    return name


def prestart(name: str) -> None:
    """Start now what executor `name` needs first and takes longest to start: the process pool's
    fork server, which then imports the pipeline (`PRELOAD`, about 0.7 s) while this process is
    still importing its own, so the pool is ready that much sooner. Unused, it costs that CPU
    beside the run and ends with this process."""
    if resolve_executor(name) != "processes":
        return
    from pipeline.executors.processes import start_fork_server

    start_fork_server()


def make_executor(name: str, num_cpus: int | None = None, progress: bool = True) -> Executor:
    """The executor `run.executor` names; its module is imported here, so importing this one
    costs nothing of it."""
    name = resolve_executor(name)
    if name == "local":
        from pipeline.executors.local import LocalExecutor

        return LocalExecutor(progress, num_cpus)
    if name == "processes":
        from pipeline.executors.processes import ProcessExecutor

        return ProcessExecutor(num_cpus, progress)
    if name == "ray":
        from pipeline.executors.ray import RayExecutor

        return RayExecutor(num_cpus, progress)
    raise ValueError(f"unknown executor {name!r} (auto, processes, ray or local)")


def make_stage_runner(name: str, stage: ClipStage, workers: int | None = None) -> StageRunner:
    """A batched stage's replicas: 'local' (one, in this process) or 'ray' (`workers` actors, or
    as many as the cluster fits)."""
    if name == "local":
        from pipeline.executors.local import LocalStageRunner

        return LocalStageRunner(stage)
    if name == "ray":
        from pipeline.executors.ray import StageActorPool

        return StageActorPool(stage, workers)
    raise ValueError(f"unknown stage runner {name!r} (local or ray)")
