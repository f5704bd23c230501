"""Where work runs: in this process, as Ray tasks, or on Ray actors. The only module that uses Ray.

`Executor` is the one contract the runner schedules through; `LocalExecutor` and `RayExecutor`
implement it. `StageRunner` is the contract of a batched clip stage's replicas (the caption
pass): `LocalStageRunner` in this process, `StageActorPool` on Ray actors. What a task or replica
reserves is a `core.resources.Resources`, declared by the stage.

`map(fn, jobs, total, desc)` calls `fn(job, report)` for each job and returns the results in job
order; `report(n)` advances a progress bar by n units of work from wherever the job runs. A job
that raises does not stop the others: its result is the exception, for the caller to record. A
job's result with a `ran_on` field (or key) gets the Ray node id (or "local") and host name where
it ran.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from tqdm import tqdm

from core.resources import Resources

if TYPE_CHECKING:
    from core.record import Clip
    from stages.base import ClipStage

log = logging.getLogger(__name__)
RAY_TOKEN_WARNING_LOGGER = "ray._private.authentication.authentication_token_setup"

# A job function: `fn(job, report)`, where `report(n)` advances the progress bar by n units.
JobFn = Callable[[Any, Callable[[int], None]], Any]
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


class _LocalTask:
    def __init__(self, value):
        self.value = value


class LocalExecutor:
    """Everything in this process: a submitted task runs at once, so `wait` finds it done."""

    name = "local"

    def __init__(self, progress: bool = True, num_cpus: int | None = None):
        self.progress = progress
        self.num_cpus = num_cpus
        self._bar: tqdm | None = None

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
        report = self._bar.update if self._bar is not None else _ignore
        try:
            with cpu_cap(self.num_cpus):  # the job's threads (its clip lane) inherit the cap
                return _LocalTask(_placed(fn(job, report), "local"))
        except Exception as exc:  # recorded by the caller; other jobs go on
            return _LocalTask(exc)

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        return list(tasks)

    def result(self, task: Hashable) -> Any:
        assert isinstance(task, _LocalTask), "a task of this executor"
        return task.value

    @contextmanager
    def progress_bar(self, desc: str) -> Iterator[tqdm]:
        with _bar(0, desc, self.progress) as bar:
            self._bar = bar
            try:
                yield bar
            finally:
                self._bar = None

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        return map_jobs(self, fn, jobs, total, desc)


class RayExecutor:
    """Ray tasks, placed by their declared resources. With RAY_ADDRESS set, joins that cluster;
    otherwise starts a local Ray (the embedded default) the first time it is used."""

    name = "ray"

    def __init__(self, num_cpus: int | None = None, progress: bool = True):
        self.num_cpus = num_cpus
        self.progress = progress
        self._counter: Any = None  # the progress counter actor of the current run
        self._bar: tqdm | None = None
        self._remote: dict[Resources, Any] = {}

    def start(self) -> None:
        self._ray()

    def close(self) -> None:
        """Shut down this process's Ray connection (and the embedded Ray it started)."""
        import ray

        ray.shutdown()
        self._remote.clear()  # remote functions belong to the connection that made them

    def slots(self) -> int:
        """CPUs of the whole cluster: how many one-CPU tasks can run at once."""
        return max(1, int(self._ray().cluster_resources().get("CPU", 1)))

    def shortfall(self, resources: Resources) -> str | None:
        """Why a task asking `resources` could never be placed on this cluster (Ray would wait
        for it forever), or None."""
        cluster = self._ray().cluster_resources()
        if resources.gpus > cluster.get("GPU", 0):
            return f"needs {resources.gpus:g} GPU(s); the Ray cluster has {cluster.get('GPU', 0):g}"
        return None

    def submit(self, fn: JobFn, job: Any, resources: Resources = ONE_CPU) -> Hashable:
        ray = self._ray()
        if resources not in self._remote:
            # A task rewrites its own outputs from scratch, so re-running it after a lost worker
            # is safe; exceptions raised by the job itself are not retried.
            self._remote[resources] = ray.remote(
                num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=1
            )(_run_with_counter)
        return self._remote[resources].remote(fn, job, self._counter)

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        """The tasks that finished: back as soon as one does (its film's next step is submitted
        at once), at the latest after half a second (the progress bar's tick)."""
        ray = self._ray()
        done, _ = ray.wait(list(tasks), num_returns=1, timeout=0.5)
        if done:
            done, _ = ray.wait(list(tasks), num_returns=len(tasks), timeout=0)
        if self._counter is not None and self._bar is not None:
            self._bar.update(ray.get(self._counter.take.remote()))
        return done

    def result(self, task: Hashable) -> Any:
        return _result(self._ray(), task)

    @contextmanager
    def progress_bar(self, desc: str) -> Iterator[tqdm]:
        ray = self._ray()
        # The counter is an actor, so a worker process of its own: only for a bar that is shown.
        self._counter = _progress_counter(ray) if self.progress else None
        with _bar(0, desc, self.progress) as bar:
            self._bar = bar
            try:
                yield bar
                if self._counter is not None:
                    bar.update(ray.get(self._counter.take.remote()))
            finally:
                if self._counter is not None:
                    ray.kill(self._counter)  # one per run: never leave it idling in a worker
                self._counter, self._bar = None, None

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        return map_jobs(self, fn, jobs, total, desc)

    def _ray(self):
        return init_ray(self.num_cpus)


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


