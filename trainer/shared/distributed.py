"""One process or many under torchrun: the same code. NCCL on GPUs, gloo on CPUs."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from core.device import pick_device


@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device_setting: str = "auto") -> Dist:
    """Read torchrun's environment; start the process group when there is more than one rank."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(pick_device(device_setting, "device", local_rank))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend)
    return Dist(rank, world, local_rank, device)


def pick_dtype(setting: str, device: torch.device) -> torch.dtype:
    if setting == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    # no fp16: it would need loss scaling, which the loop does not do; bf16 does not
    names = {
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp32": torch.float32,
        "float32": torch.float32,
    }
    if setting not in names:
        raise ValueError(f"dtype={setting!r}: use auto, bf16 or fp32")
    return names[setting]


def mean_across_ranks(value: torch.Tensor) -> float:
    value = value.detach().float().clone()
    if dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= dist.get_world_size()
    return value.item()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
