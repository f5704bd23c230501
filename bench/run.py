"""`make bench`: the pipeline (no captioning) against a bare decode of the same film, same run.

Films, made here from the bundled sample and kept in bench/out/ (the telecined one at
--telecined-minutes, issue 35: the restoration's cost is its `field_restore` row):
    sintel at half of --minutes and at --minutes: the 854x480 trailer repeated back to back
        (packets remuxed, not re-encoded), so memory can be seen to stay flat as a film grows
        (the shorter one also runs with the quality stage off and then on again, in the same
        run, to give the wall time the stage adds);
    1080p at --hd-minutes: the trailer upscaled to 1920x1080 and encoded once with x264 the way
        films are delivered (veryfast, crf 20, B-frames, CABAC), then repeated the same way;
    a folder of 20 films of 6 s (bench/clip_folder.py), cut as one folder against a bare decode
        of its 20 files.

Each film is decoded bare (FFmpeg's own threads, every core) right before and right after the
pipeline runs on it; the ratio is pipeline time over the mean of the two. Both wall-clock and CPU
seconds are given: CPU seconds count every process of the run (this one and the executor's, which
are its descendants), and on a machine shared with other work they move far less than wall time
does. The executor's workers run at this process's niceness, as the bare decode does. Peak memory
is the largest summed resident size of this process tree, sampled every 0.2 s.
Stage shares are shares of the workers' CPU seconds (summary.json's stage_seconds).

    python -m bench.run [--minutes 10] [--hd-minutes 6] [--executor auto|processes|ray|local]
                        [--profile] [--only-films] [--set KEY=VALUE ...]

--only-films measures the films and the folder of short films only; --set changes a setting for
them and for the corpus figure (the cost of one rule: the same films with it switched off, e.g.
`--set scenes.blend_gate=-1`, in the same session).

--profile [480p|1080p|folder|corpus] records one `animegamer dataset` run with py-spy over its
whole process tree (pip install py-spy, the `test` extra has it): the half-length film (the
default), the 1080p film, the folder of short films or the corpus folder, and prints where the
time goes, function by function (docs/speed.md).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from bench.clip_folder import folder_figure
from bench.decoding import bare_decode
from bench.process_tree import ProcessTree
from core.film import FilmSummary
from core.video import mux_pictures
from pipeline.executors import EXECUTORS
from stages.sources.field_restore import pulled_frames

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sintel_trailer.mp4"
OUT = ROOT / "bench" / "out"
HD_SIZE = (1920, 1080)


def make_long_film(minutes: float, path: Path, source: Path = SAMPLE) -> Path:
    """Repeat `source`'s video packets with shifted timestamps (FFmpeg concat, without ffmpeg)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(source)) as probe:
        stream = probe.streams.video[0]
        if probe.duration is None or stream.time_base is None:
            raise SystemExit(f"{source}: no duration or time base to repeat the film by")
        span = int(probe.duration / av.time_base / stream.time_base) + 1
        seconds = float(probe.duration / av.time_base)
    repeats = int(minutes * 60 / seconds) + 1
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w") as out:
        with av.open(str(source)) as first:
            target = out.add_stream_from_template(first.streams.video[0])
        for k in range(repeats):
            with av.open(str(source)) as film:
                for packet in film.demux(film.streams.video[0]):
                    if packet.dts is None or packet.pts is None:
                        continue
                    packet.pts += k * span
                    packet.dts += k * span
                    packet.stream = target
                    out.mux(packet)
    tmp.rename(path)
    return path


