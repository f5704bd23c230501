"""Where work runs: in this process, or as Ray tasks. The only module that imports Ray.

`map(fn, jobs, total, desc)` calls `fn(job, report)` for each job and returns the results in job
order; `report(n)` advances a progress bar by n units of work from wherever the job runs. A job
that raises does not stop the others: its result is the exception, for the caller to record.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

from tqdm import tqdm

log = logging.getLogger(__name__)


class LocalExecutor:
    name = "local"

    def __init__(self, progress: bool = True):
        self.progress = progress

    def map(self, fn: Callable, jobs: list, total: int, desc: str) -> list:
        results = []
        with _bar(total, desc, self.progress) as bar:
            for job in jobs:
                try:
                    results.append(fn(job, bar.update))
                except Exception as exc:  # recorded by the caller; other jobs go on
                    results.append(exc)
        return results


class RayExecutor:
    """Ray tasks, one CPU each. With RAY_ADDRESS set, joins that cluster; otherwise starts a
    local Ray (the embedded default) the first time it is used."""

    name = "ray"

    def __init__(self, num_cpus: int | None = None, progress: bool = True):
        self.num_cpus = num_cpus
        self.progress = progress

    def map(self, fn: Callable, jobs: list, total: int, desc: str) -> list:
        ray = self._ray()
        counter = _progress_counter(ray)
        remote_fn = ray.remote(num_cpus=1, max_retries=0)(_run_with_counter)
        futures = [remote_fn.remote(fn, job, counter) for job in jobs]
        with _bar(total, desc, self.progress) as bar:
            pending = list(futures)
            while pending:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
                bar.update(ray.get(counter.take.remote()))
            bar.update(ray.get(counter.take.remote()))
        return [_result(ray, f) for f in futures]

    def _ray(self):
        import ray

        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS")
            began = time.perf_counter()
            ray.init(address=address or None,
                     num_cpus=None if address else self.num_cpus,
                     include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=True,
                     runtime_env={"env_vars": {"PYTHONPATH": _project_root()}})
            log.info("ray started in %.1f s (%s)", time.perf_counter() - began,
                     address or "embedded local cluster")
        return ray


def make_executor(name: str, num_cpus: int | None = None, progress: bool = True):
    if name == "local":
        return LocalExecutor(progress)
    if name == "ray":
        return RayExecutor(num_cpus, progress)
    raise ValueError(f"unknown executor {name!r} (ray or local)")


def _run_with_counter(fn, job, counter):
    pending = [0]

    def report(n: int) -> None:
        pending[0] += n
        if pending[0] >= 256:  # batch the updates: one actor call per few hundred frames
            counter.add.remote(pending[0])
            pending[0] = 0

    try:
        return fn(job, report)
    finally:
        counter.add.remote(pending[0])


def _progress_counter(ray):
    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self):
            self.count = 0

        def add(self, n: int) -> None:
            self.count += n

        def take(self) -> int:
            taken, self.count = self.count, 0
            return taken

    return Counter.remote()


def _result(ray, future):
    try:
        return ray.get(future)
    except Exception as exc:  # a task's own exception arrives wrapped; unwrap for the caller
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, Exception) else exc


def _bar(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="frame", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=False)


def _project_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent)
