"""The corpus figure: a folder of short films, once on one CPU and once on every core, same run.

The films are six versions of the Sintel trailer, each started at another of its key frames and
wrapped around (packets remuxed, not re-encoded, so each film has its own content and id), plus
the two test clips: eight films of 5 to 52 s, one segment each. Before films were scheduled
together, such a folder kept one core busy whatever the machine; the speed-up is the figure.
Ray's start-up and its workers' first imports are outside both timings (each run gets a fresh
embedded Ray of its size, warmed up first).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import av

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


def _split_sample(folder: Path) -> None:
    with av.open(str(SAMPLE)) as probe:
        stream = probe.streams.video[0]
        pts = [(p.pts, p.is_keyframe) for p in probe.demux(stream) if p.pts is not None]
        keys = [t for t, key in pts if key]
        times = sorted(t for t, _ in pts)
        span = times[-1] + (times[1] - times[0])  # the end of the last frame
    for k in range(PIECES):
        _remux_rotated(folder / f"sintel_part{k}.mp4", keys[round(k * len(keys) / PIECES)], span)


def _remux_rotated(path: Path, start: int, span: int) -> None:
    """The sample from key frame `start` to its end, then from its beginning up to `start`."""
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w") as out:
        with av.open(str(SAMPLE)) as first:
            target = out.add_stream_from_template(first.streams.video[0])
        for keep, shift in (
            (lambda pts: pts >= start, -start),
            (lambda pts: pts < start, span - start),
        ):
            with av.open(str(SAMPLE)) as source:
                for packet in source.demux(source.streams.video[0]):
                    if packet.pts is None or packet.dts is None or not keep(packet.pts):
                        continue
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = target
                    out.mux(packet)
    tmp.rename(path)


def _warm_up(job, report) -> None:
    """Import what a segment imports, on every worker, before the clock starts."""
    import pipeline.runner  # noqa: F401
    import stages.motion  # noqa: F401

    time.sleep(1.0)


def run_corpus(films: Sequence[str | Path], out: Path, num_cpus: int | None) -> tuple[float, float]:
    """Seconds to cut every film with an embedded Ray of `num_cpus` CPUs (None: every core), and
    the mean number of tasks at work (worker seconds of every stage over the wall time)."""
    from pipeline.config import load_config
    from pipeline.executor import make_executor
    from pipeline.ip import load_ip
    from pipeline.runner import run_films

    shutil.rmtree(out, ignore_errors=True)
    config = load_config(None, ["run.progress=false"])
    executor = make_executor("ray", num_cpus, progress=False)
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


def corpus_figure(work: Path) -> dict:
    import os

    films = make_corpus(work / "corpus_films")
    load_before = os.getloadavg()[0]
    one, busy_one = run_corpus(films, work / "corpus_1cpu", 1)
    every, busy_every = run_corpus(films, work / "corpus_allcpu", None)
    same = all(
        (work / "corpus_1cpu" / p.relative_to(work / "corpus_allcpu")).read_bytes()
        == p.read_bytes()
        for p in (work / "corpus_allcpu").rglob("*.parquet")
    )
    return {
        "films": len(films),
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