def make_hd_sample(path: Path) -> Path:
    """The sample upscaled to 1920x1080 (bicubic), encoded as a delivered film would be: x264
    veryfast, crf 20, B-frames, CABAC, key frames every 10 s. Once: about a minute of CPU."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.mp4")
    width, height = HD_SIZE
    with av.open(str(SAMPLE)) as source, av.open(str(tmp), "w") as out:
        rate = source.streams.video[0].average_rate or Fraction(24)
        stream = out.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "20", "preset": "veryfast", "bf": "3", "g": str(int(rate * 10))}
        sizes = [(width, height), (width // 2, height // 2)] * 2

        def upscaled(frame: av.VideoFrame) -> av.VideoFrame:
            planes = [
                cv2.resize(plane, size, interpolation=cv2.INTER_CUBIC)
                for plane, size in zip(_planes(frame), sizes)
            ]
            return av.VideoFrame.from_ndarray(
                np.concatenate([p.reshape(-1, width) for p in planes]), format="yuv420p"
            )

        mux_pictures(out, stream, (upscaled(f) for f in source.decode(video=0)), rate)
    tmp.rename(path)
    return path


def make_telecined_film(minutes: float, path: Path) -> Path:
    """The sample film taken as 23.976 pictures, through libavfilter's `telecine` (3:2, top field
    first) to 29.97 frames a second, repeated to `minutes` (issue 35: restoration's cost)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    once = path.with_name(path.stem + ".once.mp4")
    if not once.exists():
        tmp = once.with_suffix(".tmp.mp4")
        with av.open(str(SAMPLE)) as source, av.open(str(tmp), "w") as out:
            stream = source.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            graph = av.filter.Graph()
            buffer = graph.add(
                "buffer",
                f"video_size={width}x{height}:pix_fmt=yuv420p:time_base=1001/24000"
                ":frame_rate=24000/1001:pixel_aspect=1/1",
            )
            telecine, sink = (
                graph.add("telecine", "first_field=top:pattern=23"),
                graph.add("buffersink"),
            )
            buffer.link_to(telecine)
            telecine.link_to(sink)
            graph.configure()
            target = out.add_stream("libx264", rate=Fraction(30000, 1001))
            target.width, target.height, target.pix_fmt = width, height, "yuv420p"
            target.options = {"crf": "18", "preset": "veryfast", "x264-params": "tff=1"}
            count = 0
            for index, frame in enumerate(source.decode(stream)):
                frame.pts, frame.time_base = index, Fraction(1001, 24000)
                graph.push(frame.reformat(format="yuv420p"))
                for woven in pulled_frames(graph):
                    woven.pts, woven.time_base = count, Fraction(1001, 30000)
                    count += 1
                    for packet in target.encode(woven):
                        out.mux(packet)
            for packet in target.encode():
                out.mux(packet)
        tmp.rename(once)
    return make_long_film(minutes, path, once)


def _planes(frame: av.VideoFrame) -> list[np.ndarray]:
    return [
        np.frombuffer(memoryview(p), np.uint8).reshape(p.height, p.line_size)[:, : p.width]
        for p in frame.planes
    ][:3]


def run_pipeline(
    path: Path, out: Path, executor: str, overrides: tuple[str, ...] = (), runner=None
) -> tuple[float, FilmSummary]:
    """The film through the pipeline on `runner` (the bench's one executor, started and timed
    apart: Ray's is process-wide anyway, and a pool of its own per film would count its start in
    the film's CPU), else on a new `executor`, started before the clock."""
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.executors import make_executor
    from pipeline.running.runner import run_film

    config = load_config(None, [f"run.executor={executor}", *overrides])
    if runner is None:
        runner = make_executor(executor, None, progress=True)
        runner.start()
    began = time.perf_counter()
    result = run_film(path, out, config, load_ip(None), runner)
    if result.summary is None:
        raise RuntimeError(f"{path}: {result.message}")
    return time.perf_counter() - began, result.summary


def quality_cost(film: Path, out: Path, executor: str, runner=None) -> dict:
    """What the quality stage adds to the wall time: the film again without it (black-run
    boundaries kept, so the clips are the same), then with it, both after the measured run so
    that neither pays for cold workers or caches."""
    seconds = {}
    for name, overrides in (("without", ("quality.enabled=false",)), ("with", ())):
        shutil.rmtree(out, ignore_errors=True)
        seconds[name], summary = run_pipeline(film, out, executor, overrides, runner)
    return {
        "pipeline_seconds_without_quality": round(seconds["without"], 1),
        "pipeline_seconds_with_quality_again": round(seconds["with"], 1),
        "quality_added_wall_fraction": round(seconds["with"] / seconds["without"] - 1, 3),
        "clips_without_quality": summary.clips_written,
    }


def measure(
    name: str, film: Path, executor: str, overrides: tuple[str, ...] = (), runner=None
) -> dict:
    out = OUT / f"dataset-{name}"
    shutil.rmtree(out, ignore_errors=True)
    before = bare_decode(film)
    with ProcessTree() as tree:
        pipeline_seconds, summary = run_pipeline(film, out, executor, overrides, runner)
    after = bare_decode(film)
    decode_wall = (before["wall"] + after["wall"]) / 2
    decode_cpu = (before["cpu"] + after["cpu"]) / 2
    stages = summary.stage_seconds or {}
    busy = sum(stages.values())
    facts = summary.film
    return {
        "film": name,
        "settings": list(overrides),
        "size": f"{facts.width}x{facts.height}",
        "film_minutes": round((facts.duration or 0) / 60, 2),
        "frames": before["frames"],
        "bare_decode_seconds": [round(before["wall"], 1), round(after["wall"], 1)],
        "pipeline_seconds": round(pipeline_seconds, 1),
        "ratio_pipeline_to_decode": round(pipeline_seconds / decode_wall, 2),
        "bare_decode_cpu_seconds": [round(before["cpu"], 1), round(after["cpu"], 1)],
        "pipeline_cpu_seconds": round(tree.cpu_seconds, 1),
        "cpu_ratio": round(tree.cpu_seconds / decode_cpu, 2),
        "peak_memory_gib": round(tree.peak / 2**30, 2),
        "clips": summary.clips_written,
        "stage_share": {k: round(v / busy, 3) for k, v in sorted(stages.items())},
        "stage_cpu_seconds": {k: round(v, 1) for k, v in sorted(stages.items())},
        "quality_share_of_worker_time": round(stages.get("quality", 0) / busy, 3),
        # the film pass (prepare step) and the clip pass, both named "overlays" (issue 28)
        "overlays_share_of_worker_time": round(stages.get("overlays", 0) / busy, 3),
        "overlays_seconds": round(stages.get("overlays", 0), 2),
        # black and flat runs, their fades, blends (dissolves, fades, short wipes), and a
        # learned detector where one is on (issue 18)
        "boundaries_share_of_worker_time": round(
            sum(stages.get(k, 0) for k in ("boundaries", "blends", "transitions")) / busy, 3
        ),
        "blends_share_of_worker_time": round(stages.get("blends", 0) / busy, 3),
        # issue 35: the field pass (prepare step), the combing measure (a clip stage) and
        # restoration (segments; only where the film is not progressive), in CPU seconds
        "fields_seconds": round(stages.get("fields", 0), 2),
        "combing_seconds": round(stages.get("combing", 0), 2),
        "field_restore_seconds": round(stages.get("field_restore", 0), 2),
        "field_structure": (summary.fields.line() or "progressive") if summary.fields else None,
        # camera motion and clarity, stages of their own (issue 36): how much they raise the
        # CPU ratio to a bare decode (their CPU over the rest of the run's)
        **score_costs(stages, tree.cpu_seconds, decode_cpu),
    }


def score_costs(stages: dict[str, float], pipeline_cpu: float, decode_cpu: float) -> dict:
    scores = {name: stages.get(name, 0.0) for name in ("camera", "clarity")}
    spent = sum(scores.values())
    return {
        "score_cpu_seconds": {name: round(seconds, 2) for name, seconds in scores.items()},
        "scores_raise_cpu_ratio_by": round(spent / max(pipeline_cpu - spent, 1e-9), 4),
        "cpu_ratio_without_scores": round((pipeline_cpu - spent) / decode_cpu, 2),
    }


def motion_figures() -> dict:
    """The motion stage on its own: DIS speed, CPU per clip, MemFlow where a GPU exists."""
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


PROFILED = ("480p", "1080p", "folder", "corpus")  # what --profile records
PROJECT = ("core/", "stages/", "pipeline/")  # the inclusive list: these modules' functions
PY_FRAME = re.compile(r"\(\S+\.py(:\d+)?\)$")  # py-spy's `name (path/file.py:line)`


def profile(target: Path, spy_out: Path, overrides: Sequence[str] = ()) -> None:
    """py-spy over the whole process tree of `animegamer dataset TARGET` (the default executor:
    the driver, the fork server and its workers), then where the time goes, function by function.
    `target` is a film or a folder of films."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists() and shutil.which("py-spy") is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    out = OUT / "dataset-profile"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(target), "--out", str(out)]
    command += [a for setting in overrides for a in ("--set", setting)]
    spy_command = [spy, "record", "-r", "50", "--subprocesses", "-f", "raw", "-o", str(spy_out)]
    subprocess.run([*spy_command, "--", *command, "--quiet"], check=True, cwd=ROOT)
    print_profile(spy_out)


def print_profile(raw: Path, top: int = 25) -> None:
    """Inclusive share of the samples for each of the project's functions (the executor's plumbing
    left out), every process and thread of the tree together (idle threads are not sampled), and
    the Python functions the samples were in (self)."""
    inclusive: Counter = Counter()
    own: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = [_function(frame) for frame in stack.split(";") if PY_FRAME.search(frame)]
        total += int(samples)
        for name in set(frames):
            if name.split(" (")[-1].startswith(PROJECT) and "executors/" not in name:
                inclusive[name] += int(samples)
        if frames:
            own[frames[-1]] += int(samples)
    print(f"\npy-spy, {total} samples of busy threads, every process: the project's functions")
    for name, count in inclusive.most_common(top):
        print(f"{count / total:6.1%}  {name}")
    print("self share (the Python function a sample was in, its native calls included)")
    for name, count in own.most_common(top // 2):
        print(f"{count / total:6.1%}  {name}")


def _function(frame: str) -> str:
    """`name (path/file.py)` of py-spy's `name (path/file.py:line)`."""
    return frame.split(" (")[0] + " (" + frame.split(" (")[-1].split(":")[0] + ")"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--hd-minutes", type=float, default=6.0, help="0 leaves the 1080p film out")
    parser.add_argument(
        "--telecined-minutes",
        type=float,
        default=2.0,
        help="the sample telecined (3:2) for restoration's cost; 0 leaves it out",
    )
    parser.add_argument("--executor", default="auto", choices=EXECUTORS)
    parser.add_argument(
        "--profile",
        nargs="?",
        const="480p",
        choices=PROFILED,
        help="py-spy over the process tree of one run: the half-length film (480p, the default), "
        "the 1080p film, the folder of short films or the corpus folder",
    )
    parser.add_argument(
        "--only-corpus", action="store_true", help="only the corpus figure (a folder of films)"
    )
    parser.add_argument(
        "--only-films",
        action="store_true",
        help="only the films against their bare decode (no quality cost, motion or corpus)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pipeline setting for the measured runs, e.g. scenes.blend_gate=-1 (repeatable)",
    )
    return parser


