"""The one device rule (core/device.py) that motion, the caption engine, the trainer, evaluation
and the benchmarks share, and the GPU reservations that follow from it."""

from __future__ import annotations

import pytest
import torch

from core.device import DeviceError, pick_device, resolve_device, uses_cuda
from core.resources import Resources
from stages.captioning.stage import CaptionConfig, CaptionStage
from stages.motion import MotionConfig, MotionScope

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


@pytest.fixture
def cuda_machine(monkeypatch):
    """A machine where torch sees CUDA: only the hardware probe is replaced, every rule is real."""
    monkeypatch.setattr("core.device.cuda_available", lambda: True)


def test_auto_resolves_once_to_what_torch_sees(cuda_machine):
    assert resolve_device("auto") == "cuda" and uses_cuda("auto")
    assert resolve_device("auto", local_rank=2) == "cuda:2"
    assert resolve_device("cpu") == "cpu" and not uses_cuda("cpu")


def test_a_caption_engine_on_auto_reserves_the_gpu_it_takes(cuda_machine):
    """The transformers engine on 'auto' takes CUDA where torch sees it: its replica reserves a
    GPU for it, and the engine is handed the resolved device, never 'auto' again."""
    stage = CaptionStage(CaptionConfig(model="/models/internvl-hf", device="auto"))
    assert stage.resources == Resources(cpus=1.0, gpus=1.0)
    assert stage.config.device == "cuda"
    on_cpu = CaptionStage(CaptionConfig(model="/models/internvl-hf", device="cpu"))
    assert on_cpu.resources.gpus == 0.0 and on_cpu.config.device == "cpu"


def test_a_caption_engine_on_auto_without_cuda_reserves_none_and_takes_the_cpu(monkeypatch):
    monkeypatch.setattr("core.device.cuda_available", lambda: False)
    stage = CaptionStage(CaptionConfig(model="/models/internvl-hf", device="auto"))
    assert stage.resources.gpus == 0.0 and stage.config.device == "cpu"


def test_memflow_on_auto_reserves_the_gpu_it_takes(cuda_machine):
    config = MotionConfig(backend="memflow", memflow_device="auto", memflow_random_weights=True)
    stage = MotionScope(config)
    assert stage.resources.gpus == 1.0
    assert stage.backend.device_name == "cuda"
    assert MotionScope(MotionConfig()).resources.gpus == 0.0  # DIS is CPU-only


def test_a_segment_reserves_the_gpu_its_transition_detector_takes(cuda_machine):
    """TransNetV2 on 'auto' runs inside the segment task: the task reserves the GPU for it, and
    a refusal names it."""
    from conftest import local_config

    from pipeline.running.scheduler import segment_resources

    config = local_config(scenes__gradual="transnetv2", scenes__gradual_device="auto")
    declared = segment_resources(config)
    assert declared.resources.gpus == 1.0 and declared.gpu_stages == ("transitions",)
    assert segment_resources(local_config()).resources.gpus == 0.0
