"""Which torch device a setting names: the one rule for 'auto' and for a missing CUDA device,
shared by motion (MemFlow), the caption engine and the trainer."""

from __future__ import annotations


class DeviceError(ValueError):
    pass


def pick_device(setting: str, setting_name: str, local_rank: int | None = None) -> str:
    """'auto' is CUDA where torch sees it (device `local_rank` when given), else the CPU; a CUDA
    setting on a machine without CUDA is an error naming the setting, not a crash later."""
    import torch  # here, so that importing core never loads torch

    has_cuda = torch.cuda.is_available()
    if setting == "auto":
        if not has_cuda:
            return "cpu"
        return "cuda" if local_rank is None else f"cuda:{local_rank}"
    if setting.startswith("cuda") and not has_cuda:
        raise DeviceError(f"{setting_name}={setting!r}: torch sees no CUDA device on this machine")
    return setting
