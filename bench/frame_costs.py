"""What a segment's frame-level work costs a frame, step by step (docs/speed.md).

    python -m bench.frame_costs FILM [--frames 2000] [--rounds 2]

The film's first `frames` frames are decoded on one thread, and each goes through the steps a
segment takes for every frame, in its order: the scene picture (the 256-wide BGR copy,
core/frames.py `PlaneSource.small_bgr`), hard cuts (`SceneCuts`), black runs (`BlackRuns`)
and blends (`BlendSpans`), with the default settings, the whole picture as the crop box. Each
step is timed on the thread's own clock, so other processes on the machine inflate every step
alike (cache and memory contention aside); CPU milliseconds a frame are printed per round and
step. Run it in two checkouts in turn (`PYTHONPATH=<checkout> python <this file> FILM`) to
compare them; the cuts found are printed too, so that a change that should leave them alone
can be seen to.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import av
import cv2
import numpy as np

from core.frames import PlaneSource
from core.video import FrameReader
from pipeline.data.config import load_config
from stages.base import Frame
from stages.probe import Probe
from stages.scenes import BlackRuns, BlendSpans, SceneCuts

STEPS = ("decode", "scene picture", "cuts", "black runs", "blends")


def frame_costs(film: Path, frames: int) -> tuple[dict[str, float], list[int]]:
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("film", type=Path)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    for round_ in range(args.rounds):
        costs, found = frame_costs(args.film, args.frames)
        steps = ", ".join(f"{step} {ms:.3f}" for step, ms in costs.items())
        print(f"round {round_}: CPU ms a frame: {steps}; {len(found)} cuts {found}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
