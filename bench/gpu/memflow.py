"""MemFlow's pairs/s at 480x720 (ptlflow, random weights): batch 1 through the motion stage's own
backend, larger batches as clips stepped in lockstep through the same model."""

from __future__ import annotations

import contextlib
import time
from functools import partial

import torch

from bench.gpu.common import Settings, peak_memory_gib, synchronise, within_memory


def memflow_rows(settings: Settings):
    from bench.motion_bench import synthetic_clip
    from stages.motion import MotionConfig, MotionScope

    scale = 128 / 480 if settings.tiny else 1.0  # MemFlow's smallest side is 128
    stage = MotionScope(
        MotionConfig(
            backend="memflow",
            memflow_device=settings.device,
            memflow_random_weights=True,
            memflow_scale=scale,
        )
    )
    stage.setup()
    frames = synthetic_clip()
    pairs = list(range(len(frames) - 1))
    size = f"{stage.backend.size[0]}x{stage.backend.size[1]}"
    list(stage.backend.speeds(frames, pairs[:2]))  # warm-up: kernels, allocator
    synchronise(settings.device)
    began = time.perf_counter()
    for _ in range(settings.memflow_clips):
        list(stage.backend.speeds(frames, pairs))
    synchronise(settings.device)
    seconds = time.perf_counter() - began
    yield {
        "setting": f"{size} batch 1, motion stage backend",
        "pairs_per_s": round(settings.memflow_clips * len(pairs) / seconds, 2),
        "peak_mem_gib": peak_memory_gib(settings.device),
    }
    largest = max(settings.memflow_batches)
    for batch, bf16 in [(b, False) for b in settings.memflow_batches if b > 1] + [(largest, True)]:
        label = f"{size} batch {batch}, model in lockstep" + (", bf16 autocast" if bf16 else "")
        row = within_memory(
            partial(lockstep_row, stage.backend, frames, batch, settings.device, bf16)
        )
        yield {"setting": label, **row}
        if "error" in row:
            break


def lockstep_row(backend, frames, batch: int, device: str, bf16: bool) -> dict:
    rate = memflow_lockstep(backend, frames, batch, device, bf16)
    return {"pairs_per_s": round(rate, 2), "peak_mem_gib": peak_memory_gib(device)}


def memflow_lockstep(backend, frames, batch: int, device: str, bf16: bool = False) -> float:
    """Pairs/s of `batch` clips run side by side through the backend's model, pair i of every
    clip in one call, with MemFlow's memory and warm start exactly as the backend uses them."""
    pairs = len(frames) - 1
    inputs = [
        backend._tensor(frames[i : i + 2]).expand(batch, -1, -1, -1, -1) for i in range(pairs)
    ]

    def one_clip(count: int) -> None:
        previous = None
        for i in range(count):
            step = {
                "images": inputs[i].contiguous(),
                "meta": {"is_seq_start": i == 0, "is_seq_end": i == count - 1},
            }
            if previous is not None:
                step["prev_preds"] = {"flow_small": previous}
            outputs = backend._model(step)
            previous = outputs["flow_small"]
            outputs["flows"].float().cpu()  # the stage copies every flow back

    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if bf16 and device.startswith("cuda")
        else contextlib.nullcontext()
    )
    with torch.inference_mode(), autocast:
        one_clip(2)
        synchronise(device)
        began = time.perf_counter()
        one_clip(pairs)
        synchronise(device)
    return batch * pairs / (time.perf_counter() - began)
