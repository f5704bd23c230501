"""The process-pool executor (the default on one machine): the same clips as the in-process
executor, one pool of run.num_cpus workers on that many cores running this checkout at the
driver's niceness, failures and dead workers kept to their own task, GPUs given out as under Ray,
and no worker left behind a driver killed with -9."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import BIKES, ROOT, assert_same_parquet, local_config
from pool_jobs import (  # the jobs sent to workers: a module a worker imports without pytest
    LoadsNowhere,
    dies_on_three,
    echo,
    fails_on_odd,
    reads_the_environment,
    returns_a_lock,
    where_it_runs,
)

import pipeline.executors.cpus as cpus_module
from core.resources import Resources
from pipeline.data.ip import load_ip
from pipeline.executors import make_executor
from pipeline.executors.cpus import cgroup_cpu_quota, usable_cpus
from pipeline.executors.processes import ProcessExecutor
from pipeline.running.runner import run_film, run_films


def test_auto_is_the_process_pool_without_a_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert make_executor("auto").name == "processes"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert make_executor("auto").name == "ray"  # not started: making it connects nowhere yet
    assert make_executor("ray").name == "ray"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to hold one")
def test_one_worker_on_one_core_at_the_drivers_niceness_running_this_checkout():
    driver_cores = os.sched_getaffinity(0)
    executor = ProcessExecutor(num_cpus=1, progress=False)
    try:
        assert executor.slots() == 1
        results = executor.map(where_it_runs, list(range(3)), 900, "probe")
        workers = psutil.Process().children(recursive=True)
    finally:
        executor.close()
    assert len({r["pid"] for r in results}) == 1
    assert all(r["cores"] == r["thread_cores"] and len(r["cores"]) == 1 for r in results)
    assert {Path(r["code"]).parent.parent for r in results} == {ROOT}
    assert {r["nice"] for r in results} == {os.nice(0)}
    assert {r["gpus"] for r in results} == {""}  # a task that reserved no GPU sees none
    assert results[0]["pid"] in {p.pid for p in workers}
    assert os.sched_getaffinity(0) == driver_cores


def test_the_progress_bar_counts_what_the_workers_report():
    executor = ProcessExecutor(num_cpus=2, progress=True)
    try:
        with executor.progress_bar("probe") as bar:
            tasks = [executor.submit(where_it_runs, k) for k in range(3)]
            _wait_for_all(executor, tasks)
            assert bar.n == 900
    finally:
        executor.close()


def _wait_for_all(executor: ProcessExecutor, tasks: list) -> None:
    """As `map` waits: for the tasks not finished yet (`wait` is back at once while one of those
    it is given has finished, so waiting on all of them again spins a core until the last)."""
    pending = list(tasks)
    while pending:
        finished = set(executor.wait(pending))
        pending = [t for t in pending if t not in finished]


def test_a_failing_job_is_its_result_and_the_others_run():
    executor = ProcessExecutor(num_cpus=2, progress=False)
    try:
        results = executor.map(fails_on_odd, list(range(5)), 5, "jobs")
    finally:
        executor.close()
    assert [r for r in results if not isinstance(r, Exception)] == [0, 2, 4]
    assert [str(r) for r in results if isinstance(r, Exception)] == ["job 1 is odd", "job 3 is odd"]


def test_a_worker_that_dies_fails_its_task_after_one_retry_and_the_others_run():
    executor = ProcessExecutor(num_cpus=2, progress=False)
    try:
        results = executor.map(dies_on_three, list(range(6)), 6, "jobs")
        again = executor.map(fails_on_odd, [0, 2], 2, "jobs")  # the pool is whole again
    finally:
        executor.close()
    assert results[:3] == [0, 1, 2] and results[4:] == [4, 5]
    assert isinstance(results[3], RuntimeError)
    assert "died (exit code -9), 2 time(s)" in str(results[3])
    assert again == [0, 2]


def test_gpus_are_given_out_as_under_ray(monkeypatch):
    """A task that reserves a GPU sees that one only, two never share it, and one that reserves
    none sees none; a machine without one refuses the task at once, as Ray's cluster check does."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the GPUs this machine gives out
    executor = ProcessExecutor(num_cpus=2, progress=False)
    try:
        assert executor.shortfall(Resources(gpus=1.0)) is None
        gpu = [executor.submit(where_it_runs, k, Resources(gpus=1.0)) for k in range(4)]
        cpu = [executor.submit(where_it_runs, k) for k in range(2)]
        _wait_for_all(executor, gpu + cpu)
        on_gpu = [executor.result(t) for t in gpu]
        on_cpu = [executor.result(t) for t in cpu]
    finally:
        executor.close()
    assert {r["gpus"] for r in on_gpu} == {"3", "5"}
    assert {r["gpus"] for r in on_cpu} == {""}
    for gpu_id in ("3", "5"):  # one task at a time on each GPU
        starts = sorted(r["started"] for r in on_gpu if r["gpus"] == gpu_id)
        assert all(b - a >= 0.3 for a, b in zip(starts, starts[1:]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    none = ProcessExecutor(num_cpus=1, progress=False)
    try:
        assert none.shortfall(Resources(gpus=1.0)) == "needs 1 GPU(s); this machine has 0"
        assert none.shortfall(Resources()) is None
    finally:
        none.close()


def test_workers_that_died_idle_cost_the_next_task_no_try():
    """The OOM killer may take idle workers: a task sent to one never ran, so it counts no try
    (two such in a row would otherwise fail a task that never ran)."""
    executor = ProcessExecutor(num_cpus=2, progress=False)
    try:
        executor.start()
        assert executor._pool is not None
        for worker in executor._pool.workers:
            worker.process.kill()
            worker.process.join()
        assert executor.map(fails_on_odd, [0], 1, "jobs") == [0]  # sent to both dead ones
    finally:
        executor.close()


@pytest.mark.slow
def test_the_pool_cuts_the_same_bytes_as_the_local_executor(tmp_path, bikes_dataset):
    config = local_config(run__executor="processes")
    result = run_film(BIKES, tmp_path, config, load_ip(None))
    assert result.ok, result.message
    assert result.summary.segment_runs[0]["ran_on"]["node"] == "local"
    assert_same_parquet(Path(result.film_dir), Path(bikes_dataset))


@pytest.mark.slow
def test_the_pool_cuts_a_film_of_several_segments_as_the_local_executor(tmp_path):
    """Several segment tasks at once, finished in any order, then finalize over their results."""
    ip = load_ip(None)
    local = run_film(BIKES, tmp_path / "local", local_config(run__segment_seconds="2"), ip)
    config = local_config(run__executor="processes", run__num_cpus="2", run__segment_seconds="2")
    pool = run_film(BIKES, tmp_path / "pool", config, ip)
    assert local.ok and pool.ok, (local.message, pool.message)
    assert pool.summary.segments == local.summary.segments == 5
    assert_same_parquet(Path(pool.film_dir), Path(local.film_dir))


DRIVER = """
import sys
import time
sys.path.insert(0, "tests")
from pool_jobs import sleeps  # not from this script: a worker could not unpickle it
from pipeline.executors.processes import ProcessExecutor

if __name__ == "__main__":
    executor = ProcessExecutor(num_cpus=2, progress=False)
    tasks = [executor.submit(sleeps, k) for k in range(2)]
    print(" ".join(str(w.process.pid) for w in executor._pool.workers), flush=True)
    executor.wait(tasks)  # both are at work
    time.sleep(600)
"""


def test_no_worker_outlives_a_driver_killed_with_9(tmp_path):
    """A worker left running would go on writing a segment that the rerun is cutting again."""
    (tmp_path / "driver.py").write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    workers = [int(pid) for pid in driver.stdout.readline().split()]
    try:
        assert len(workers) == 2 and all(_running(pid) for pid in workers)
        time.sleep(1.0)  # the tasks have started
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(pid) for pid in workers)
    finally:  # a failure leaves none behind either
        for pid in filter(_running, workers):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_dataset_starts_the_fork_server_before_its_own_imports(monkeypatch):
    """The fork server imports the pipeline while the command does, so the pool is ready sooner;
    it reads the executor as the command does (--executor over --set run.executor=...)."""
    from multiprocessing import forkserver

    from pipeline.cli import prestart_executor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert prestart_executor(["dataset", "film.mp4", "--out", "o"]) == "auto"
    server = forkserver._forkserver._forkserver_pid
    assert server is not None and _running(server)
    assert prestart_executor(["dataset", "f", "--set", "run.executor=ray"]) == "ray"
    both = ["dataset", "f", "--set", "run.executor=ray", "--executor", "processes"]
    assert prestart_executor(both) == "processes"
    for no_tasks in (["dataset", "--dry-run", "f"], ["dataset", "-h"], ["caption", "f"]):
        assert prestart_executor(no_tasks) is None


def test_the_fork_server_start_reads_the_config_file_as_the_command_does(tmp_path, monkeypatch):
    """A --config file that chooses the executor is honoured before the command reads it (the
    fork server is not started beside a run on Ray or in this process); --set and --executor
    still win over it, and a file the command will refuse starts nothing."""
    from pipeline.cli import prestart_executor
    from pipeline.data.config import load_config

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = tmp_path / "local.yaml"
    config.write_text("run:\n  executor: local\n  num_cpus: 1\n")
    argv = ["dataset", "f", "--config", str(config)]
    assert prestart_executor(argv) == load_config(config).run.executor == "local"
    assert prestart_executor([*argv, "--set", "run.executor=ray"]) == "ray"
    assert prestart_executor([*argv, "--executor", "processes"]) == "processes"
    (tmp_path / "other.yaml").write_text("quality:\n  enabled: true\n")
    assert prestart_executor(["dataset", "f", "--config", str(tmp_path / "other.yaml")]) == "auto"
    for refused in ("[1, 2]\n", "run: [local]\n"):
        config.write_text(refused)
        assert prestart_executor(argv) is None
    assert prestart_executor(["dataset", "f", "--config", str(tmp_path / "missing.yaml")]) is None


UNGUARDED_DRIVER = """
import sys
sys.path.insert(0, "tests")
from pool_jobs import fails_on_odd
from pipeline.executors.processes import ProcessExecutor

def defined_here(job, report):
    return job

executor = ProcessExecutor(num_cpus=1, progress=False)
print(executor.map(fails_on_odd, [0, 2], 2, "jobs"))
print(executor.map(defined_here, [0], 1, "jobs"))
"""


@pytest.mark.parametrize("read_from", ["a file", "stdin"])
def test_a_driver_script_without_a_main_guard_gets_working_workers(tmp_path, read_from):
    """multiprocessing has each new worker run the driver's main script again (by its path; from
    stdin there is none), which here would start a pool inside the worker: the main is left out,
    and a function defined in it fails as its own task's error."""
    script = tmp_path / "driver.py"
    script.write_text(UNGUARDED_DRIVER)
    command, stdin = ([str(script)], None) if read_from == "a file" else (["-"], UNGUARDED_DRIVER)
    run = subprocess.run(
        [sys.executable, *command], input=stdin, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    works, defined_in_main = run.stdout.strip().splitlines()
    assert works == "[0, 2]"
    assert "could not unpickle the task" in defined_in_main and "defined_here" in defined_in_main


def test_what_cannot_be_pickled_fails_its_own_task_once_and_the_worker_lives_on():
    executor = ProcessExecutor(num_cpus=1, progress=False)
    try:
        executor.start()
        [before] = [w.process.pid for w in executor._pool.workers]
        results = executor.map(returns_a_lock, [0, 1, 2], 3, "jobs")
        [unloadable] = executor.map(echo, [LoadsNowhere()], 1, "jobs")
        [unsendable] = executor.map(echo, [lambda: None], 1, "jobs")
        [after] = [w.process.pid for w in executor._pool.workers]
    finally:
        executor.close()
    assert results[0] == 0 and results[2] == 2
    assert str(results[1]) == (
        "the task's result could not be pickled: TypeError: cannot pickle '_thread.lock' object"
    )
    assert str(unloadable) == (
        "the worker could not unpickle the task: ValueError: not in this process"
    )
    assert str(unsendable).startswith("the task could not be pickled: ")
    assert "lambda" in str(unsendable)
    assert after == before  # no worker died, so nothing ran twice


def test_a_task_sees_the_drivers_environment_as_it_is_when_submitted(monkeypatch):
    """The fork server and its workers keep the environment of when they started; a variable the
    driver sets later (AWS_*, HF_HOME, a scratch folder) must reach the task all the same."""
    name = "ANIMEGAMER_SET_LATER"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # the driver's, not a CPU worker's
    executor = ProcessExecutor(num_cpus=1, progress=False)
    try:
        executor.start()
        monkeypatch.setenv(name, "after the pool started")
        [(value, pythonpath, gpus)] = executor.map(reads_the_environment, [name], 1, "env")
        monkeypatch.delenv(name)
        [(gone, _, _)] = executor.map(reads_the_environment, [name], 1, "env")
    finally:
        executor.close()
    assert value == "after the pool started" and gone is None
    assert pythonpath.split(os.pathsep)[0] == str(ROOT)  # this checkout first, as the worker's
    assert gpus == ""


def test_a_result_is_given_once_and_not_kept():
    """The pool holds no value after it is read: run.films_in_flight bounds the driver's memory."""
    executor = ProcessExecutor(num_cpus=1, progress=False)
    try:
        assert executor.map(fails_on_odd, [0, 2], 2, "jobs") == [0, 2]
        assert executor._pool is not None and executor._pool.results == {}
    finally:
        executor.close()


def test_a_cgroup_cpu_quota_and_the_allowed_cores_bound_the_workers(tmp_path, monkeypatch, caplog):
    """A container's --cpus (a cgroup quota) counts as a CPU limit, rounded up; run.num_cpus above
    what this process may use is lowered to it, with a warning."""
    cores = len(os.sched_getaffinity(0))
    assert usable_cpus() == cores  # this machine sets no quota (a quota here would show)
    own = tmp_path / "self-cgroup"
    own.write_text("1:cpu:/\n0::/batch/job\n")
    (tmp_path / "batch" / "job").mkdir(parents=True)
    (tmp_path / "batch" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "batch" / "job" / "cpu.max").write_text("max 100000\n")
    monkeypatch.setattr(cpus_module, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(cpus_module, "OWN_CGROUP", own)
    assert cgroup_cpu_quota() == 1.5
    assert usable_cpus() == min(cores, 2)
    (tmp_path / "cpu").mkdir()  # cgroup v1, a smaller quota
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota() == 0.5
    executor = ProcessExecutor(num_cpus=cores + 2, progress=False)
    try:
        with caplog.at_level(logging.WARNING, logger="pipeline.executors.processes"):
            assert executor.slots() == 1
        assert executor._pool is not None and len(executor._pool.workers) == 1
    finally:
        executor.close()
    assert f"run.num_cpus={cores + 2}, but this process may use 1 CPU(s)" in caplog.text


def test_run_films_closes_the_executor_it_made_even_when_it_fails(tmp_path):
    """A caller that keeps the exception (a notebook) keeps the runner's frame alive: its idle
    workers must not stay with it."""
    from multiprocessing import forkserver

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    # a film whose probe, in a worker, fails at once (BIKES had a worker find its film pictures'
    # text first: 1.2 CPU-s that --cpu-durations does not count); the run then fails writing
    not_a_film = tmp_path / "bad.mp4"
    not_a_film.write_text("not a video")
    config = local_config(run__executor="processes", run__num_cpus=1)
    with pytest.raises(OSError) as raised:
        run_films([not_a_film], not_a_folder, config, load_ip(None))
    server = psutil.Process(forkserver._forkserver._forkserver_pid)
    assert raised.value is not None  # still held, with its traceback
    assert not [p for p in server.children() if _running(p.pid)]
