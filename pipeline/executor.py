"""Where work runs: in this process, in worker processes on this machine, as Ray tasks, or on Ray
actors. The only module that uses Ray.

`Executor` is the one contract the runner schedules through; `LocalExecutor`, `ProcessExecutor`
(the default on one machine) and `RayExecutor` (a cluster, or `run.executor=ray`) implement it. `StageRunner` is the contract of a batched clip stage's replicas (the caption
pass): `LocalStageRunner` in this process, `StageActorPool` on Ray actors. What a task or replica
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

import logging
import math
import os
import pickle
import signal
import socket
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from multiprocessing import connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tqdm import tqdm

from core.resources import Resources

if TYPE_CHECKING:
    from core.record import Clip
    from stages.base import ClipStage

log = logging.getLogger(__name__)
RAY_TOKEN_WARNING_LOGGER = "ray._private.authentication.authentication_token_setup"

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


class _LocalTask:
    def __init__(self, value):
        self.value = value


class _BarInThisProcess:
    """A progress bar drawn by this process, which the jobs' reports advance (`self._bar`)."""

    progress: bool
    _bar: tqdm | None = None

    @contextmanager
    def progress_bar(self, desc: str) -> Iterator[tqdm]:
        with _bar(0, desc, self.progress) as bar:
            self._bar = bar
            try:
                yield bar
            finally:
                self._bar = None

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        return map_jobs(self, fn, jobs, total, desc)  # type: ignore[arg-type]


class LocalExecutor(_BarInThisProcess):
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


