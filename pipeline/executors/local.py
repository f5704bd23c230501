"""Everything in this process: the executor whose task runs at once (`LocalExecutor`) and a batched
stage's one replica (`LocalStageRunner`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from core.cli import ctrl_c_taken
from core.resources import Resources
from pipeline.executors.base import ONE_CPU, JobFn
from pipeline.executors.cpus import cpu_cap
from pipeline.executors.jobs import BarInThisProcess, ignore_report, placed

if TYPE_CHECKING:
    from stages.base import ClipStage


class _LocalTask:
    def __init__(self, value):
        self.value = value


class LocalExecutor(BarInThisProcess):
    """Everything in this process: a submitted task runs at once, so `wait` finds it done."""

    name = "local"

    def __init__(self, progress: bool = True, num_cpus: int | None = None):
        self.progress = progress
        self.num_cpus = num_cpus

    def start(self) -> None:
        """Nothing to bring up: this process is the worker."""

    def close(self) -> None:
        """Nothing to release."""

    def slots(self) -> int:
        return 1

    def shortfall(self, resources: Resources) -> str | None:
        """In this process a stage takes the device it resolved (core/device.py) itself."""
        return None

    def submit(self, fn: JobFn, job: Any, resources: Resources = ONE_CPU) -> _LocalTask:
        report = self._bar.update if self._bar is not None else ignore_report
        taken = ctrl_c_taken()
        try:
            with cpu_cap(self.num_cpus):  # the job's threads (its clip lane) inherit the cap
                return _LocalTask(placed(fn(job, report), "local"))
        except Exception as exc:  # recorded by the caller; other jobs go on
            if ctrl_c_taken() != taken:  # a Ctrl-C that a native import turned into its error
                raise KeyboardInterrupt from exc
            return _LocalTask(exc)

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        return list(tasks)

    def result(self, task: Hashable) -> Any:
        assert isinstance(task, _LocalTask), "a task of this executor"
        return task.value


class LocalStageRunner:
    """A batched stage in this process, with the same interface as StageActorPool."""

    def __init__(self, stage: ClipStage):
        self.stage = stage
        stage.setup()

    def map(self, batches):
        for batch in batches:
            yield batch, self.stage.process_batch(list(batch))

    def take_stats(self) -> Counter[str]:
        """The stage's counts since the last call (one film's)."""
        return self.stage.take_stats()

    def close(self) -> None:
        pass
