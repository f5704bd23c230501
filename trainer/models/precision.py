"""Whole backbone modules that train (adaLN modulation, embeddings, norms) keep fp32 weights.

A frozen backbone runs in bf16 on a GPU, but AdamW steps of 2e-4 or 5e-5 vanish below bf16's
precision on weights near 1, so a module that trains in full is kept in fp32 (as LoRA weights are)
and meets its bf16 neighbours through casts at its edges: inputs to fp32, outputs back to the
backbone's dtype. Under autocast the casts are harmless; without it (play) they keep the dtypes
of the surrounding layers as they were.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def train_in_fp32(module: nn.Module) -> nn.Module:
    """Make every weight of `module` trainable and fp32; its floating inputs are cast to fp32 and
    its output to the dtype its weights had (the backbone's), so its neighbours see no change."""
    weights = list(module.parameters())
    if not weights:
        return module
    dtype = weights[0].dtype
    module.float().requires_grad_(True)
    if dtype != torch.float32:
        module.register_forward_pre_hook(_inputs_to_fp32)
        module.register_forward_hook(lambda _module, _args, output: _cast(output, dtype))
    return module


def _inputs_to_fp32(_module: nn.Module, args: tuple) -> tuple:
    return tuple(_cast(a, torch.float32) for a in args)


def _cast(value, dtype: torch.dtype):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    return value
