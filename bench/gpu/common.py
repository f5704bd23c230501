"""What every part of the GPU benchmark shares: its settings, running a part guarded, GPU memory
and clocks, and the run's facts the MFU is measured against (`RUN_FACTS`)."""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from bench.gpu import models

ENGINES = ("transformers", "lmdeploy-turbomind", "lmdeploy-pytorch")
# the device's name, versions and its measured and published bf16 rates (bench.gpu.cli fills it)
RUN_FACTS: dict = {}


@dataclasses.dataclass
class Settings:
    device: str
    tiny: bool
    workdir: Path
    film: Path
    new_tokens: int = 32
    caption_batches: tuple[int, ...] = (8, 32)
    memflow_batches: tuple[int, ...] = (1, 2, 4, 8)
    memflow_clips: int = 2
    mllm_batches: tuple[int, ...] = (1, 2)
    mllm_checkpointed_batches: tuple[int, ...] = (4, 8, 16)
    encoder_batches: tuple[int, ...] = (1, 2)
    steps: int = 3
    engines: tuple[str, ...] = ENGINES

    @property
    def shape(self) -> dict:
        return models.TINY if self.tiny else models.REAL

    @property
    def frame_size(self) -> tuple[int, int]:
        return (16, 24) if self.tiny else (480, 720)


def run_part(name: str, measure, settings: Settings, rows: list[dict], on_row=None) -> None:
    """Append the rows `measure` yields to `rows`, calling `on_row` after each; an exception
    becomes one more row carrying the error, never a crash."""
    began = time.perf_counter()
    try:
        for row in measure(settings):
            rows.append({"part": name, **row})
            if on_row:
                on_row()
    except Exception as exc:  # guarded: one failing part must not lose the others
        traceback.print_exc(file=sys.stderr)
        rows.append({"part": name, "setting": "-", "error": one_line(exc)})
    print(f"[bench.gpu] {name}: {time.perf_counter() - began:.0f} s", flush=True)
    release_memory()


def one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def within_memory(measure: Callable[[], dict]) -> dict:
    """`measure()`'s figures, or `{"error": ...}` when it runs out of GPU memory (a sweep then
    leaves its larger settings out); GPU memory is released either way."""
    try:
        return measure()
    except torch.OutOfMemoryError as exc:
        return {"error": one_line(exc, 120)}
    finally:
        release_memory()


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_gib(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def matmul_tflops(device: str, size: int = 8192, repeats: int = 10) -> float | None:
    """The bf16 matrix-product rate this GPU reaches now: the MFU's measured ceiling."""
    if not device.startswith("cuda"):
        return None
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return round(2 * size**3 * repeats / (start.elapsed_time(end) / 1000) / 1e12, 1)