class ProcessExecutor(_BarInThisProcess):
    """Worker processes on this machine, one per CPU of `num_cpus` (by default one per core this
    process may use), started once and held to those cores: the default without a cluster.

    The workers are forked from multiprocessing's fork server after it imported the pipeline
    (`PRELOAD`), so no worker imports it again (a Ray worker does, after booting Ray's own
    runtime), and none is a fork of the driver, whatever thread pools the driver runs (OpenMP's
    and torch's are not fork-safe once started). The fork server is not free of threads either
    (pyarrow's jemalloc and OpenBLAS start theirs on import): forking it is safe because those
    libraries reset themselves in the child (atfork handlers), not because it has no threads.
    Workers ignore Ctrl-C (the driver ends
    the run and, exiting, the workers), die with the driver even under kill -9, and run at its
    niceness. GPUs follow Ray's rule (core/device.py): a task that reserves a GPU runs in a
    worker that sees only that GPU, one that reserves none sees no GPU."""

    name = "processes"

    def __init__(self, num_cpus: int | None = None, progress: bool = True):
        self.num_cpus = num_cpus
        self.progress = progress
        self._pool: _WorkerPool | None = None

    def start(self) -> None:
        self._workers()

    def close(self) -> None:
        """Stop the workers (also done when the executor is dropped, and at exit)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def slots(self) -> int:
        return self._workers().cpus

    def shortfall(self, resources: Resources) -> str | None:
        return self._workers().gpu_shortfall(resources.gpus) if resources.needs_gpu() else None

    def submit(self, fn: JobFn, job: Any, resources: Resources = ONE_CPU) -> Hashable:
        return self._workers().submit(fn, job, resources.gpus)

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        """The tasks that finished: back as soon as one does, at the latest after half a second
        (the progress bar's tick)."""
        return list(self._workers().wait(tasks, self._bar))

    def result(self, task: Hashable) -> Any:
        """Taken once: the pool keeps no value after it is read (`run.films_in_flight` bounds the
        driver's memory)."""
        return self._workers().results.pop(task)

    def _workers(self) -> _WorkerPool:
        if self._pool is None:
            self._pool = _WorkerPool(self.num_cpus)
            weakref.finalize(self, self._pool.close)  # an executor dropped unclosed
        return self._pool


# What the fork server imports once for every worker: the modules of the tasks the runner submits
# (probe, crop, segments, finalize, and through them PyAV, OpenCV, pyarrow and the stages), and
# what reading and writing Parquet imports on first use.
PRELOAD = ["pipeline.runner", "pyarrow.dataset", "pyarrow.pandas_compat"]
MAX_RETRIES = 1  # of a task whose worker process died under it (as Ray's max_retries)


@dataclass
class _PoolTask:
    fn: JobFn
    job: Any
    gpus: float
    tries: int = 0


@dataclass(eq=False)
class _Worker:
    """A worker process, the driver's end of its pipe, the GPU it sees (None: no GPU) and the
    task it runs (None: idle)."""

    process: Any
    conn: Any
    gpu: str | None
    task: int | None = None


@dataclass
class _WorkerPool:
    """The workers of a ProcessExecutor. The driver sends each task to an idle worker that suits
    it (its GPU, or none), at most `cpus` tasks at a time, and reads progress and results back
    through the workers' pipes."""

    num_cpus: int | None
    cores: list[int] = field(default_factory=list)
    cpus: int = 1
    workers: list[_Worker] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)  # tasks waiting for a worker, oldest first
    tasks: dict[int, _PoolTask] = field(default_factory=dict)  # queued or running
    results: dict[Hashable, Any] = field(default_factory=dict)
    gpu_free: dict[str, float] | None = None  # unreserved share of each GPU, counted when asked
    submitted: int = 0  # tasks so far; a task's handle is its number

    def __post_init__(self) -> None:
        usable = usable_cpus()
        if self.num_cpus and self.num_cpus > usable:
            log.warning(
                "run.num_cpus=%d, but this process may use %d CPU(s) (its cores and the cgroup's "
                "CPU quota): %d worker(s)",
                self.num_cpus,
                usable,
                usable,
            )
        self.cpus = min(self.num_cpus or usable, usable)
        allowed = _allowed_cores()
        self.cores = allowed[: self.cpus] if self.num_cpus else allowed
        self.context = _fork_server()
        # the workers' read end; this process holds the only write end, never written to
        self.lifeline, self._lifeline_writer = self.context.Pipe(duplex=False)
        self.workers = [self._spawn(None) for _ in range(self.cpus)]

    def close(self) -> None:
        for worker in self.workers:
            worker.process.terminate()
        for worker in self.workers:
            worker.process.join(timeout=5)
            worker.conn.close()
        self.workers = []
        self._lifeline_writer.close()

    def gpu_shortfall(self, gpus: float) -> str | None:
        if gpus > 1:
            return f"needs {gpus:g} GPU(s); a worker process takes at most one (--executor ray)"
        count = len(self._gpus())
        return None if count else f"needs {gpus:g} GPU(s); this machine has {count}"

    def submit(self, fn: JobFn, job: Any, gpus: float) -> int:
        task = self.submitted = self.submitted + 1
        self.tasks[task] = _PoolTask(fn, job, gpus)
        self.queue.append(task)
        self._dispatch()
        return task

    def wait(self, tasks: list[Hashable], bar: tqdm | None) -> list[Hashable]:
        deadline = time.monotonic() + 0.5
        while True:
            self._dispatch()
            busy = [w for w in self.workers if w.task is not None]
            handles = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            finished = any(task in self.results for task in tasks)  # then only read what is there
            ready = connection.wait(handles, 0 if finished else deadline - time.monotonic())
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    self._hear(worker, bar)
            self._dispatch()  # the workers that just finished take the next tasks at once
            done: list[Hashable] = [task for task in tasks if task in self.results]
            if done or time.monotonic() >= deadline:
                return done

    def _hear(self, worker: _Worker, bar: tqdm | None) -> None:
        """Read what the worker sent: progress, its task's result; or find that it died."""
        try:
            while worker.conn.poll():
                kind, *body = worker.conn.recv()
                if kind == "progress" and bar is not None:
                    bar.update(body[0])
                elif kind == "done":
                    self._finished(worker, *body)
        except (EOFError, OSError):
            pass  # it died: below
        if not worker.process.is_alive():
            self._lost(worker)

    def _finished(self, worker: _Worker, task: int, value: Any) -> None:
        self.results[task] = value
        self._release(worker, self.tasks.pop(task))

    def _release(self, worker: _Worker, task: _PoolTask) -> None:
        worker.task = None
        if worker.gpu is not None and self.gpu_free is not None:
            self.gpu_free[worker.gpu] += task.gpus

    def _lost(self, worker: _Worker) -> None:
        """A worker died (killed, out of memory, a crash in native code): its task runs once more
        on a new worker (it rewrites its outputs from scratch), then fails with the reason."""
        self.workers.remove(worker)
        worker.conn.close()
        if worker.task is None:
            return
        index, task = worker.task, self.tasks[worker.task]
        self._release(worker, task)
        task.tries += 1
        if task.tries <= MAX_RETRIES:
            self.queue.insert(0, index)
            return
        del self.tasks[index]
        self.results[index] = RuntimeError(
            f"the worker process running it died (exit code {worker.process.exitcode}), "
            f"{task.tries} time(s)"
        )

    def _dispatch(self) -> None:
        """Start queued tasks on idle workers, oldest first, while a CPU is free: a task waiting
        for a GPU lets those behind it that need none go first."""
        for index in list(self.queue):
            if sum(w.task is not None for w in self.workers) >= self.cpus:
                return
            task = self.tasks[index]
            worker = self._worker_for(task.gpus)
            if worker is None:
                continue
            self.queue.remove(index)
            worker.task = index
            try:
                payload = pickle.dumps((task.fn, task.job))
            except Exception as exc:  # nothing was sent: the task's own error, no worker lost
                self.results[index] = RuntimeError(f"the task could not be pickled: {_said(exc)}")
                self._release(worker, self.tasks.pop(index))
                continue
            try:
                worker.conn.send((index, payload, _drivers_environment()))
            except OSError:  # the worker died idle (the OOM killer): the task never ran there
                self._release(worker, task)
                self._lost(worker)  # idle now: no try counted
                self.queue.insert(0, index)

    def _worker_for(self, gpus: float) -> _Worker | None:
        """An idle worker that sees no GPU, or one that sees a GPU with `gpus` of it unreserved
        (reserved here); one is started where none is idle."""
        if not gpus:
            mine = [w for w in self.workers if w.gpu is None]
            idle = next((w for w in mine if w.task is None), None)
            return idle or (self._spawn(None) if len(mine) < self.cpus else None)
        free = self._gpus()
        gpu = next((g for g, share in free.items() if share >= gpus - 1e-9), None)
        if gpu is None:
            return None
        free[gpu] -= gpus
        idle = next((w for w in self.workers if w.gpu == gpu and w.task is None), None)
        return idle or self._spawn(gpu)

    def _gpus(self) -> dict[str, float]:
        if self.gpu_free is None:
            self.gpu_free = {gpu: 1.0 for gpu in _machine_gpus()}
        return self.gpu_free

    def _spawn(self, gpu: str | None) -> _Worker:
        ours, theirs = self.context.Pipe()
        process = self.context.Process(
            target=_serve,
            args=(theirs, self.lifeline, self.cores, os.nice(0), gpu),
            name="animegamer-worker",
            daemon=True,  # ended by multiprocessing when this process exits
        )
        with _this_checkout_first(), _main_left_out():
            process.start()  # the first one starts the fork server, if nothing has yet
        theirs.close()
        worker = _Worker(process, ours, gpu)
        self.workers.append(worker)
        return worker


