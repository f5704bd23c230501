"""`make bench`: the pipeline (no captioning) against a bare decode of the same film, same run.

The film is the bundled Sintel trailer repeated back to back (packets remuxed, not re-encoded)
until it is at least `--minutes` long. Two lengths are measured so that memory can be seen to stay
flat as the film grows. Peak memory is the largest total resident size of this process and all
its children (Ray workers included), sampled every 0.2 s. The shorter film also runs with the
quality stage off and then on again, in the same run, to give the wall time the stage adds.

    python -m bench.run [--minutes 10] [--executor ray]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import av
import psutil

from core.film import FilmSummary

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sintel_trailer.mp4"
OUT = ROOT / "bench" / "out"


def make_long_film(minutes: float, path: Path) -> Path:
    """Repeat the sample's video packets with shifted timestamps (FFmpeg concat, without ffmpeg)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(SAMPLE)) as probe:
        stream = probe.streams.video[0]
        span = int(probe.duration / av.time_base / stream.time_base) + 1
        seconds = float(probe.duration / av.time_base)
    repeats = int(minutes * 60 / seconds) + 1
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w") as out:
        with av.open(str(SAMPLE)) as first:
            target = out.add_stream_from_template(first.streams.video[0])
        for k in range(repeats):
            with av.open(str(SAMPLE)) as source:
                for packet in source.demux(source.streams.video[0]):
                    if packet.dts is None:
                        continue
                    packet.pts += k * span
                    packet.dts += k * span
                    packet.stream = target
                    out.mux(packet)
    tmp.rename(path)
    return path


class PeakMemory:
    """Largest summed RSS of this process tree while the block runs."""

    def __enter__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True), *_ray_processes()]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.2)