def _ignore(n: int) -> None:
    pass


def init_ray(num_cpus: int | None = None):
    """Connect to RAY_ADDRESS if set, else start the embedded local Ray (once per process)."""
    import ray

    if not ray.is_initialized():
        # Ray warns on every start that it enabled token authentication by default: nothing for
        # the user to do (a cluster's own token is still used), so not worth a line in each run.
        logging.getLogger(RAY_TOKEN_WARNING_LOGGER).setLevel(logging.ERROR)
        address = os.environ.get("RAY_ADDRESS")
        began = time.perf_counter()
        if address:
            _join_cluster(ray, address)
        else:
            _start_embedded(ray, num_cpus)
        log.info(
            "ray started in %.1f s (%s)",
            time.perf_counter() - began,
            address or "embedded local cluster",
        )
    return ray


def _join_cluster(ray, address: str) -> None:
    """A cluster's workers were started by `ray start` on other machines, with environments of
    their own: the runtime_env tells them where this project's code is."""
    ray.init(
        address=address,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": _project_root()}},
    )


def _start_embedded(ray, num_cpus: int | None) -> None:
    """Ray's processes on this machine are this process's children and inherit its environment
    and CPU affinity: so no runtime_env (one would give the tasks a second worker pool, started
    after the first, its own imports paid again), and `num_cpus` pins them to that many cores."""
    with _children_inherit(num_cpus):
        ray.init(
            # "local", not None: given None, Ray joins whatever cluster its address file names,
            # and a `ray start` cluster that died without `ray stop` leaves that file behind
            # (ray.init then waits forever on the dead address).
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )


@contextmanager
def _children_inherit(num_cpus: int | None) -> Iterator[None]:
    """While Ray starts its processes: this project's root first on PYTHONPATH (the workers
    import the same code as the driver, whatever else is installed), workers at this process's
    niceness rather than Ray's default 15 (unless RAY_worker_niceness says otherwise: the
    embedded Ray stands in for this process, which a busy machine would not slow down by
    itself), and this thread held to `num_cpus` cores (processes it starts inherit that mask).
    All restored afterwards."""
    previous = os.environ.get("PYTHONPATH")
    paths = [_project_root(), *(previous.split(os.pathsep) if previous else [])]
    settings = {
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", str(os.nice(0))),
    }
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        with cpu_cap(num_cpus):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


