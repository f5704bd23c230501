"""The one device rule (core/device.py) that motion, the caption engine and the trainer share."""

from __future__ import annotations

import pytest
import torch

from core.device import DeviceError, pick_device

HAS_CUDA = torch.cuda.is_available()


def test_auto_is_cuda_where_torch_sees_it_else_the_cpu():
    assert pick_device("auto", "x.device") == ("cuda" if HAS_CUDA else "cpu")
    assert pick_device("auto", "x.device", local_rank=1) == ("cuda:1" if HAS_CUDA else "cpu")


def test_a_named_device_is_kept():
    assert pick_device("cpu", "x.device") == "cpu"


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_an_error_naming_the_setting():
    with pytest.raises(DeviceError, match=r"caption\.device='cuda:1': torch sees no CUDA"):
        pick_device("cuda:1", "caption.device")
