"""The folder-of-short-films figure (issue 39): 20 films of 6 s, as Sakuga-42M-style sources
come, cut as one folder against a bare decode of the same 20 files in the same run.

The films are made here once from the bundled sample (kept in bench/out/clip_folder/): 144-frame
stretches of the trailer starting at 20 places spread over it, each encoded with x264 veryfast
crf 20 as a delivered clip would be, so each film has content, and clip ids, of its own.
The folder's time is the whole `run_films` call on the bench's executor (started before the
clock, as the films' rows are): every film's prepare, segment and finalize steps and the folder
passes after them. The bare decode decodes the 20 files one after another, each with FFmpeg's
own threads, before and after; the ratio is the folder's time over their mean.
"""

from __future__ import annotations

import shutil
import time
from fractions import Fraction
from pathlib import Path

import av

from bench.decoding import bare_decode
from bench.process_tree import ProcessTree
from core.video import mux_pictures

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sintel_trailer.mp4"
FILMS = 20
FRAMES = 144  # 6 s at 24 fps


def make_clip_folder(folder: Path, films: int = FILMS, frames: int = FRAMES) -> list[Path]:
    """`films` short films in `folder`, made once (about 30 CPU-s), then reused."""
    paths = [folder / f"short{k:02d}.mp4" for k in range(films)]
    if all(p.exists() for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    with av.open(str(SAMPLE)) as source:
        rate = source.streams.video[0].average_rate or Fraction(24)
        pictures = [f.to_ndarray(format="yuv420p") for f in source.decode(video=0)]
    last_start = len(pictures) - frames
    for k, path in enumerate(paths):
        start = round(k * last_start / max(1, films - 1))
        _encode(pictures[start : start + frames], rate, path)
    return paths


def _encode(pictures: list, rate: Fraction, path: Path) -> None:
    tmp = path.with_suffix(".tmp.mp4")
    height, width = pictures[0].shape[0] * 2 // 3, pictures[0].shape[1]
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "20", "preset": "veryfast"}
        frames = (av.VideoFrame.from_ndarray(p, format="yuv420p") for p in pictures)
        mux_pictures(out, stream, frames, rate)
    tmp.rename(path)


def folder_figure(work: Path, runner, overrides: tuple[str, ...] = ()) -> dict:
    """The folder on `runner` (a started executor) against a bare decode of its films."""
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_films

    films = make_clip_folder(work / "clip_folder")
    out = work / "dataset-clip-folder"
    before = [bare_decode(f) for f in films]
    shutil.rmtree(out, ignore_errors=True)
    config = load_config(None, ["run.progress=false", *overrides])
    with ProcessTree() as tree:
        began = time.perf_counter()
        results = run_films(films, out, config, load_ip(None), runner)
        seconds = time.perf_counter() - began
    after = [bare_decode(f) for f in films]
    failed = [r.message for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"clip folder bench: films failed: {failed}")
    decode_wall = (sum(d["wall"] for d in before) + sum(d["wall"] for d in after)) / 2
    decode_cpu = (sum(d["cpu"] for d in before) + sum(d["cpu"] for d in after)) / 2
    stages: dict[str, float] = {}
    for result in results:
        for name, value in ((result.summary and result.summary.stage_seconds) or {}).items():
            stages[name] = stages.get(name, 0.0) + value
    return {
        "film": f"clip-folder-{len(films)}x{FRAMES}frames",
        "settings": list(overrides),
        "films": len(films),
        "bare_decode_seconds": [
            round(sum(d["wall"] for d in before), 2),
            round(sum(d["wall"] for d in after), 2),
        ],
        "pipeline_seconds": round(seconds, 1),
        "ratio_pipeline_to_decode": round(seconds / decode_wall, 2),
        "pipeline_cpu_seconds": round(tree.cpu_seconds, 1),
        "cpu_ratio": round(tree.cpu_seconds / decode_cpu, 2),
        "cores_busy": round(tree.cpu_seconds / seconds, 2),
        "clips": sum(r.summary.clips_written or 0 for r in results if r.summary),
        "stage_seconds": {k: round(v, 2) for k, v in sorted(stages.items())},
    }