@contextmanager
def cpu_cap(num_cpus: int | None) -> Iterator[None]:
    """Hold the calling thread, and every thread and process it starts meanwhile, to the first
    `num_cpus` of the cores it may use (None or at least that many: no change). Linux only;
    elsewhere no change."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not num_cpus or not allowed or num_cpus >= len(allowed):
        yield
        return
    os.sched_setaffinity(0, allowed[:num_cpus])
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


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


class StageActorPool:
    """A batched stage on Ray actors: one actor per replica (a loaded model), each placed with the
    stage's declared `resources`. Batches go to whichever actor is free; results come back in
    submission order, each with the batch it answers."""

    def __init__(self, stage: ClipStage, workers: int | None):
        ray = init_ray()
        self.ray, self.stage = ray, stage
        resources = stage.resources
        count = workers or _replicas_that_fit(ray, resources)
        if resources.gpus and count * resources.gpus > ray.cluster_resources().get("GPU", 0):
            raise RuntimeError(
                f"{stage.name}: {count} replicas x {resources.gpus} GPU(s) do not fit "
                f"the cluster's {ray.cluster_resources().get('GPU', 0)} GPU(s)"
            )
        actor_class = ray.remote(num_cpus=resources.cpus, num_gpus=resources.gpus)(_StageActor)
        self.actors = [actor_class.remote(stage) for _ in range(count)]
        try:
            ray.get([a.ready.remote() for a in self.actors])  # load errors surface here
        except ray.exceptions.RayError as exc:
            self.close()
            cause = getattr(exc, "cause", None) or exc
            raise RuntimeError(f"{stage.name}: a replica failed to start: {cause}") from None
        log.info("%s: %d Ray actor(s), %s GPU(s) each", stage.name, count, resources.gpus)

    def map(self, batches):
        free, in_flight, results, next_out = list(self.actors), {}, {}, 0
        for index, batch in enumerate(batches):
            if not free:
                next_out = yield from self._drain_one(in_flight, free, results, batches, next_out)
            actor = free.pop()
            in_flight[actor.process_batch.remote(batch)] = (index, actor)
        while in_flight:
            next_out = yield from self._drain_one(in_flight, free, results, batches, next_out)

    def _drain_one(self, in_flight, free, results, batches, next_out):
        [ref], _ = self.ray.wait(list(in_flight), num_returns=1)
        index, actor = in_flight.pop(ref)
        results[index] = self.ray.get(ref)
        free.append(actor)
        while next_out in results:  # hand results out in batch order
            yield batches[next_out], results.pop(next_out)
            next_out += 1
        return next_out

    def take_stats(self) -> Counter[str]:
        """The stage's counts since the last call, summed over the actors."""
        total: Counter[str] = Counter()
        for stats in self.ray.get([a.stats.remote() for a in self.actors]):
            total.update(stats)
        return total

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)


class _StageActor:
    def __init__(self, stage: ClipStage):
        self.stage = stage
        self.stage.setup()

    def ready(self) -> bool:
        return True

    def process_batch(self, clips: list) -> list:
        return self.stage.process_batch(clips)

    def stats(self) -> Counter[str]:
        return self.stage.take_stats()


def _replicas_that_fit(ray, resources) -> int:
    available = ray.cluster_resources()
    if resources.gpus:
        gpus = int(available.get("GPU", 0) // resources.gpus)
        if gpus < 1:
            raise RuntimeError(
                f"the stage needs {resources.gpus} GPU(s) per replica; "
                f"the Ray cluster has {available.get('GPU', 0)}"
            )
        return gpus
    return 1


def make_executor(name: str, num_cpus: int | None = None, progress: bool = True) -> Executor:
    if name == "local":
        return LocalExecutor(progress, num_cpus)
    if name == "ray":
        return RayExecutor(num_cpus, progress)
    raise ValueError(f"unknown executor {name!r} (ray or local)")


def _run_with_counter(fn, job, counter):
    pending = [0]

    def report(n: int) -> None:
        pending[0] += n
        if pending[0] >= 256 and counter is not None:  # one actor call per few hundred frames
            counter.add.remote(pending[0])
            pending[0] = 0

    try:
        import ray

        return _placed(fn(job, report), ray.get_runtime_context().get_node_id())
    finally:
        if counter is not None:
            counter.add.remote(pending[0])


def _placed(result, node: str):
    """Record where a job ran (on results that have room for it: a `ran_on` field or key), so a
    run's summary shows how the work spread over the cluster."""
    where = {"node": node, "host": socket.gethostname()}
    if isinstance(result, dict):
        result["ran_on"] = where
    elif hasattr(result, "ran_on"):
        result.ran_on = where
    return result


def _progress_counter(ray):
    @ray.remote(num_cpus=0)
    class ProgressCounter:
        def __init__(self):
            self.count = 0

        def add(self, n: int) -> None:
            self.count += n

        def take(self) -> int:
            taken, self.count = self.count, 0
            return taken

    return ProgressCounter.remote()


def _result(ray, future):
    try:
        return ray.get(future)
    except Exception as exc:  # a task's own exception arrives wrapped; unwrap for the caller
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, Exception) else exc


def _bar(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(
        total=total,
        desc=desc,
        unit="frame",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )


def _project_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent)
