"""The executors' contracts: `Executor` (where the runner's tasks run), `StageRunner` (a batched
clip stage's replicas) and what a job is (`JobFn`, `JobReport`; its exception as its result:
`sendable`). Every executor's module imports them from here; the rest of the code from
`pipeline.executors`, which re-exports them."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from core.resources import Resources

if TYPE_CHECKING:
    from tqdm import tqdm

    from core.record import Clip

# A job function: `fn(job, report)`, where `report(n)` advances the progress bar by n units.
JobReport = Callable[[int], None]
JobFn = Callable[[Any, JobReport], Any]
ONE_CPU = Resources()


class Executor(Protocol):
    """Runs jobs as tasks. A task is an opaque handle: submit it, wait for it, take its result
    (the job's return value, or the exception it raised: one failed job never stops the others)."""

    name: str

    def start(self) -> None:
        """Bring the executor up now (Ray: start or join the cluster) rather than on first use,
        so that a caller can time its start-up apart."""
        ...

    def close(self) -> None:
        """Release what `start` (or first use) brought up in this process."""
        ...

    def slots(self) -> int:
        """How many one-CPU tasks can run at once."""
        ...

    def shortfall(self, resources: Resources) -> str | None:
        """Why a task asking `resources` could never be placed here, said of the task ("needs 1
        GPU(s); the Ray cluster has 0"), or None: it can."""
        ...

    def submit(self, fn: JobFn, job: Any, resources: Resources = ONE_CPU) -> Hashable:
        """Start `fn(job, report)` where `resources` are free."""
        ...

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        """The tasks of `tasks` that have finished (soon after one does)."""
        ...

    def result(self, task: Hashable) -> Any:
        """A finished task's return value, or the exception its job raised."""
        ...

    def progress_bar(self, desc: str) -> AbstractContextManager[tqdm]:
        """A progress bar that jobs submitted inside it advance through `report`."""
        ...

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        """`fn(job, report)` for every job; results (or exceptions) in job order."""
        ...


class StageRunner(Protocol):
    """A batched clip stage's loaded replicas."""

    def map(self, batches: list[list[Clip]]) -> Iterator[tuple[list[Clip], list[Clip]]]:
        """Each batch with the stage's answer to it, in batch order."""
        ...

    def take_stats(self) -> Counter[str]:
        """The stage's counts since the last call, summed over replicas."""
        ...

    def close(self) -> None: ...


def said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def sendable(exc: Exception) -> Exception:
    """A job's exception as its result, or where it would not survive pickling (a worker sends
    it to the driver), its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(said(exc))
    return exc
