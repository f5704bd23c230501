"""The corpus figure: a folder of short films, once on one CPU and once on every core, same run.

The films are six versions of the Sintel trailer, each started at another of its key frames and
wrapped around (packets remuxed, not re-encoded, so each film has its own content and id), plus
the two test clips: eight films of 5 to 52 s, one segment each. Before films were scheduled
together, such a folder kept one core busy whatever the machine; the speed-up is the figure.
The executor is the default on one machine (the process pool); its start and its workers' first
imports are outside both timings (each run gets a fresh pool of its size, warmed up first).

The executors row (`executors_figure`): a folder of three ~130-s films as a user runs it, with the
local executor, the default (the process pool) and the embedded Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import av
import psutil

from bench.process_tree import ProcessTree

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sintel_trailer.mp4"
TEST_CLIPS = [
    ROOT / "tests" / "media" / "bikes.mp4",
    ROOT / "tests" / "media" / "bigbuckbunny_5s.mp4",
]
PIECES = 6


def make_corpus(folder: Path) -> list[Path]:
    """Eight short films in `folder` (made once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    for clip in TEST_CLIPS:
        if not (folder / clip.name).exists():
            shutil.copy(clip, folder / clip.name)
    if not all((folder / f"sintel_part{k}.mp4").exists() for k in range(PIECES)):
        _split_sample(folder)
    return sorted(folder.glob("*.mp4"))


def _key_frames() -> tuple[list[int], int]:
    """The sample's key frame times and the time its last frame ends (stream time base)."""
    with av.open(str(SAMPLE)) as probe:
        stream = probe.streams.video[0]
        pts = [(p.pts, p.is_keyframe) for p in probe.demux(stream) if p.pts is not None]
        keys = [t for t, key in pts if key]
        times = sorted(t for t, _ in pts)
        return keys, times[-1] + (times[1] - times[0])  # the end of the last frame


def _split_sample(folder: Path) -> None:
    keys, span = _key_frames()
    for k in range(PIECES):
        _remux_rotated(folder / f"sintel_part{k}.mp4", keys[round(k * len(keys) / PIECES)], span)


def _remux_rotated(path: Path, start: int, span: int, seconds: float = 0.0) -> None:
    """The sample from key frame `start` to its end, then from its beginning up to `start`; again
    and again until the film is `seconds` long (it ends before the first key frame past that)."""
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w") as out:
        with av.open(str(SAMPLE)) as first:
            target = out.add_stream_from_template(first.streams.video[0])
            end = int(seconds / (first.streams.video[0].time_base or 1))
        for offset in range(0, max(end, 1), span):
            for keep, shift in (
                (lambda pts: pts >= start, offset - start),
                (lambda pts: pts < start, offset + span - start),
            ):
                if not _mux_part(out, target, keep, shift, end):
                    tmp.rename(path)
                    return
    tmp.rename(path)


def _mux_part(out, target, keep: Callable[[int], bool], shift: int, end: int) -> bool:
    """The sample's packets that `keep`, shifted by `shift`; False once a key frame at or past
    `end` came (the film is long enough), leaving that one out."""
    with av.open(str(SAMPLE)) as source:
        for packet in source.demux(source.streams.video[0]):
            if packet.pts is None or packet.dts is None or not keep(packet.pts):
                continue
            if end and packet.is_keyframe and packet.pts + shift >= end:
                return False
            packet.pts += shift
            packet.dts += shift
            packet.stream = target
            out.mux(packet)
    return True


LONG_FILMS = 3
LONG_SECONDS = 130.0


def make_long_corpus(folder: Path) -> list[Path]:
    """Three films of about 130 s (made once, then reused): the sample started at three of its
    key frames, wrapped around and repeated, so each has content, and a clip id, of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"sintel_long{k}.mp4" for k in range(LONG_FILMS)]
    if all(p.exists() for p in paths):
        return paths
    keys, span = _key_frames()
    for k, path in enumerate(paths):
        _remux_rotated(path, keys[round(k * len(keys) / LONG_FILMS)], span, LONG_SECONDS)
    return paths


def _warm_up(job, report) -> None:
    """Import what a segment imports, on every worker, before the clock starts."""
    import pipeline.running.runner  # noqa: F401
    import stages.motion  # noqa: F401

    time.sleep(1.0)


def run_corpus(
    films: Sequence[str | Path], out: Path, num_cpus: int | None, overrides: Sequence[str] = ()
) -> tuple[float, float]:
    """Seconds to cut every film with the default executor on `num_cpus` CPUs (None: every core),
    and the mean number of tasks at work (worker seconds of every stage over the wall time).
    `overrides`: settings (KEY=VALUE) for the films."""
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.executors import make_executor
    from pipeline.running.runner import run_films

    shutil.rmtree(out, ignore_errors=True)
    config = load_config(None, ["run.progress=false", *overrides])
    executor = make_executor("auto", num_cpus, progress=False)
    try:
        executor.start()
        warm = [None] * executor.slots()
        executor.map(_warm_up, warm, total=len(warm), desc="warm-up")
        began = time.perf_counter()
        results = run_films(films, out, config, load_ip(None), executor)
        seconds = time.perf_counter() - began
    finally:
        executor.close()
    failed = [r.message for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"corpus bench: films failed: {failed}")
    busy = sum(sum((r.summary.stage_seconds or {}).values()) for r in results if r.summary)
    return seconds, busy / seconds


def corpus_figure(work: Path, overrides: Sequence[str] = ()) -> dict:
    films = make_corpus(work / "corpus_films")
    load_before = os.getloadavg()[0]
    one, busy_one = run_corpus(films, work / "corpus_1cpu", 1, overrides)
    every, busy_every = run_corpus(films, work / "corpus_allcpu", None, overrides)
    same = all(
        (work / "corpus_1cpu" / p.relative_to(work / "corpus_allcpu")).read_bytes()
        == p.read_bytes()
        for p in (work / "corpus_allcpu").rglob("*.parquet")
    )
    return {
        "films": len(films),
        "settings": list(overrides),
        "cores": os.cpu_count(),
        "seconds_one_cpu": round(one, 1),
        "seconds_all_cores": round(every, 1),
        "speedup": round(one / every, 2),
        # tasks at work on average: about 1 and about the core count when the scheduler keeps
        # every CPU fed, however slow a shared machine makes each task
        "tasks_at_work_one_cpu": round(busy_one, 2),
        "tasks_at_work_all_cores": round(busy_every, 2),
        "outputs_identical": same,
        "load_average_before_and_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def _machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: every field but idle and
    iowait), every process's, other users' included."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


PROCESS_NAMES = {  # a part of a Ray process's command line: what the process is
    "gcs_server": "gcs_server",
    "raylet": "raylet",
    "dashboard/agent": "dashboard_agent",
    "runtime_env/agent": "runtime_env_agent",
    "dashboard/dashboard.py": "dashboard_api_server",
    "autoscaler/_private/monitor.py": "autoscaler_monitor",
    "log_monitor": "log_monitor",
}


def _process_name(proc: psutil.Process, before: str) -> str:
    """What a process of the run is: the driver, Ray's GCS, raylet, one of its agents, or a worker
    by the task it runs (Ray sets its workers' titles to `ray::TASK`); the process pool's fork
    server, its workers (the fork server's children) and multiprocessing's resource tracker.
    `before` is its name at the last sample: a Ray worker keeps the name of its first task, and
    an ended process, which has no name left, the one it had."""
    if before.startswith("ray::") and before != "ray::IDLE":
        return before
    return _name_now(proc) or before


def _name_now(proc: psutil.Process) -> str:
    words = proc.cmdline()
    title = words[0] if len(words) == 1 else " ".join(words[:3])
    for part, name in PROCESS_NAMES.items():
        if part in title:
            return name
    if "multiprocessing.forkserver" in " ".join(words):  # its workers are forks of it
        parent = proc.parent()
        server = parent is not None and "multiprocessing.forkserver" in " ".join(parent.cmdline())
        return "pool_worker" if server else "fork_server"
    if "multiprocessing.resource_tracker" in " ".join(words):
        return "resource_tracker"
    if title.startswith("ray::"):
        return title.split()[0]
    return "driver" if "pipeline.cli" in title else title[:40]


def timed_run(films: Path, out: Path, sets: Sequence[str] = ()) -> dict:
    """`animegamer dataset FILMS --out OUT` in its own process, as a user runs it (Ray's start and
    every import included): wall seconds, the CPU seconds of its process tree and of the machine,
    and cores busy on average (the tree's CPU over the wall time)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(films), "--out", str(out)]
    command += ["--quiet", *(a for s in sets for a in ("--set", s))]
    machine, began = _machine_cpu_seconds(), time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with ProcessTree(process.pid, every=0.1, namer=_process_name) as tree:
        process.wait()
        wall = time.perf_counter() - began
    machine = _machine_cpu_seconds() - machine
    stdout, stderr = process.communicate()
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stdout.decode()}{stderr.decode()}")
    cpu = tree.cpu_seconds
    work = _stage_seconds(out)
    return {
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "machine_cpu_seconds": round(machine, 1),
        "cores_busy": round(cpu / wall, 2),
        # the CPU the films' stages took (summary.json), and the rest: what the executor, the
        # driver and the imports cost, which a busy machine inflates far less than the work
        "stage_cpu_seconds": round(work, 1),
        "other_cpu_seconds": round(cpu - work, 1),
        "processes_most": max(tree.sizes, default=0),
        "cpu_by_process": tree.by_name(),
    }


EXECUTORS = {  # the corpus row's runs: each a whole `animegamer dataset` process
    "local": ["run.executor=local"],
    "default": [],  # run.executor=auto: the process pool on one machine
    "ray": ["run.executor=ray"],  # the embedded Ray
}
KEYS = ("wall_seconds", "cpu_seconds", "machine_cpu_seconds", "cores_busy", "other_cpu_seconds")


def executors_figure(work: Path, rounds: int = 2) -> dict:
    """The corpus row: the folder of three ~130-s films with the local executor, the default (the
    process pool) and the embedded Ray, back to back, `rounds` times (so all three see the same
    neighbours), then the default once more with run.num_cpus=1. Each is a whole `animegamer
    dataset` process: every start and import is in its time. CPU is the run's own process tree
    (sampled, so other users of the machine are left out); the machine's /proc/stat figure is
    beside it. Ratios are against the local executor's run of the same round."""
    films = make_long_corpus(work / "corpus_long_films")
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {name: [] for name in EXECUTORS}
    for _ in range(rounds):
        for name, sets in EXECUTORS.items():
            runs[name].append(timed_run(films[0].parent, work / f"corpus_{name}", sets))
    one_cpu = timed_run(films[0].parent, work / "corpus_default_1cpu", ["run.num_cpus=1"])
    outputs = [work / f"corpus_{name}" for name in EXECUTORS] + [work / "corpus_default_1cpu"]
    return {
        "films": len(films),
        "film_seconds": [round(_duration(f), 1) for f in films],
        "rounds": rounds,
        **{
            f"{name}_{key}": [r[key] for r in found] for name, found in runs.items() for key in KEYS
        },
        **{
            f"{key}_ratio_{name}_to_local": _ratios(runs, name, key)
            for name in ("default", "ray")
            for key in KEYS[:3]
        },
        "default_cpu_by_process": runs["default"][-1]["cpu_by_process"],
        "ray_cpu_by_process": runs["ray"][-1]["cpu_by_process"],
        "default_1cpu": {key: one_cpu[key] for key in KEYS},
        "outputs_identical": _same_outputs(outputs),
        "load_average_before_and_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def _ratios(runs: dict[str, list[dict]], name: str, key: str) -> list[float]:
    """`name` over local, round by round."""
    return [round(r[key] / max(loc[key], 1e-9), 2) for loc, r in zip(runs["local"], runs[name])]


def _stage_seconds(out: Path) -> float:
    """CPU seconds of every stage of every film in `out` (their summary.json's stage_seconds)."""
    return sum(
        sum(json.loads(path.read_text()).get("stage_seconds", {}).values())
        for path in out.glob("*/summary.json")
    )


def _duration(film: Path) -> float:
    with av.open(str(film)) as container:
        return float((container.duration or 0) / av.time_base)


def _same_outputs(folders: Sequence[Path]) -> bool:
    """Every Parquet file (shards, manifests, drops) byte for byte the same in every folder."""
    first = sorted(p.relative_to(folders[0]) for p in folders[0].rglob("*.parquet"))
    return bool(first) and all(
        sorted(p.relative_to(other) for p in other.rglob("*.parquet")) == first
        and all((other / name).read_bytes() == (folders[0] / name).read_bytes() for name in first)
        for other in folders[1:]
    )