def bench_films(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The measured films, (name, path), written once under OUT: the sample repeated to half and
    to all of `--minutes`, its 1080p copy and its telecined copy unless their minutes are 0."""
    half, minutes = args.minutes / 2, args.minutes
    films = [
        (f"sintel-{half:g}min", make_long_film(half, OUT / f"sintel_x{half:g}min.mp4")),
        (f"sintel-{minutes:g}min", make_long_film(minutes, OUT / f"sintel_x{minutes:g}min.mp4")),
    ]
    if args.hd_minutes:
        hd = make_hd_sample(OUT / "sintel_1080p_crf20.mp4")
        path = OUT / f"sintel_1080p_crf20_x{args.hd_minutes:g}min.mp4"
        films.append((f"1080p-{args.hd_minutes:g}min", make_long_film(args.hd_minutes, path, hd)))
    if args.telecined_minutes:
        minutes = args.telecined_minutes
        path = OUT / f"sintel_telecined_x{minutes:g}min.mp4"
        films.append((f"telecined-{minutes:g}min", make_telecined_film(minutes, path)))
    return films


def _profile_target(args: argparse.Namespace, films: list[tuple[str, Path]]) -> Path:
    """What `--profile` runs: one of the films or one of the folders."""
    from bench.clip_folder import make_clip_folder
    from bench.corpus import make_corpus

    targets = {
        "480p": lambda: films[0][1],
        "1080p": lambda: dict(films)[f"1080p-{args.hd_minutes:g}min"],
        "folder": lambda: make_clip_folder(OUT / "clip_folder")[0].parent,
        "corpus": lambda: make_corpus(OUT / "corpus_films")[0].parent,
    }
    return targets[args.profile]()


def measure_films(args: argparse.Namespace, films: list[tuple[str, Path]]) -> dict:
    """Each film, then the folder of short films, against their bare decodes on one executor;
    the quality cost and the motion figures unless `--only-films`."""
    from pipeline.executors import make_executor

    start_began = time.perf_counter()
    executor = make_executor(args.executor, None, progress=True)  # the film rows run on it
    executor.start()
    report = {
        "executor": args.executor,
        "executor_start_seconds": round(time.perf_counter() - start_began, 1),
        "runs": [],
    }
    for name, film in films:
        run = measure(name, film, args.executor, tuple(args.set), executor)
        if film == films[0][1] and not args.only_films:
            run |= quality_cost(film, OUT / f"dataset-{name}-quality", args.executor, executor)
        report["runs"].append(run)
        print(json.dumps(run, indent=2), flush=True)
    folder = folder_figure(OUT, executor, tuple(args.set))
    report["runs"].append(folder)
    print(json.dumps(folder, indent=2), flush=True)
    if not args.only_films:
        report["motion"] = motion_figures()
        print(json.dumps(report["motion"], indent=2), flush=True)
    executor.close()  # the corpus figures start executors of their own sizes
    return report


def _print_rows(report: dict) -> None:
    """One line per measured film and the folder's, as the README and docs/speed.md quote them."""
    *runs, folder = report["runs"]
    print(
        f"{folder['film']}: pipeline {folder['pipeline_seconds']} s vs bare decode "
        f"{folder['bare_decode_seconds']} s: x{folder['ratio_pipeline_to_decode']} wall, "
        f"x{folder['cpu_ratio']} CPU, {folder['cores_busy']} cores busy; {folder['clips']} clips"
    )
    for run in runs:
        print(
            f"{run['film']} ({run['size']}, {run['frames']} frames): pipeline "
            f"{run['pipeline_seconds']} s vs bare decode {run['bare_decode_seconds']} s: "
            f"x{run['ratio_pipeline_to_decode']} wall, x{run['cpu_ratio']} CPU; "
            f"peak memory (sum of RSS) {run['peak_memory_gib']} GiB; {run['clips']} clips; blends "
            f"{run['blends_share_of_worker_time']} and overlays "
            f"{run['overlays_share_of_worker_time']} of the workers' CPU; camera motion and "
            f"clarity {run['score_cpu_seconds']} CPU-s raise the CPU ratio by "
            f"{run['scores_raise_cpu_ratio_by']:.1%}"
        )
    print(f"executor start {report['executor_start_seconds']} s (not in the pipeline time)")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.only_corpus:
        return _print_corpus({"runs": []})
    films = bench_films(args)
    if args.profile:
        profile(_profile_target(args, films), OUT / f"profile-{args.profile}.txt", args.set)
        return 0
    report = measure_films(args, films)
    if not args.only_films:
        _print_corpus(report, tuple(args.set))
    print()
    _print_rows(report)
    return 0


def _print_corpus(report: dict, overrides: tuple[str, ...] = ()) -> int:
    from bench.corpus import corpus_figure, executors_figure

    report["corpus"] = corpus_figure(OUT, overrides)
    print(json.dumps(report["corpus"], indent=2), flush=True)
    report["corpus_executors"] = executors_figure(OUT)
    print(json.dumps(report["corpus_executors"], indent=2), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench.json").write_text(json.dumps(report, indent=2))
    corpus, row = report["corpus"], report["corpus_executors"]
    print(
        f"corpus: {corpus['films']} short films in {corpus['seconds_one_cpu']} s on one CPU, "
        f"{corpus['seconds_all_cores']} s on {corpus['cores']} cores: "
        f"x{corpus['speedup']} (outputs identical: {corpus['outputs_identical']})"
    )
    print(f"corpus of {row['films']} ~2-min films, against the local executor, round by round:")
    for name, label in (("default", "default (process pool)"), ("ray", "embedded Ray")):
        print(
            f"  {label}: wall x{row[f'wall_seconds_ratio_{name}_to_local']}, "
            f"CPU x{row[f'cpu_seconds_ratio_{name}_to_local']} (run's processes), "
            f"machine CPU x{row[f'machine_cpu_seconds_ratio_{name}_to_local']}"
        )
    print(
        f"  CPU besides the films' stages: local {row['local_other_cpu_seconds']} s, default "
        f"{row['default_other_cpu_seconds']} s, Ray {row['ray_other_cpu_seconds']} s"
    )
    print(
        f"  cores busy: local {row['local_cores_busy']}, default {row['default_cores_busy']}, "
        f"Ray {row['ray_cores_busy']}, default with run.num_cpus=1 "
        f"{row['default_1cpu']['cores_busy']} (outputs identical: {row['outputs_identical']}; "
        f"load {row['load_average_before_and_after']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
