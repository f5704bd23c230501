"""decord against PyAV where a clip's MP4 bytes are decoded for training and evaluation.

The trainer (trainer/shared/data.py ShotDataset._video) and evaluation decode each sample's `video`
column, a 16-frame H.264 clip of 480x720, with `core.video.decode_mp4` (PyAV). The design named
decord for this job; this measures both on the same clips, in the same run, alternating which goes
first, single-threaded (one DataLoader worker decodes one clip at a time), and checks that both
give the same pixels.

    python -m bench.decode_bench [--shards data/<film>/shards] [--clips 14] [--rounds 5]

Without --shards it cuts the sample film with the pipeline first (about a minute). decord is
not a dependency of the project (README, "Dependencies"): `pip install decord==0.6.0` to run this.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from core.shards import shard_paths
from core.video import decode_mp4

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def decode_decord(data: bytes) -> np.ndarray:
    """The same job with decord: every frame of in-memory MP4 bytes as N x H x W x 3 RGB."""
    import decord

    reader = decord.VideoReader(io.BytesIO(data), num_threads=1)
    return reader.get_batch(list(range(len(reader)))).asnumpy()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_decoder(decode, videos: list[bytes]) -> tuple[float, float]:
    """(wall, CPU) seconds to decode every clip once."""
    wall, cpu = time.perf_counter(), _cpu_seconds()
    for data in videos:
        decode(data)
    return time.perf_counter() - wall, _cpu_seconds() - cpu


def clip_videos(shards: Path, limit: int) -> list[bytes]:
    videos: list[bytes] = []
    for path in shard_paths(shards):
        table = pq.read_table(path, columns=["video", "status"])
        videos += [v for v, s in zip(table["video"].to_pylist(), table["status"].to_pylist()) if v]
    if not videos:
        raise SystemExit(f"{shards}: no clip videos")
    return videos[:limit]


def sample_shards() -> Path:
    """Cut the sample film (once, kept in bench/out/decode) and return its shards folder."""
    from pipeline.cli import main as cli_main

    out = OUT / "decode"
    found = sorted(out.glob("*/shards"))
    if not found:
        if cli_main(["dataset", str(ROOT / "samples" / "sintel_trailer.mp4"), "--out", str(out)]):
            raise SystemExit("the sample film could not be cut")
        found = sorted(out.glob("*/shards"))
    return found[0]


def measure(videos: list[bytes], rounds: int) -> dict:
    try:
        import decord
    except ImportError:
        raise SystemExit("decord is not installed: pip install decord==0.6.0") from None

    decord.bridge.set_bridge("native")
    for data in videos:  # the same pixels, or the comparison means nothing
        ours, theirs = decode_mp4(data), decode_decord(data)
        if ours.shape != theirs.shape:
            raise SystemExit(f"decoders disagree on shape: {ours.shape} vs {theirs.shape}")
        worst = int(np.abs(ours.astype(np.int16) - theirs).max())
        if worst > 2:
            raise SystemExit(f"decoders disagree on pixels by up to {worst} grey levels")
    time_decoder(decode_mp4, videos[:2]), time_decoder(decode_decord, videos[:2])  # warm up
    totals = {"pyav": [0.0, 0.0], "decord": [0.0, 0.0]}
    for index in range(rounds):
        order = [("pyav", decode_mp4), ("decord", decode_decord)]
        for name, decode in order if index % 2 == 0 else order[::-1]:
            wall, cpu = time_decoder(decode, videos)
            totals[name][0] += wall
            totals[name][1] += cpu
    decoded = rounds * len(videos)
    per_clip = {name: [s / decoded * 1000 for s in pair] for name, pair in totals.items()}
    return {
        "clips": len(videos),
        "rounds": rounds,
        "frames_per_clip": len(decode_mp4(videos[0])),
        "size": list(decode_mp4(videos[0]).shape[1:3]),
        "pyav_ms_per_clip": {
            "wall": round(per_clip["pyav"][0], 2),
            "cpu": round(per_clip["pyav"][1], 2),
        },
        "decord_ms_per_clip": {
            "wall": round(per_clip["decord"][0], 2),
            "cpu": round(per_clip["decord"][1], 2),
        },
        "decord_over_pyav": {
            "wall": round(per_clip["decord"][0] / per_clip["pyav"][0], 3),
            "cpu": round(per_clip["decord"][1] / per_clip["pyav"][1], 3),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=Path, help="a film's shards folder (default: the sample)")
    parser.add_argument("--clips", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    videos = clip_videos(args.shards or sample_shards(), args.clips)
    print(json.dumps(measure(videos, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
