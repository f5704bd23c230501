"""The text detector every text measure runs (issue 13, issue 28): PP-OCRv4's detection network
(a DB network, ONNX, CPU) through onnxruntime, one thread, detection only. The quality stage's
text area, the overlay pass's subtitle bands and a clip's edge text all read its map.

The model ships inside the rapidocr-onnxruntime package (found with importlib, no download), or
is a file the user names (`quality.text_model`)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

TEXT_MODEL_PACKAGE = "rapidocr_onnxruntime"
TEXT_MODEL_FILE = "models/ch_PP-OCRv4_det_infer.onnx"


class TextModelError(ValueError):
    """The text detection model cannot be found."""


class TextDetector:
    """PP-OCRv4 text detection (a DB network) through onnxruntime, one thread, detection only.

    `areas(frames)` gives, per RGB frame, the share of its pixels whose text probability exceeds
    the threshold. The frames of a call go through the network as one batch.
    """

    def __init__(self, model: str | None, width: int, probability: float, aspect: float = 1.5):
        self.path = resolve_text_model(model)
        self.width = _multiple_of_32(width)
        self.height = _multiple_of_32(width / aspect)
        self.threshold = probability
        self.name = f"ppocrv4-det:{self.path.stem}@{self.height}x{self.width}:p{probability:g}"
        self._session: Any = None

    def load(self) -> None:
        self._session = _session(str(self.path))

    def areas(self, frames: Sequence[np.ndarray]) -> list[float]:
        return [float(mask.mean()) for mask in self.masks(frames)]

    def masks(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per RGB frame, its text pixels (bool, height x width of the detector's size)."""
        batch = np.stack([self._input(f, (self.width, self.height)) for f in frames])
        return [p[0] > self.threshold for p in self._run(batch)]

    def grey_map(self, grey: np.ndarray) -> np.ndarray:
        """The text probability map of one grey picture at its own size (height and width
        multiples of 32): the overlay pass's zones and bands. The network's input is the grey
        plane as its three channels: the input `_input` makes from the grey picture repeated in
        three channels (the same values: the channels' order does not matter and the size is
        kept), without making and converting that picture (2.7 ms of a 23-36 ms call on a
        96x672 zone)."""
        plane = _to_model_range(grey)
        return self._run(np.ascontiguousarray(np.broadcast_to(plane, (1, 3, *plane.shape))))[0, 0]

    def _run(self, batch: np.ndarray) -> np.ndarray:
        if self._session is None:
            self.load()
        [probability] = self._session.run(None, {self._session.get_inputs()[0].name: batch})
        return probability

    @staticmethod
    def _input(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        # PP-OCR models are trained on BGR scaled to [-1, 1], channels first
        shrinking = size[0] * size[1] < frame.shape[0] * frame.shape[1]
        interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
        small = cv2.resize(frame, size, interpolation=interpolation)
        return np.ascontiguousarray(_to_model_range(small[..., ::-1]).transpose(2, 0, 1))


def _to_model_range(pixels: np.ndarray) -> np.ndarray:
    """8-bit pixels scaled to [-1, 1] as float32, the range PP-OCR's detector was trained on."""
    return pixels.astype(np.float32) / 127.5 - 1.0


@functools.cache
def _session(path: str):
    """One inference session per model file and process: building one takes about half a
    second, and a worker process runs many segments, each with its own stage objects."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # one pipeline worker per core already: the detector's own threads would oversubscribe
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def resolve_text_model(model: str | None) -> Path:
    if model:
        path = Path(model)
        if not path.is_file():
            raise TextModelError(f"quality.text_model={model}: no such file")
        return path
    spec = importlib.util.find_spec(TEXT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise TextModelError(
            "quality.text_model is not set and the rapidocr-onnxruntime package, which ships the "
            "PP-OCRv4 detection model, is not installed: install it (requirements.lock) or set "
            "quality.text_model to a ch_PP-OCRv4_det_infer.onnx file"
        )
    path = Path(spec.origin).parent / TEXT_MODEL_FILE
    if not path.is_file():
        raise TextModelError(
            f"{path}: the text detection model is missing from rapidocr-onnxruntime"
        )
    return path


def _multiple_of_32(value: float) -> int:
    return max(32, int(round(value / 32)) * 32)
