"""A worker process of the process pool (pipeline/executors/processes.py): it runs the tasks the
driver sends through its pipe, sends progress and results back, and dies with the driver."""

from __future__ import annotations

import os
import pickle
import signal
import threading
from multiprocessing import connection
from typing import Any

from pipeline.executors.base import JobReport, said, sendable
from pipeline.executors.jobs import placed, reports_in_batches


def serve(conn, lifeline, cores: list[int], nice: int, gpu: str | None) -> None:
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
        with reports_in_batches(lambda n: conn.send(("progress", n))) as report:
            value = _run_task(payload, report)
        try:
            conn.send(("done", task, value))  # pickled whole before anything is written
        except OSError:
            raise  # the driver has gone
        except Exception as exc:  # the task's own error: this worker lives on
            failure = RuntimeError(f"the task's result could not be pickled: {said(exc)}")
            conn.send(("done", task, failure))


def _run_task(payload: bytes, report: JobReport) -> Any:
    """The task's value, or the exception it raised; a function this worker cannot import (one
    defined in a notebook cell or the driver's main script) fails as that task's error."""
    try:
        fn, job = pickle.loads(payload)
    except Exception as exc:
        return RuntimeError(f"the worker could not unpickle the task: {said(exc)}")
    try:
        return placed(fn(job, report), "local")
    except Exception as exc:  # the job's failure is its result
        return sendable(exc)


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
