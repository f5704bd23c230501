"""`make bench-gpu`, part `clip`: clips per second of the clip scores stage (stages/scoring/clip_scores.py)
with a random-weight CLIP ViT-L/14 (the size the LAION aesthetic heads read) built from its
config, on 480x720 clips: one clip a call, as a segment's clip lane runs it while cutting, and
batches of clips (`process_batch`), each clip's `frames` frames embedded with the aesthetic head
applied. `--tiny` runs the tiny CLIP of the tests instead (proves the path, not the speed)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.gpu.common import Settings, synchronise
from bench.gpu.models import CLIP_TEXT_L14, CLIP_VIT_L14


def clip_rows(settings: Settings):
    """Rows of clips/s: per clip and in batches (the GPU's float16 path)."""
    import torch

    from core.frames import ClipFrames
    from stages.scoring.clip_scores import ClipScoreConfig, ClipScores

    folder = write_checkpoint(Path(settings.workdir) / "clip-bench", settings.tiny)
    head = folder / "head.pth"
    dim = 16 if settings.tiny else 768
    torch.save({"weight": torch.randn(1, dim), "bias": torch.zeros(1)}, head)
    config = ClipScoreConfig(model=str(folder), aesthetic_head=str(head), device=settings.device)
    stage = ClipScores(config)
    stage.setup()
    height, width = settings.frame_size
    rng = np.random.default_rng(0)

    def clips(count: int) -> list:
        made = []
        for k in range(count):
            frames = rng.integers(0, 255, (16, height, width, 3), dtype=np.uint8)
            made.append(bench_clip(k, ClipFrames.from_rgb(frames)))
        return made

    for batch in (1,) if settings.tiny else (1, 16, 64):
        calls = 2 if settings.tiny else max(2, 128 // batch)
        stage.process_batch(clips(batch))  # warm-up: kernels, allocator
        work = [clips(batch) for _ in range(calls)]
        synchronise(settings.device)
        began = time.perf_counter()
        for group in work:
            stage.process_batch(group)
        synchronise(settings.device)
        seconds = time.perf_counter() - began
        yield {
            "setting": f"{width}x{height}, {config.frames} frames a clip, {batch} clip(s) a call",
            "clips_per_s": round(calls * batch / seconds, 1),
        }


def bench_clip(k: int, frames):
    """A clip record carrying `frames` (the stage reads its frames and status only)."""
    from core.record import Clip

    height, width = frames.rgb_frame(0).shape[:2]
    return Clip(
        clip_id=f"bench-{k}",
        film_id="bench",
        film_name="bench",
        ip="generic",
        segment_index=0,
        scene_index=k,
        clip_index=k,
        crop_x=0,
        crop_y=0,
        start_frame=0,
        end_frame=48,
        start_time=0.0,
        end_time=2.0,
        frame_indices=list(range(0, 48, 3)),
        crop_w=width,
        crop_h=height,
        height=height,
        width=width,
        num_frames=16,
        fps=8.0,
        source_fps=24.0,
        frames=frames,
    )


def write_checkpoint(folder: Path, tiny: bool) -> Path:
    """A random CLIP of the real (or tiny) size, saved as the stage loads it."""
    from trainer.shared.tiny import write_random_clip, write_tiny_clip

    if tiny:
        return write_tiny_clip(folder)
    return write_random_clip(folder, 768, CLIP_VIT_L14, CLIP_TEXT_L14)
