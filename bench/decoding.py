"""The bare decode every figure of `make bench` is a ratio to: the same file decoded with FFmpeg's
own threads, every core, no frame converted, measured in the same run."""

from __future__ import annotations

import time
from pathlib import Path

import av


def bare_decode(path: Path) -> dict:
    """Decode every frame with FFmpeg's default threading (one thread per core), convert none."""
    wall, cpu, frames = time.perf_counter(), time.process_time(), 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for _ in container.decode(stream):
            frames += 1
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "frames": frames,
    }
