"""What every executor does with a job: its progress reports, sent a few hundred frames at a
time; where it ran, recorded on its result; the progress bar the driver draws; and `map` over
`submit` and `wait`."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tqdm import tqdm

from pipeline.executors.base import JobFn, JobReport

if TYPE_CHECKING:
    from pipeline.executors.base import Executor


class BarInThisProcess:
    """A progress bar drawn by this process, which the jobs' reports advance (`self._bar`)."""

    progress: bool
    _bar: tqdm | None = None

    @contextmanager
    def progress_bar(self, desc: str) -> Iterator[tqdm]:
        with make_bar(0, desc, self.progress) as bar:
            self._bar = bar
            try:
                yield bar
            finally:
                self._bar = None

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        return map_jobs(self, fn, jobs, total, desc)  # type: ignore[arg-type]


def map_jobs(executor: Executor, fn: JobFn, jobs: list, total: int, desc: str) -> list:
    """`fn(job, report)` for every job, all submitted at once; results (or exceptions) in job
    order."""
    with executor.progress_bar(desc) as bar:
        bar.total = total
        tasks = [executor.submit(fn, job) for job in jobs]
        pending = list(tasks)
        while pending:
            finished = set(executor.wait(pending))
            pending = [t for t in pending if t not in finished]
    return [executor.result(task) for task in tasks]


def ignore_report(n: int) -> None:
    pass


@contextmanager
def reports_in_batches(send: Callable[[int], None], every: int = 256) -> Iterator[JobReport]:
    """A job's `report`, passed on to the driver a few hundred frames at a time (each message
    costs a pickle and a system call, or a Ray actor call), the rest when the job ends."""
    pending = [0]

    def report(n: int) -> None:
        pending[0] += n
        if pending[0] >= every:
            send(pending[0])
            pending[0] = 0

    try:
        yield report
    finally:
        if pending[0]:
            send(pending[0])


def placed(result, node: str):
    """Record where a job ran (on results that have room for it: a `ran_on` field or key), so a
    run's summary shows how the work spread over the cluster."""
    where = {"node": node, "host": socket.gethostname()}
    if isinstance(result, dict):
        result["ran_on"] = where
    elif hasattr(result, "ran_on"):
        result.ran_on = where
    return result


def make_bar(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(
        total=total,
        desc=desc,
        unit="frame",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )
