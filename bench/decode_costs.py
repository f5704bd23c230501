"""What decoding a film costs a frame, and what the segment adds to it (docs/speed.md).

    python -m bench.decode_costs FILM [--frames 300] [--rounds 2]

- CPU milliseconds a frame for one decoder thread, frame threading and slice threading (the
  process's CPU, every thread counted, and its wall time), `rounds` times in turn;
- the scene picture (the 256-wide BGR picture scene detection reads, by swscale's bilinear
  filter, as core/frames.py makes it) and the cheaper scalings one could use instead, each with
  whether it gives the same pixels.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("film", type=Path)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    import os

    print(f"load average {os.getloadavg()[0]:.1f}")
    for row in threading_costs(args.film, args.frames, args.rounds):
        print(row, flush=True)
    for row in scaling_costs(args.film, args.frames):
        print(row, flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
