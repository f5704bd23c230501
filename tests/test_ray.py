"""The Ray executor end to end, once: same shards as the in-process executor; the embedded Ray's
worker pool and the CPU cap of run.num_cpus, in both executors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import BIKES, ROOT, local_config
from pool_jobs import where_it_runs

from core.shards import read_clips
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film


@pytest.mark.slow
@pytest.mark.serial  # Ray's processes on every core
def test_ray_executor_matches_local(tmp_path, bikes_dataset):
    import ray

    config = local_config(run__executor="ray", run__num_cpus=2, run__segment_seconds=6)
    try:
        result = run_film(BIKES, tmp_path, config, load_ip(None))
    finally:
        ray.shutdown()
    assert result.ok, result.message
    assert result.summary.segments == 2
    ray_clips = list(read_clips(result.film_dir))
    local_clips = list(read_clips(bikes_dataset))
    # segment boundaries are forced scene boundaries, so compare only clips far from them
    boundary = result.summary.segment_boundaries[0]
    far = [c for c in local_clips if c.end_frame <= boundary or c.start_frame >= boundary + 50]
    by_id = {c.clip_id: c for c in ray_clips}
    assert far, "bikes.mp4 should have clips away from the boundary"
    for clip in far:
        assert clip.clip_id in by_id
        assert by_id[clip.clip_id].video == clip.video


def _ray_workers() -> dict[int, tuple[tuple[int, ...], int]]:
    """The cores each Python worker process may use and its niceness, by process id, of the
    embedded Ray this process started (its agents left out)."""
    [raylet] = [p for p in psutil.Process().children() if p.name() == "raylet"]
    workers = {}
    for process in raylet.children():
        try:
            if "Agent" not in " ".join(process.cmdline()):
                workers[process.pid] = (tuple(process.cpu_affinity()), process.nice())
        except psutil.NoSuchProcess:  # a worker that just ended is no longer one
            pass
    return workers


@pytest.mark.slow
@pytest.mark.serial  # Ray's processes on every core
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to hold one")
def test_embedded_ray_is_one_pool_on_num_cpus_cores_running_this_checkout(monkeypatch):
    """No runtime_env in the embedded Ray (it would start a second pool beside the prestarted
    one), no progress actor when no bar is shown, and run.num_cpus=1 holds every worker, and
    every thread a task starts, to one core, while the driver keeps its cores; the workers run at
    the driver's niceness (not Ray's 15), as the local executor's work does."""
    import ray

    from pipeline.executors.ray import RayExecutor

    driver_cores = os.sched_getaffinity(0)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))  # where Ray's workers find the job
    executor = RayExecutor(num_cpus=1, progress=False)
    try:
        results = executor.map(where_it_runs, list(range(4)), 4, "probe")
        workers = _ray_workers()
    finally:
        ray.shutdown()
    assert len({r["pid"] for r in results}) == 1
    assert len(workers) == 1, workers
    assert all(r["cores"] == r["thread_cores"] and len(r["cores"]) == 1 for r in results)
    assert all(len(cores) == 1 and nice == os.nice(0) for cores, nice in workers.values())
    assert {Path(r["code"]).parent.parent for r in results} == {ROOT}
    assert os.sched_getaffinity(0) == driver_cores


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to hold one")
def test_the_local_executor_holds_a_job_to_num_cpus_cores():
    from pipeline.executors.local import LocalExecutor

    before = os.sched_getaffinity(0)
    task = LocalExecutor(progress=False, num_cpus=1).submit(where_it_runs, None)
    seen = task.value
    assert len(seen["cores"]) == 1 and seen["thread_cores"] == seen["cores"]
    assert seen["pid"] == os.getpid() and os.sched_getaffinity(0) == before


NICED_DRIVER = """
import os
from pool_jobs import where_it_runs
from pipeline.executors.ray import RayExecutor

[result] = RayExecutor(num_cpus=1, progress=False).map(where_it_runs, [0], 1, "probe")
print(os.nice(0), result["nice"])
"""


@pytest.mark.slow
@pytest.mark.serial  # Ray's processes on every core
def test_embedded_ray_workers_keep_a_niced_drivers_niceness():
    """A driver started under `nice` (a batch job, a shared machine) has its Ray workers at its own
    niceness, not at twice it: RAY_worker_niceness is an increment over the driver's."""
    run = subprocess.run(
        ["nice", "-n", "3", sys.executable, "-c", NICED_DRIVER],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    driver, task = (int(word) for word in run.stdout.split()[-2:])
    assert task == driver == min(19, os.nice(0) + 3)
