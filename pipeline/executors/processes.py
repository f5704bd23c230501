"""Worker processes on this machine (`ProcessExecutor`), the default without a cluster: the pool
that the driver feeds through pipes (`_WorkerPool`), forked from a fork server that imported the
pipeline once. The workers' own side is pipeline/executors/process_worker.py."""

from __future__ import annotations

import logging
import os
import pickle
import sys
import time
import weakref
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import connection
from typing import Any

from tqdm import tqdm

from core.resources import Resources
from pipeline.executors.base import ONE_CPU, JobFn, said
from pipeline.executors.checkout import checkout_first, this_checkout_first
from pipeline.executors.cpus import allowed_cores, usable_cpus
from pipeline.executors.jobs import BarInThisProcess
from pipeline.executors.process_worker import serve

log = logging.getLogger(__name__)


class ProcessExecutor(BarInThisProcess):
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
# what reading and writing Parquet imports on first use; and the workers' own side, whose `serve`
# each worker runs.
PRELOAD = [
    "pipeline.running.runner",
    "pipeline.executors.process_worker",
    "pyarrow.dataset",
    "pyarrow.pandas_compat",
]
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
        allowed = allowed_cores()
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
                self.results[index] = RuntimeError(f"the task could not be pickled: {said(exc)}")
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
            target=serve,
            args=(theirs, self.lifeline, self.cores, os.nice(0), gpu),
            name="animegamer-worker",
            daemon=True,  # ended by multiprocessing when this process exits
        )
        with this_checkout_first(), _main_left_out():
            process.start()  # the first one starts the fork server, if nothing has yet
        theirs.close()
        worker = _Worker(process, ours, gpu)
        self.workers.append(worker)
        return worker


def _drivers_environment() -> dict[str, str]:
    """This process's environment as it is now, sent with each task: the fork server, and so
    every worker, kept the one of when it started, and a variable set since (AWS_*, HF_HOME,
    ANIMEGAMER_SCRATCH) must reach the task. This checkout first on PYTHONPATH, as for the workers
    themselves, for processes the task starts."""
    return {**os.environ, "PYTHONPATH": checkout_first(os.environ.get("PYTHONPATH"))}


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


def start_fork_server() -> None:
    """Start the fork server now, importing `PRELOAD` in the background (see `prestart`)."""
    from multiprocessing import forkserver

    _fork_server()
    with this_checkout_first():
        forkserver.ensure_running()
