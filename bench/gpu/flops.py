"""Model FLOPs of a training step with frozen backbones and LoRA, and model FLOPs utilisation.

The formula (one sample; docs/gpu.md explains it):

    forward of a transformer over T tokens   F = 2 * N * T  +  4 * L * T_q * T_kv * D
        N: weights of the matrix products every token goes through (Linear layers, LoRA excluded;
        embeddings are look-ups, not products), L layers of attention of width D.
    backward, frozen weights                 2 * N * T   (gradients of the activations only)
    backward, trainable (LoRA) weights       4 * N_lora * T   (activations and weights)
    backward of attention                    8 * L * T_q * T_kv * D   (dQ, dK, dV and dP)
    frozen feature extractors (no gradient)  their forward only

    step = 2 * (2 N T) + 3 * (2 N_lora T) + 3 * (4 L T_q T_kv D) + no-grad forwards

Gradient checkpointing recomputes forwards; that is extra work the hardware does, not model work,
so it is not counted (MFU, not hardware FLOPs utilisation). Attention is counted over every
(query, key) pair it computes: both phases use full attention (CogVideoX is bidirectional; the
MLLM gets an explicit 4D mask, which SDPA evaluates densely).

MFU = model FLOPs per second / the GPU's peak dense bf16 rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (SXM parts), TFLOP/s.
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "H800": 989.4, "A100": 312.0, "L40S": 362.1}


@dataclass(frozen=True)
class Attention:
    layers: int
    width: int  # heads x head dim


def matmul_weights(module: nn.Module, trainable: bool | None = None) -> int:
    """Weights of the Linear layers under `module`; LoRA's own layers only with trainable=True.

    trainable None: the backbone's Linear weights (LoRA excluded), whatever their requires_grad.
    """
    total = 0
    for name, layer in module.named_modules():
        if not isinstance(layer, nn.Linear):
            continue
        is_lora = ".lora_" in f".{name}"
        if (trainable and is_lora) or (trainable is None and not is_lora):
            total += layer.weight.numel()
    return total


def forward_flops(weights: int, tokens: int, attention: Attention | None = None) -> float:
    """2 N T for the products, 4 L T^2 D for attention (T queries over T keys)."""
    flops = 2.0 * weights * tokens
    if attention is not None:
        flops += 4.0 * attention.layers * tokens * tokens * attention.width
    return flops


def training_flops(
    frozen_weights: int, lora_weights: int, tokens: int, attention: Attention | None
) -> float:
    """Forward + backward of a frozen backbone adapted with LoRA, over one sample of `tokens`."""
    products = 2.0 * frozen_weights * tokens
    lora = 2.0 * lora_weights * tokens
    attn = 0.0 if attention is None else 4.0 * attention.layers * tokens**2 * attention.width
    return 2 * products + 3 * lora + 3 * attn


def peak_tflops(device_name: str) -> float | None:
    """The datasheet bf16 peak of a GPU named like 'NVIDIA H100 80GB HBM3', or None."""
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in device_name.upper():
            return value
    return None


def mfu(flops_per_step: float, seconds_per_step: float, peak: float | None) -> float | None:
    if not peak or seconds_per_step <= 0:
        return None
    return flops_per_step / seconds_per_step / (peak * 1e12)