def _serve(conn, lifeline, cores: list[int], nice: int, gpu: str | None) -> None:
    """A worker process: run the tasks the driver sends until it sends None or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's, which ends the run
    _die_with_driver(lifeline)
    if cores:
        os.sched_setaffinity(0, cores)
    if nice > os.nice(0):
        os.nice(nice - os.nice(0))
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu or ""  # before anything initializes CUDA
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        task, payload, environment = message
        _adopt_environment(environment, gpu)
        with _reports_in_batches(lambda n: conn.send(("progress", n))) as report:
            value = _run_task(payload, report)
        try:
            conn.send(("done", task, value))  # pickled whole before anything is written
        except OSError:
            raise  # the driver has gone
        except Exception as exc:  # the task's own error: this worker lives on
            failure = RuntimeError(f"the task's result could not be pickled: {_said(exc)}")
            conn.send(("done", task, failure))


def _run_task(payload: bytes, report: JobReport) -> Any:
    """The task's value, or the exception it raised; a function this worker cannot import (one
    defined in a notebook cell or the driver's main script) fails as that task's error."""
    try:
        fn, job = pickle.loads(payload)
    except Exception as exc:
        return RuntimeError(f"the worker could not unpickle the task: {_said(exc)}")
    try:
        return _placed(fn(job, report), "local")
    except Exception as exc:  # the job's failure is its result
        return _sendable(exc)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _drivers_environment() -> dict[str, str]:
    """This process's environment as it is now, sent with each task: the fork server, and so
    every worker, kept the one of when it started, and a variable set since (AWS_*, HF_HOME,
    ANIMEGAMER_SCRATCH) must reach the task. This checkout first on PYTHONPATH, as for the workers
    themselves, for processes the task starts."""
    return {**os.environ, "PYTHONPATH": _checkout_first(os.environ.get("PYTHONPATH"))}


def _adopt_environment(environment: dict[str, str], gpu: str | None) -> None:
    """Take the driver's environment (a few dozen variables: microseconds), but keep this
    worker's GPU."""
    for name in set(os.environ) - set(environment):
        del os.environ[name]
    os.environ.update({k: v for k, v in environment.items() if os.environ.get(k) != v})
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu or ""