def _ray_processes():
    """Ray's raylet and workers are not children of the driver: find them by name."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if "ray::" in cmd or "raylet" in cmd or "gcs_server" in cmd or "default_worker" in cmd:
            found.append(proc)
    return found


def bare_decode(path: Path) -> tuple[float, int]:
    began, frames = time.perf_counter(), 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for _ in container.decode(stream):
            frames += 1
    return time.perf_counter() - began, frames


def run_pipeline(
    path: Path, out: Path, executor: str, overrides: tuple[str, ...] = ()
) -> tuple[float, FilmSummary]:
    from pipeline.config import load_config
    from pipeline.executor import make_executor
    from pipeline.ip import load_ip
    from pipeline.runner import run_film

    config = load_config(None, [f"run.executor={executor}", *overrides])
    runner = make_executor(executor, None, progress=True)
    if executor == "ray":
        runner._ray()  # start Ray before the clock: its start-up is reported on its own
    began = time.perf_counter()
    result = run_film(path, out, config, load_ip(None), runner)
    if result.summary is None:
        raise RuntimeError(f"{path}: {result.message}")
    return time.perf_counter() - began, result.summary


def quality_cost(film: Path, out: Path, executor: str) -> dict:
    """What the quality stage adds to the wall time: the film again without it (black-run
    boundaries kept, so the clips are the same), then with it, both after the measured run so
    that neither pays for cold workers or caches."""
    import shutil

    seconds = {}
    for name, overrides in (("without", ("quality.enabled=false",)), ("with", ())):
        shutil.rmtree(out, ignore_errors=True)
        seconds[name], summary = run_pipeline(film, out, executor, overrides)
    return {
        "pipeline_seconds_without_quality": round(seconds["without"], 1),
        "pipeline_seconds_with_quality_again": round(seconds["with"], 1),
        "quality_added_wall_fraction": round(seconds["with"] / seconds["without"] - 1, 3),
        "clips_without_quality": summary.clips_written,
    }


def motion_figures() -> dict:
    """The motion stage on its own: DIS speed, CPU per clip, MemFlow where a GPU exists."""
    from collections import Counter

    import torch

    from bench import motion_bench

    figures = {
        "dis_pairs_per_cpu_second": round(motion_bench.dis_pairs_per_second(), 1),
        "motion_cpu_seconds_per_clip": round(motion_bench.motion_seconds_per_clip(), 4),
        "sintel_window_levels": dict(
            sorted(Counter(row["level"] for row in motion_bench.real_clip_levels()).items())
        ),
    }
    if torch.cuda.is_available():
        figures["memflow_pairs_per_second_480x720"] = round(
            motion_bench.memflow_pairs_per_second("cuda"), 2
        )
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--executor", default="ray", choices=("ray", "local"))
    parser.add_argument(
        "--only-corpus", action="store_true", help="only the corpus figure (a folder of films)"
    )
    args = parser.parse_args(argv)
    if args.only_corpus:
        return _print_corpus({"runs": []})
    ray_began = time.perf_counter()
    if args.executor == "ray":
        import ray

        ray.init(include_dashboard=False, logging_level="WARNING")
    ray_seconds = time.perf_counter() - ray_began
    report = {"executor": args.executor, "ray_start_seconds": round(ray_seconds, 1), "runs": []}
    for minutes in (args.minutes / 2, args.minutes):
        film = make_long_film(minutes, OUT / f"sintel_x{minutes:g}min.mp4")
        decode_seconds, frames = bare_decode(film)
        out = OUT / f"dataset-{minutes:g}min"
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        with PeakMemory() as memory:
            pipeline_seconds, summary = run_pipeline(film, out, args.executor)
        stages = summary.stage_seconds or {}
        busy = sum(stages.values())
        run = {
            "film_minutes": round((summary.film.duration or 0) / 60, 2),
            "frames": frames,
            "bare_decode_seconds": round(decode_seconds, 1),
            "pipeline_seconds": round(pipeline_seconds, 1),
            "ratio_pipeline_to_decode": round(pipeline_seconds / decode_seconds, 2),
            "peak_memory_gib": round(memory.peak / 2**30, 2),
            "clips": summary.clips_written,
            "stage_share": {k: round(v / busy, 3) for k, v in sorted(stages.items())},
            "motion_share_of_worker_time": round(stages.get("motion", 0) / busy, 3),
            # the quality stage and the black-run boundaries (issue 13; budget: 10 %)
            "quality_share_of_worker_time": round(
                (stages.get("quality", 0) + stages.get("black", 0)) / busy, 3
            ),
        }
        if minutes == args.minutes / 2:
            run |= quality_cost(film, OUT / f"dataset-{minutes:g}min-quality", args.executor)
        report["runs"].append(run)
        print(json.dumps(run, indent=2), flush=True)
    report["motion"] = motion_figures()
    print(json.dumps(report["motion"], indent=2), flush=True)
    if args.executor == "ray":
        import ray

        ray.shutdown()  # the corpus figure starts Ray of its own sizes
    _print_corpus(report)
    first, second = report["runs"]
    print(
        f"\nbare decode {second['bare_decode_seconds']} s, pipeline {second['pipeline_seconds']} s "
        f"(x{second['ratio_pipeline_to_decode']}) on {second['film_minutes']} min; peak memory "
        f"{first['peak_memory_gib']} GiB at {first['film_minutes']} min vs "
        f"{second['peak_memory_gib']} GiB at {second['film_minutes']} min; "
        f"Ray start {report['ray_start_seconds']} s (not in the pipeline time)"
    )
    return 0


def _print_corpus(report: dict) -> int:
    from bench.corpus import corpus_figure

    report["corpus"] = corpus_figure(OUT)
    print(json.dumps(report["corpus"], indent=2), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench.json").write_text(json.dumps(report, indent=2))
    corpus = report["corpus"]
    print(
        f"corpus: {corpus['films']} short films in {corpus['seconds_one_cpu']} s on one CPU, "
        f"{corpus['seconds_all_cores']} s on {corpus['cores']} cores: "
        f"x{corpus['speedup']} (outputs identical: {corpus['outputs_identical']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
