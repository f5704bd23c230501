"""The quality tests' shared material (a pytest plugin named in conftest.py): frames of the
sample film, synthetic films written from them, a measured clip and its decision."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from conftest import SINTEL

from core.record import Clip
from core.video import FrameReader
from stages.probe import Probe
from stages.quality import (
    QualityStage,
    RejectConfig,
    decide,
)

THRESHOLDS = RejectConfig()


# ------------------------------------------------------------------ helpers


def sintel_frames(indices: list[int]) -> dict[int, np.ndarray]:
    """Frames of the sample film, letterbox removed, as 480x720 RGB. Each is decoded from the key
    frame before it (the pipeline's FrameReader), not from the film's start, skipping the frames
    no other frame refers to (`only`: the same pixels, 0.38 CPU-s instead of 0.54)."""
    frame_pts, found = Probe().process(SINTEL).frame_pts, {}
    for index in indices:
        reader = FrameReader(str(SINTEL), frame_pts, threads=1)
        for _, frame in reader.frames(index, index + 1, {index}):
            picture = frame.to_ndarray(format="rgb24")[58:422]
            found[index] = cv2.resize(picture, (720, 480), interpolation=cv2.INTER_AREA)
    return found


def write_film(path: Path, shots, size=(240, 360), fps=24, crf=18, gain=1.0, offset=0.0) -> Path:
    """A film of `shots`: (picture, frames) pairs; each picture pans 1 px a frame. The whole film
    can be brightened (`gain`, `offset`) and encoded at any size and quality."""
    height, width = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "ultrafast", "g": "24"}
        for picture, count in shots:
            small = cv2.resize(picture, (width, height), interpolation=cv2.INTER_AREA)
            for k in range(count):
                frame = np.roll(small, k, axis=1).astype(np.float32) * gain + offset
                image = np.clip(frame, 0, 255).astype(np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def judged(clip: Clip) -> tuple[bool, list[str]]:
    """(usable, reject_reasons) of a measured clip: the stage measures, `decide` decides."""
    return decide(clip.to_row(), THRESHOLDS)


@pytest.fixture(scope="module")
def quality_stage() -> QualityStage:
    stage = QualityStage()
    stage.setup()
    return stage


@pytest.fixture(scope="module")
def shots() -> dict[int, np.ndarray]:
    return sintel_frames([150, 580, 700, 850, 940])
