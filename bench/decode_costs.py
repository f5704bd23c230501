"""What decoding a film costs a frame, and what the segment adds to it (docs/speed.md).

    python -m bench.decode_costs FILM [--frames 300] [--rounds 2]

- CPU milliseconds a frame for one decoder thread, frame threading and slice threading (the
  process's CPU, every thread counted, and its wall time), `rounds` times in turn;
- the scene picture (the 256-wide BGR picture scene detection reads, by swscale's bilinear
  filter, as core/frames.py makes it) and the cheaper scalings one could use instead, each with
  whether it gives the same pixels.

    python -m bench.decode_costs FILM --steps [--frames 2000] [--rounds 2]

- instead: the steps a segment takes for every frame, in its order, each on the thread's own
  clock: decoding (one thread), the scene picture (`PlaneSource.small_bgr`), hard cuts
  (`SceneCuts`), black runs (`BlackRuns`) and blends (`BlendSpans`), default settings, the whole
  picture as the crop box; CPU ms a frame per round and step, and the cuts found. Run it in two
  checkouts in turn (`PYTHONPATH=<checkout> python <this file> FILM --steps`) to compare them.

    python -m bench.decode_costs FILM --clip-stages [--rounds 10] [--set K=V ...]

- instead: the clip stages (motion, camera, clarity, combing, overlays, quality, encode, ...):
  the film is cut once in this process, its clips kept as cut, then each clip goes through the
  stages again `rounds` times, each from fresh frames, every stage on the thread's own clock:
  CPU ms a clip per stage, and a digest of every value the stages stored (the same digest in two
  checkouts: the same values).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import resource
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import av
import cv2
import numpy as np
from av.video.reformatter import VideoReformatter

from core.frames import ClipFrames, PlaneSource
from core.record import Clip
from core.video import FrameReader
from pipeline.data.config import load_config
from stages.base import ClipStage, FilmContext, Frame, build_clip_stages
from stages.probe import Probe
from stages.scenes import BlackRuns, BlendSpans, SceneCuts

THREADING = (("SLICE", 1), ("FRAME", 2), ("SLICE", 2), ("FRAME", 3))
SCALINGS = ("BILINEAR", "AREA", "FAST_BILINEAR", "POINT")
SCENE_WIDTH = 256


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threading_costs(film: Path, frames: int, rounds: int) -> list[dict]:
    rows = []
    for round_ in range(rounds):
        for kind, threads in THREADING:
            wall, cpu, count = time.perf_counter(), _cpu(), 0
            with av.open(str(film)) as container:
                stream = container.streams.video[0]
                stream.thread_type, stream.codec_context.thread_count = kind, threads
                for _ in container.decode(stream):
                    count += 1
                    if count >= frames:
                        break
            rows.append(
                {
                    "round": round_,
                    "threading": f"{kind.lower()} x{threads}",
                    "cpu_ms": round((_cpu() - cpu) / count * 1e3, 2),
                    "wall_ms": round((time.perf_counter() - wall) / count * 1e3, 2),
                }
            )
    return rows


def scaling_costs(film: Path, frames: int) -> list[dict]:
    with av.open(str(film)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        decoded = []
        began = time.thread_time()
        for frame in container.decode(stream):
            decoded.append(frame)
            if len(decoded) >= frames:
                break
        decode_ms = (time.thread_time() - began) / len(decoded) * 1e3
    width = SCENE_WIDTH
    height = max(2, int(decoded[0].height * width / decoded[0].width) // 2 * 2)
    rows = [{"step": "decode, one thread", "ms": round(decode_ms, 2)}]
    reference = None
    for scaling in SCALINGS:
        scaler, began = VideoReformatter(), time.thread_time()
        pictures = [
            scaler.reformat(
                f, width=width, height=height, format="bgr24", interpolation=scaling, threads=1
            ).to_ndarray()
            for f in decoded
        ]
        reference = pictures if reference is None else reference
        rows.append(
            {
                "step": f"scene picture {width}x{height}, {scaling.lower()}",
                "ms": round((time.thread_time() - began) / len(decoded) * 1e3, 2),
                "same_pixels": all(np.array_equal(a, b) for a, b in zip(pictures, reference)),
            }
        )
    began = time.thread_time()
    for frame in decoded:
        frame.to_ndarray()
    whole = (time.thread_time() - began) / len(decoded) * 1e3
    rows.append({"step": "a whole frame to numpy (a copy)", "ms": round(whole, 2)})
    return rows


STEPS = ("decode", "scene picture", "cuts", "black runs", "blends")


def step_costs(film: Path, frames: int) -> tuple[dict[str, float], list[int]]:
    """CPU ms a frame of each step over the film's first `frames` frames, and the cuts found."""
    cv2.setNumThreads(1)  # as in a segment task
    config = load_config(None, [])
    info = Probe().process(film)
    width = config.scenes.width
    size = (width, max(2, int(info.height * width / info.width) // 2 * 2))
    pictures = PlaneSource(0, size, (0, 0, *size))
    held_rule = (config.motion.held_pixel_delta, config.motion.held_max_fraction)
    cuts = SceneCuts(config.scenes, info.fps, held_rule)
    black = BlackRuns(config.scenes, info.fps)
    blends = BlendSpans(config.scenes, info.fps, max(cuts.lag, black.min_frames))
    spent = dict.fromkeys(STEPS, 0.0)
    found: list[int] = []
    decoded = iter(FrameReader(str(film), info.frame_pts, 1).frames(0, frames))
    count = 0
    while True:
        clock = time.thread_time()
        try:
            index, decoded_frame = next(decoded)
        except StopIteration:
            break
        marks = [clock, time.thread_time()]
        small = pictures.small_bgr(decoded_frame)
        marks.append(time.thread_time())
        frame = _frame(index, small, decoded_frame, pictures)
        found += cuts.process(frame)
        marks.append(time.thread_time())
        black.process(frame)
        marks.append(time.thread_time())
        blends.process(frame)
        marks.append(time.thread_time())
        for step, began, ended in zip(STEPS, marks, marks[1:]):
            spent[step] += ended - began
        count += 1
    found += cuts.finish(count)
    return {step: seconds / max(1, count) * 1e3 for step, seconds in spent.items()}, found


def _frame(index: int, small: np.ndarray, decoded: av.VideoFrame, pictures: PlaneSource) -> Frame:
    """The frame as the segment hands it to its frame-level stages."""
    return Frame(index, small=lambda: small, planes=lambda: pictures.planes(decoded))


class _Keep(ClipStage):
    """A first clip stage that keeps each clip as it was cut, its frames copied."""

    name = "keep"

    def __init__(self) -> None:
        self.clips: list[Clip] = []
        self.film = FilmContext()

    def for_film(self, film: FilmContext) -> None:
        self.film = film

    def process(self, clip: Clip) -> Clip:
        kept = copy.copy(clip)
        kept.frames = _copied(clip.frames)
        self.clips.append(kept)
        return clip


def _copied(frames) -> ClipFrames:
    """New ClipFrames of the same pixels, with nothing computed from them yet."""
    assert isinstance(frames, ClipFrames)
    return ClipFrames(np.stack([frames.i420(k) for k in range(len(frames))]))


def cut_clips(film: Path, overrides: list[str]) -> tuple[list[Clip], FilmContext]:
    """The film's clips as cut (frames in memory, nothing measured), and its FilmContext: its
    prepare step, then each segment with `_Keep` as its one clip stage."""
    from pipeline.data.ip import load_ip
    from pipeline.running.film_tasks import FilmPlan, PrepareJob, prepare_film, segment_job
    from pipeline.running.segments import run_segment

    keep = _Keep()
    with tempfile.TemporaryDirectory() as out:
        config, ip = load_config(None, overrides), load_ip(None)
        plan = prepare_film(PrepareJob(film, out, config, ip))
        assert isinstance(plan, FilmPlan)  # a fresh folder holds no finished film
        for segment in plan.segments:
            run_segment(segment_job(plan, config, ip, segment), stages=[keep])
    return keep.clips, keep.film


def clip_stage_costs(
    clips: list[Clip], film: FilmContext, rounds: int, overrides: list[str]
) -> tuple[dict[str, float], str]:
    """CPU ms a clip of each clip stage over `rounds` passes of `clips` (fresh frames each time:
    nothing one pass computed is kept), and a digest of the values the first pass stored."""
    from pipeline.running.segments import limit_threads

    config = load_config(None, overrides)
    cv2.setNumThreads(1)
    stages = build_clip_stages(config)
    for stage in stages:
        stage.for_film(film)
        stage.setup()
    limit_threads(config.run.task_threads)
    spent: dict[str, float] = defaultdict(float)
    stored = []
    for round_ in range(rounds):
        for cut in clips:
            clip = copy.copy(cut)
            clip.frames = _copied(cut.frames)
            for stage in stages:
                began = time.thread_time()
                clip = stage.process_safely(clip)
                spent[stage.name] += time.thread_time() - began
            if round_ == 0:
                stored.append({k: repr(v) for k, v in clip.to_row().items()})
    digest = hashlib.sha256(json.dumps(stored, sort_keys=True).encode()).hexdigest()[:16]
    count = max(1, rounds * len(clips))
    return {name: seconds / count * 1e3 for name, seconds in spent.items()}, digest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("film", type=Path)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--steps", action="store_true", help="a segment's frame-level steps, CPU ms a frame each"
    )
    parser.add_argument(
        "--clip-stages", action="store_true", help="the clip stages, CPU ms a clip each"
    )
    parser.add_argument("--set", action="append", default=[], metavar="K=V")
    args = parser.parse_args(argv)
    if args.clip_stages:
        return _print_clip_stages(args.film, args.rounds, args.set)
    if args.steps:
        return _print_steps(args.film, args.frames, args.rounds)
    import os

    print(f"load average {os.getloadavg()[0]:.1f}")
    for row in threading_costs(args.film, args.frames, args.rounds):
        print(row, flush=True)
    for row in scaling_costs(args.film, args.frames):
        print(row, flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


def _print_steps(film: Path, frames: int, rounds: int) -> int:
    for round_ in range(rounds):
        costs, found = step_costs(film, frames)
        steps = ", ".join(f"{step} {ms:.3f}" for step, ms in costs.items())
        print(f"round {round_}: CPU ms a frame: {steps}; {len(found)} cuts {found}", flush=True)
    return 0


def _print_clip_stages(film: Path, rounds: int, overrides: list[str]) -> int:
    import os

    clips, context = cut_clips(film, overrides)
    print(f"{len(clips)} clips; load average {os.getloadavg()[0]:.1f}", flush=True)
    costs, digest = clip_stage_costs(clips, context, rounds, overrides)
    stages = ", ".join(f"{name} {ms:.2f}" for name, ms in costs.items())
    print(f"CPU ms a clip: {stages}; total {sum(costs.values()):.2f}", flush=True)
    print(f"stored values digest {digest}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
