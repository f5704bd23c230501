"""Which torch device a setting names: the one rule for 'auto' and for a missing CUDA device,
shared by motion (MemFlow), transition detection (TransNetV2), the caption engine, the trainer,
evaluation and the benchmarks.

A stage resolves 'auto' when it is built (`resolve_device`) and declares its resources from the
resolved device, so a stage that takes a GPU has reserved one (on a Ray cluster the reservation
is what places it). A stage object shipped to a Ray actor (captioning) keeps the resolved name.
Segment tasks build their stages again in the worker, where the same rule gives the same answer:
Ray and the process pool hide every GPU from a task that reserved none (CUDA_VISIBLE_DEVICES is
empty there), so 'auto' is the CPU inside it.
"""

from __future__ import annotations


class DeviceError(ValueError):
    pass


def cuda_available() -> bool:
    import torch  # here, so that importing core never loads torch

    return bool(torch.cuda.is_available())


def resolve_device(setting: str, local_rank: int | None = None) -> str:
    """'auto' is CUDA where torch sees it (device `local_rank` when given), else the CPU; any other
    setting is returned as it is (checked when the device is taken, by `pick_device`)."""
    if setting != "auto":
        return setting
    if not cuda_available():
        return "cpu"
    return "cuda" if local_rank is None else f"cuda:{local_rank}"


def uses_cuda(setting: str) -> bool:
    """Whether work set to `setting` runs on a GPU, so its resources must reserve one."""
    return resolve_device(setting).startswith("cuda")


def pick_device(setting: str, setting_name: str, local_rank: int | None = None) -> str:
    """The device to take now: `resolve_device`, and a CUDA setting on a machine without CUDA is
    an error naming the setting, not a crash later."""
    device = resolve_device(setting, local_rank)
    if device.startswith("cuda") and not cuda_available():
        raise DeviceError(f"{setting_name}={setting!r}: torch sees no CUDA device on this machine")
    return device