def _die_with_driver(lifeline) -> None:
    """End this worker as soon as the driver has gone (the lifeline's only writer is the driver,
    so the kernel closes it when the driver ends, even under kill -9): a worker left running would
    go on writing a segment that the rerun is cutting again. (The fork server is no judge: every
    worker holds its "alive" pipe, so it outlives the driver as long as they do.)"""

    def watch() -> None:
        connection.wait([lifeline])  # readable only at end of file: nothing is ever written
        os._exit(1)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


def _sendable(exc: Exception) -> Exception:
    """The job's exception, or where the driver could not unpickle it, its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


@contextmanager
def _main_left_out() -> Iterator[None]:
    """The driver's main module hidden while workers start. multiprocessing has each new worker
    run the driver's main script again (by its path, or its module name under `-m`), so that
    functions defined there can be sent: a script without `if __name__ == "__main__":` would start
    a pool inside every worker, which dies, and a main read from stdin has no path to run. The
    tasks are the pipeline's own functions, so no worker needs it (and none re-imports it); one
    from the main script fails as its own task's error."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, Any] = {
        name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__
    }
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _fork_server():
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _machine_gpus() -> list[str]:
    """The GPUs this machine gives out: those CUDA_VISIBLE_DEVICES names where it is set (Ray's
    rule too), else every one torch sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip()]
    try:
        import torch
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())]


def usable_cpus() -> int:
    """How many CPUs this process may keep busy: the cores it may run on (its affinity), fewer
    where a cgroup CPU quota (a container's --cpus, a Kubernetes CPU limit) allows less time. A
    quota of 1.5 CPUs counts as 2: two workers use the whole quota (each throttled to three
    quarters of a core), where one would leave half a CPU idle (Ray truncates to 1: ray/_private/
    utils.py, get_num_cpus)."""
    cores = len(_allowed_cores()) or os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return min(cores, max(1, math.ceil(quota))) if quota else cores


CGROUP_ROOT = Path("/sys/fs/cgroup")
OWN_CGROUP = Path("/proc/self/cgroup")


def cgroup_cpu_quota() -> float | None:
    """CPUs of time per second this process's cgroup may use, or None (no quota). cgroup v2:
    `cpu.max` ("QUOTA PERIOD" or "max PERIOD") of this process's cgroup and every ancestor, the
    smallest; v1: the `cpu` controller's cfs_quota_us over cfs_period_us (-1: none)."""
    quotas = [q for q in (*_v2_quotas(), _v1_quota()) if q is not None]
    return min(quotas, default=None)


def _v2_quotas() -> list[float | None]:
    try:
        lines = OWN_CGROUP.read_text().splitlines()
    except OSError:
        lines = []
    own = next((line[3:] for line in lines if line.startswith("0::")), "/")
    folder = CGROUP_ROOT / own.lstrip("/")
    quotas = []
    for level in (folder, *folder.parents):
        if level == CGROUP_ROOT.parent:
            break
        quotas.append(_ratio(level / "cpu.max", None))
    return quotas


def _v1_quota() -> float | None:
    folder = CGROUP_ROOT / "cpu"
    return _ratio(folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us")


def _ratio(quota_file: Path, period_file: Path | None) -> float | None:
    """A quota over its period, from one file ("QUOTA PERIOD") or two; None: no file, no quota."""
    try:
        words = quota_file.read_text().split()
        if period_file is not None:
            words += period_file.read_text().split()
        quota, period = int(words[0]), int(words[1])
    except (OSError, ValueError, IndexError):  # "max", -1 parses but is no quota: below
        return None
    return quota / period if quota > 0 and period > 0 else None


def _allowed_cores() -> list[int]:
    """The cores this process may run on (Linux; elsewhere unknown: [])."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@contextmanager
def _reports_in_batches(send: Callable[[int], None], every: int = 256) -> Iterator[JobReport]:
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
    niceness = os.environ.get("RAY_worker_niceness", str(os.nice(0)))
    with _this_checkout_first({"RAY_worker_niceness": niceness}), cpu_cap(num_cpus):
        yield


@contextmanager
def _this_checkout_first(extra: dict[str, str] | None = None) -> Iterator[None]:
    """This project's root first on PYTHONPATH (and the `extra` variables set) while processes
    that import the pipeline are started, so they import the same code as this process, whatever
    else is installed; restored afterwards."""
    settings = {"PYTHONPATH": _checkout_first(os.environ.get("PYTHONPATH")), **(extra or {})}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def _checkout_first(pythonpath: str | None) -> str:
    """`pythonpath` with this project's root first (once)."""
    paths = [_project_root(), *(pythonpath.split(os.pathsep) if pythonpath else [])]
    return os.pathsep.join(dict.fromkeys(paths))


@contextmanager
def cpu_cap(num_cpus: int | None) -> Iterator[None]:
    """Hold the calling thread, and every thread and process it starts meanwhile, to the first
    `num_cpus` of the cores it may use (None or at least that many: no change). Linux only;
    elsewhere no change."""
    allowed = _allowed_cores()
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
    from multiprocessing import forkserver

    _fork_server()
    with _this_checkout_first():
        forkserver.ensure_running()


def make_executor(name: str, num_cpus: int | None = None, progress: bool = True) -> Executor:
    name = resolve_executor(name)
    if name == "local":
        return LocalExecutor(progress, num_cpus)
    if name == "processes":
        return ProcessExecutor(num_cpus, progress)
    if name == "ray":
        return RayExecutor(num_cpus, progress)
    raise ValueError(f"unknown executor {name!r} (auto, processes, ray or local)")


def _run_with_counter(fn, job, counter):
    import ray

    with _reports_in_batches(counter.add.remote if counter is not None else _ignore) as report:
        return _placed(fn(job, report), ray.get_runtime_context().get_node_id())


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
    return str(Path(__file__).resolve().parent.parent)
