"""Ray clusters for real: the embedded Ray beside a dead cluster's leftovers, and a two-node
cluster started on this machine with `ray start` (one CPU per node) running a folder of films.

Every Ray here lives under its own RAY_TMPDIR, so neither the address file a test leaves nor the
sessions it starts can reach another Ray on the machine (or another test run's).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import BIKES, ROOT, local_config, make_video

RUN_TIMEOUT = 600

# Ray clusters of several processes each: alone, after the other tests.
pytestmark = pytest.mark.serial


@pytest.fixture
def ray_tmpdir():
    """A short private Ray temp folder (Ray's socket paths must stay under 107 characters)."""
    folder = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def films_folder(tmp_path_factory) -> Path:
    """bikes.mp4 (three 4-second segments) and a 5-second 256x144 film of two scenes: two films
    to share out over the nodes, the second one small (bigbuckbunny_5s, at 1280x720, cost each
    of the test's two runs about 7 CPU-s in the overlay pass alone)."""
    folder = tmp_path_factory.mktemp("films")
    shutil.copy(BIKES, folder / BIKES.name)
    make_video(folder / "short.mp4", size=(144, 256), cuts=(60,), num_frames=120, seed=5)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Ray's token authentication, with a token of this test run's own: every node and the driver
# of a cluster must hold the same one (see README, "Running on a Ray cluster").
CLUSTER_TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def ray_env(temp_dir: Path, address: str | None = None, cluster: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(temp_dir), PYTHONPATH=str(ROOT))
    if address:
        env["RAY_ADDRESS"] = address
    if cluster:
        env.update(CLUSTER_TOKEN)
    return env


def run_dataset(films: Path, out: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    """`animegamer dataset` in its own process, as a user runs it."""
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(films), "--out", str(out)]
    command += ["--quiet", "--set", "run.segment_seconds=4", *extra]
    return subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )


@pytest.mark.slow
def test_embedded_ray_starts_beside_a_dead_clusters_address_file(tmp_path, ray_tmpdir):
    """A `ray start` cluster killed without `ray stop` leaves ray_current_cluster behind, naming
    a GCS address nobody answers on; without RAY_ADDRESS, `--executor ray` must start its own
    Ray."""
    (ray_tmpdir / "ray").mkdir()
    dead = f"127.0.0.1:{free_port()}"
    (ray_tmpdir / "ray" / "ray_current_cluster").write_text(dead)
    done = run_dataset(BIKES, tmp_path / "out", ray_env(ray_tmpdir), "--executor", "ray")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bikes: done" in done.stdout
    [summary] = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/summary.json")]
    assert summary["complete"] and summary["clips_written"] > 0
    assert all(run["ran_on"]["node"] != "local" for run in summary["segment_runs"])


class RayNode:
    """One `ray start --block` process and everything it started, stopped by process id."""

    def __init__(self, args: list[str], temp_dir: Path, log: Path):
        temp_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block"]
        command += ["--num-cpus=1", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
        command += [f"--dashboard-agent-listen-port={free_port()}", *args]
        self.log = log
        with log.open("w") as handle:
            self.process = subprocess.Popen(
                command,
                env=ray_env(temp_dir, cluster=True),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )

    def wait_started(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in self.log.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        try:
            tree = [psutil.Process(self.process.pid)]
            tree += tree[0].children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for process in tree:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(tree, timeout=30)
        for process in alive:
            try:  # it may end on its own between the wait and the kill (seen in CI under load)
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)


@pytest.mark.slow
def test_two_node_cluster_runs_a_folder_like_one_machine(tmp_path, ray_tmpdir, films_folder):
    """RAY_ADDRESS runs the folder on the cluster (the default executor, 'auto', picks Ray there),
    with the same bytes as the default on one machine (the process pool), both nodes used."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    head_args = ["--head", f"--port={port}", "--include-dashboard=false"]
    head_args.append(f"--ray-client-server-port={free_port()}")
    head = RayNode(head_args, ray_tmpdir / "head", tmp_path / "head.log")
    nodes = [head]
    try:
        head.wait_started()
        worker = RayNode([f"--address={address}"], ray_tmpdir / "worker", tmp_path / "worker.log")
        nodes.append(worker)
        worker.wait_started()
        env = ray_env(ray_tmpdir, address, cluster=True)
        on_cluster = run_dataset(films_folder, tmp_path / "cluster", env)
    finally:
        for node in reversed(nodes):
            node.stop()
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    # The head's address file is still there: the run on one machine must not try to join it.
    embedded = run_dataset(films_folder, tmp_path / "embedded", ray_env(ray_tmpdir / "head"))
    assert embedded.returncode == 0, embedded.stdout + embedded.stderr

    cluster_films = sorted(p.name for p in (tmp_path / "cluster").iterdir() if p.is_dir())
    assert cluster_films == sorted(p.name for p in (tmp_path / "embedded").iterdir() if p.is_dir())
    assert len(cluster_films) == 2
    nodes_used = set()
    for film in cluster_films:
        for name in ["manifest.parquet", "drops.parquet", "shards/clips-00000.parquet"]:
            cluster_bytes = (tmp_path / "cluster" / film / name).read_bytes()
            assert cluster_bytes == (tmp_path / "embedded" / film / name).read_bytes(), name
        summary = json.loads((tmp_path / "cluster" / film / "summary.json").read_text())
        assert summary["complete"]
        assert len(summary["segment_runs"]) == summary["segments"]
        nodes_used |= {run["ran_on"]["node"] for run in summary["segment_runs"]}
    assert len(nodes_used) == 2, f"all segments ran on {nodes_used}"


@pytest.mark.slow
def test_a_segment_running_memflow_on_cuda_asks_ray_for_a_gpu(tmp_path):
    """Ray places each GPU segment on a GPU of its own; a cluster without one refuses the film
    at once with one line, where Ray would otherwise wait for a GPU forever."""
    import ray

    from core.resources import Resources
    from pipeline.data.ip import load_ip
    from pipeline.executors.ray import RayExecutor
    from pipeline.running.runner import run_films
    from pipeline.running.scheduler import segment_resources

    gpu = local_config(
        motion__backend="memflow",
        motion__memflow_device="cuda",
        motion__memflow_random_weights="true",
    )
    assert segment_resources(gpu).resources.gpus == 1.0
    assert segment_resources(gpu).gpu_stages == ("motion",)
    assert segment_resources(local_config()).resources.gpus == 0.0
    try:
        executor = RayExecutor(num_cpus=1, progress=False)
        if executor.shortfall(Resources(gpus=1.0)) is None:
            pytest.skip("this machine has a GPU: the refusal needs a cluster without one")
        [result] = run_films([BIKES], tmp_path, gpu, load_ip(None), executor)
    finally:
        ray.shutdown()
    assert not result.ok
    assert result.message == (
        f"{BIKES}: a segment task needs 1 GPU(s); the Ray cluster has 0 "
        "(stages that declare a GPU: motion)"
    )
