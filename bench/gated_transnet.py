"""What TransNetV2 would cost if run only on the clip windows a cheap gate flags (issue 18).

    python -m bench.gated_transnet FILM_DIR [--context 16] [--thresholds 0.2,0.3,0.4,0.5]

FILM_DIR is a film folder made by `pipeline.cli dataset` with default settings: its summary.json
gives the film, its scenes (the windows planned in them: 2 s from each scene start) and the CPU
seconds of every stage of that run. For every planned window the film's frames are read at the
network's 48x27 RGB, and two things are measured:
- the gate: the colour-histogram distance (4x4x4 bins, total variation, 0-1) between the
  window's first and last frame;
- TransNetV2 (many-hot head, threshold 0.5) on the window plus `context` frames on each side, on
  one thread: whether it marks a transition frame inside the window, and its CPU seconds.
Then, for each gate threshold: windows flagged, windows with a transition among them (of all
windows with one), and the network's CPU seconds against the run's own stage seconds (decode,
and the sum of every stage: the issue's budget is +25 % of the latter).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import av
import cv2
import numpy as np

from stages.transnet import INPUT_SIZE, colour_distance, load_transnet

WINDOW_FRAMES = 48  # 2 s at the sample's 24 fps; other rates: see `windows`


def read_small(path: str) -> np.ndarray:
    """Every frame at the network's input size, RGB."""
    frames = []
    with av.open(path) as container:
        for frame in container.decode(video=0):
            rgb = frame.to_ndarray(format="rgb24")
            frames.append(cv2.resize(rgb, INPUT_SIZE, interpolation=cv2.INTER_AREA))
    return np.stack(frames)


def windows(scenes: list[list[int]], length: int) -> list[tuple[int, int]]:
    return [(k, k + length) for a, b in scenes for k in range(a, b - length + 1, length)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("film_dir", type=Path)
    parser.add_argument("--context", type=int, default=16)
    parser.add_argument("--thresholds", default="0.2,0.3,0.4,0.5")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as a segment task runs it
    summary = json.loads((args.film_dir / "summary.json").read_text())
    frames = read_small(summary["film"]["path"])
    model = load_transnet("cpu")
    rows = []
    for start, stop in windows(summary["scenes"], WINDOW_FRAMES):
        lo, hi = max(0, start - args.context), min(len(frames), stop + args.context)
        began = time.thread_time()
        with torch.inference_mode():
            _, many_hot = model.predict_raw(torch.from_numpy(frames[None, lo:hi].copy()))
        seconds = time.thread_time() - began
        marked = int((many_hot[0, start - lo : stop - lo, 0] > 0.5).sum())
        gate = colour_distance(frames[start], frames[stop - 1])
        rows.append((start, stop, gate, marked, seconds))
        print(f"window {start}-{stop}: gate {gate:.2f}, marked {marked}, {seconds:.2f} s")
    stages = summary["stage_seconds"]
    total, decode = sum(stages.values()), stages["decode"]
    with_transition = sum(r[3] > 0 for r in rows)
    print(f"{len(rows)} windows, {with_transition} with a transition; run: decode {decode:.2f} s,")
    print(f"all stages {total:.2f} s (budget +25 %: {0.25 * total:.2f} s)")
    for threshold in (float(t) for t in args.thresholds.split(",")):
        flagged = [r for r in rows if r[2] >= threshold]
        seconds = sum(r[4] for r in flagged)
        caught = sum(r[3] > 0 for r in flagged)
        print(
            f"gate >= {threshold:g}: {len(flagged)} flagged, {caught} of {with_transition} caught, "
            f"{seconds:.2f} s = {seconds / decode:.2f}x decode, +{100 * seconds / total:.0f} %"
        )


if __name__ == "__main__":
    main()
