"""Jobs that the tests send to the executors' workers. A worker imports the module of each job it
unpickles: this one imports neither pytest nor conftest (with them, 0.13 CPU-s in every process
pool worker and every Ray worker, none of it counted by --cpu-durations), and a driver script
that a test runs in a subprocess imports its jobs from here for the same reason."""

from __future__ import annotations

import os
import signal
import threading
import time


def where_it_runs(_, report) -> dict:
    """A job that reports what a task sees of its worker: its process, the cores it may use (its
    own and those of a thread it starts), which checkout's code it imports, its GPUs and its
    niceness. Any executor runs it: the process pool's workers import it by the driver's
    sys.path, Ray's by PYTHONPATH, which the Ray tests give this folder."""
    import pipeline

    seen = {}
    thread = threading.Thread(target=lambda: seen.update(cores=os.sched_getaffinity(0)))
    thread.start()
    thread.join()
    report(300)
    time.sleep(0.3)  # long enough that one worker cannot take every task before another starts
    return {
        "pid": os.getpid(),
        "cores": sorted(os.sched_getaffinity(0)),
        "thread_cores": sorted(seen["cores"]),
        "code": pipeline.__file__,
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nice": os.nice(0),
        "started": time.monotonic(),
    }


def fails_on_odd(job, report) -> int:
    if job % 2:
        raise ValueError(f"job {job} is odd")
    return job


def dies_on_three(job, report) -> int:
    if job == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in native code, the OOM killer
    return job


def sleeps(job, report) -> None:
    time.sleep(600)


def returns_a_lock(job, report):
    return threading.Lock() if job == 1 else job


class LoadsNowhere:
    """Pickles in the driver, fails to unpickle in the worker."""

    def __reduce__(self):
        return (_refuse_to_load, ())


def _refuse_to_load():
    raise ValueError("not in this process")


def echo(job, report):
    return job


def reads_the_environment(name, report) -> tuple:
    return os.environ.get(name), os.environ.get("PYTHONPATH"), os.environ["CUDA_VISIBLE_DEVICES"]
