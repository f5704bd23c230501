"""Motion scope of a clip (issue 3): optical flow, background filtered, one number and a level.

The rule (docs/motion.md has the reasons and the measurements):
1. Flow between consecutive frames (15 pairs for 16 frames), expressed in pixels of a 480x720
   frame whatever size it was computed at, so scopes compare across films and backends.
2. Held pairs (the same drawing twice, common in anime) are found from the pixels, not the flow,
   and left out: they say how often the animators drew, not how far things move.
3. Each remaining pair: speed = |flow| per pixel; background = pixels slower than r = 0.2 times
   the pair's 99th-percentile speed; the pair's value is the mean speed of the rest.
4. Motion scope = mean of the pair values (0.0 when every pair is held: a still shot).
The level comes from versioned edges (stages/motion_levels/); the raw scope, the level, the
backend (with the rule's parameters) and the edges' version are stored with every clip.
"""

from __future__ import annotations

import contextlib
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow as pa

from core.device import DeviceError, pick_device, resolve_device, uses_cuda
from core.frames import ClipFrames, resize
from core.record import Clip
from core.resources import Resources
from core.settings import Settings, check_choice
from stages.base import ClipStage, register_clip_stage
from stages.motion_levels import DEFAULT_LEVELS, MotionLevels, load_levels

UNIT_HEIGHT, UNIT_WIDTH = 480, 720  # the unit every scope is expressed in (the paper's clip size)
HELD_CHECK_SIZE = (120, 180)  # (h, w) the held-drawing test looks at: small enough to blur noise

BACKENDS = ("dis", "memflow")
MEMFLOW_MIN_SIDE = 128
DIS_PRESETS = {
    "ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}


@dataclass
class MotionConfig(Settings):
    enabled: bool = True
    """Measure motion scope while clips are cut (the frames are already in memory)."""
    backend: str = "dis"
    """Optical flow: 'dis' (OpenCV DIS, CPU, no weights) or 'memflow' (ptlflow MemFlow, GPU where
    present, needs memflow_checkpoint)."""
    level_edges: str = DEFAULT_LEVELS
    """Level edges: a name in stages/motion_levels/ or a path to a JSON file (see motion-calibrate)."""
    background_ratio: float = 0.2
    """r: pixels slower than r x the pair's reference speed are background (the paper's r = 0.2)."""
    reference_percentile: float = 99.0
    """Percentile of a pair's speeds used as its reference speed (robust stand-in for the maximum)."""
    held_pixel_delta: float = 8.0
    """A pixel changed between two frames when its grey level (0-255, at 120x180) moved more
    than this."""
    held_max_fraction: float = 0.002
    """A pair is a held drawing when at most this fraction of pixels changed (negative: never)."""
    dis_preset: str = "ultrafast"
    """OpenCV DIS preset: ultrafast, fast or medium."""
    dis_scale: float = 0.25
    """DIS works on frames resized to this fraction of 480x720 (flow is scaled back to 480x720)."""
    dis_patch_stride: int = 8
    """DIS patch stride in pixels at the working size; 0 keeps the preset's own."""
    memflow_model: str = "memflow"
    """ptlflow model name: memflow or memflow_t."""
    memflow_checkpoint: str | None = None
    """Path to a MemFlow checkpoint file (ptlflow format); required with backend 'memflow'."""
    memflow_device: str = "auto"
    """'auto' (CUDA when available), 'cuda', 'cuda:N' or 'cpu'."""
    memflow_scale: float = 1.0
    """MemFlow works on frames resized to this fraction of 480x720."""
    memflow_random_weights: bool = False
    """TEST ONLY: build MemFlow with random weights instead of a checkpoint (exercises the code
    path; the scopes it gives are meaningless)."""

    def validate(self) -> None:
        check_choice("motion", "backend", self.backend, BACKENDS)
        check_choice("motion", "dis_preset", self.dis_preset, DIS_PRESETS)


class MotionError(ValueError):
    """A clip cannot be measured, or the motion configuration is unusable."""


# ----------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class MotionMeasurement:
    scope: float
    moving_pairs: int
    held_pairs: int


def grey_frames(frames: ClipFrames | np.ndarray, size: tuple[int, int]) -> list[np.ndarray]:
    """Full-range grey frames at `size` (h, w), from the clip's luma (or RGB) without RGB."""
    return _checked_frames(frames).grey(size)


def held_pairs(small_grey: list[np.ndarray], pixel_delta: float, max_fraction: float) -> list[bool]:
    """For each consecutive pair of small grey frames: is it the same drawing?

    Judged at HELD_CHECK_SIZE, where shrinking averages compression noise away but a real
    movement of a pixel or more still changes many pixels by far more than `pixel_delta`.
    """
    return [
        is_held(a, b, pixel_delta, max_fraction) for a, b in zip(small_grey[:-1], small_grey[1:])
    ]


def is_held(
    a: np.ndarray, b: np.ndarray, pixel_delta: float, max_fraction: float, relight: bool = True
) -> bool:
    """Two small grey frames show the same drawing: at most `max_fraction` of the pixels moved by
    more than `pixel_delta` grey levels, once `b` has `a`'s brightness (`relight`: the motion
    stage's held pairs, so that a fade is no motion). The cut detector (stages/scenes/) asks
    without `relight`: brought to a black frame's brightness, any picture is black, and the cut
    out of black would read as a held drawing."""
    changed = cv2.absdiff(a, match_brightness(b, a) if relight else b) > pixel_delta
    return int(np.count_nonzero(changed)) <= max_fraction * changed.size


def match_brightness(frame: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """`frame` with the mean and contrast (standard deviation) of `reference`.

    A fade or a flicker changes every grey level between two frames; neither the held test nor
    DIS flow (which matches brightness patterns) may read that as motion, so the second frame of
    each pair is brought to the first's brightness before either looks at it. Between frames of
    equal brightness this changes nothing but rounding."""
    mean_f, std_f = cv2.meanStdDev(frame)
    mean_r, std_r = cv2.meanStdDev(reference)
    gain = float(std_r[0, 0] / std_f[0, 0]) if std_f[0, 0] >= 1.0 else 1.0
    offset = float(mean_r[0, 0]) - gain * float(mean_f[0, 0])
    return np.clip(frame.astype(np.float32) * gain + offset + 0.5, 0, 255).astype(np.uint8)


def pair_scope(speed: np.ndarray, background_ratio: float, reference_percentile: float) -> float:
    """Mean speed of the pixels that move at least r x the pair's reference speed."""
    if not np.isfinite(speed).all():
        raise MotionError("the flow backend returned non-finite values (NaN or inf)")
    reference = float(np.percentile(speed, reference_percentile))
    if reference <= 0.0:
        return 0.0
    moving = speed[speed >= background_ratio * reference]
    return float(moving.mean())


@dataclass(frozen=True)
class PairFlows:
    """A clip's flow as the motion stage measured it, kept on its frames (`ClipFrames.memo`) for
    camera motion (stages/scoring/camera.py), which fits the same flow instead of measuring it again.

    `held[i]`: pair (i, i + 1) is a held drawing; `flows[i]`: the (x, y) flow of each moving pair,
    in pixels of a 480x720 frame, as fields of the backend's working `size` (h, w); `source`: the
    backend and the held test's parameters that measured them."""

    source: str
    size: tuple[int, int]
    held: list[bool]
    flows: dict[int, tuple[np.ndarray, np.ndarray]]


FLOW_MEMO = "motion.pair_flows"  # the key of a clip's PairFlows in `ClipFrames.memo`


def pair_flows(frames: ClipFrames | np.ndarray, backend, config: MotionConfig) -> PairFlows:
    """The held pairs and the flow of the moving pairs of N >= 2 frames, measured once per clip:
    the first stage to ask measures with its backend and keeps the result on the frames."""
    frames = _checked_frames(frames)
    source = f"{backend.name}/held{config.held_pixel_delta:g}:{config.held_max_fraction:g}"
    known = frames.memo.get(FLOW_MEMO)
    if isinstance(known, PairFlows) and known.source == source:
        return known
    small_grey = frames.grey(HELD_CHECK_SIZE)
    held = held_pairs(small_grey, config.held_pixel_delta, config.held_max_fraction)
    moving = [i for i, is_held in enumerate(held) if not is_held]
    flows = dict(zip(moving, backend.flows(frames, moving)))
    measured = PairFlows(source, backend.size, held, flows)
    frames.memo[FLOW_MEMO] = measured
    return measured


def measure_motion(
    frames: ClipFrames | np.ndarray, backend, config: MotionConfig
) -> MotionMeasurement:
    """Motion scope of N >= 2 frames (`ClipFrames` or RGB, any size) with a flow backend (see
    DisFlow)."""
    measured = pair_flows(frames, backend, config)
    held, moving = measured.held, list(measured.flows)
    if not moving:
        return MotionMeasurement(scope=0.0, moving_pairs=0, held_pairs=len(held))
    values = [
        pair_scope(np.hypot(flow_x, flow_y), config.background_ratio, config.reference_percentile)
        for flow_x, flow_y in measured.flows.values()
    ]
    return MotionMeasurement(
        scope=float(np.mean(values)), moving_pairs=len(moving), held_pairs=len(held) - len(moving)
    )


def rule_descriptor(config: MotionConfig) -> str:
    return (
        f"r{config.background_ratio:g}/p{config.reference_percentile:g}"
        f"/held{config.held_pixel_delta:g}:{config.held_max_fraction:g}/bm"
    )


def _checked_frames(frames) -> ClipFrames:
    if not isinstance(frames, ClipFrames):
        rgb = np.asarray(frames)
        if rgb.ndim != 4 or rgb.shape[-1] != 3 or rgb.dtype != np.uint8 or len(rgb) < 2:
            raise MotionError(
                f"motion needs N >= 2 frames of H x W x 3 uint8 RGB, got {rgb.shape} {rgb.dtype}"
            )
        frames = ClipFrames.from_rgb(rgb)
    if len(frames) < 2:
        raise MotionError(f"motion needs N >= 2 frames, got {len(frames)}")
    return frames


def working_size(scale: float) -> tuple[int, int]:
    if not 0 < scale <= 1:
        raise MotionError(f"flow scale must be in (0, 1], got {scale}")
    return max(8, round(UNIT_HEIGHT * scale)), max(8, round(UNIT_WIDTH * scale))


def in_unit_pixels(
    flow_x: np.ndarray, flow_y: np.ndarray, size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """A flow measured at `size`, converted to pixels of a 480x720 frame."""
    height, width = size
    return flow_x * (UNIT_WIDTH / width), flow_y * (UNIT_HEIGHT / height)


def speeds_of(flows):
    """|flow| of each (x, y) flow field."""
    for flow_x, flow_y in flows:
        yield np.hypot(flow_x, flow_y)


# ----------------------------------------------------------------------------- backends


class DisFlow:
    """OpenCV DIS optical flow on small grey frames: the CPU default (no weights).

    The finest pyramid level is the working size itself: we already shrank the frames, so a
    coarser finest level would only throw resolution away again. A patch stride equal to the
    patch size (8) keeps the cost near 2 ms per pair while small objects stay resolved.
    """

    uses_gpu = False

    def __init__(self, preset: str = "ultrafast", scale: float = 0.25, patch_stride: int = 8):
        if preset not in DIS_PRESETS:
            raise MotionError(f"motion.dis_preset={preset!r}: choose one of {sorted(DIS_PRESETS)}")
        self.preset, self.size, self.patch_stride = preset, working_size(scale), patch_stride
        stride = f":stride{patch_stride}" if patch_stride else ""
        self.name = f"opencv-dis:{preset}{stride}@{self.size[0]}x{self.size[1]}"
        self._dis: Any = None  # cv2.DISOpticalFlow, built in load()

    def load(self) -> None:
        dis = cv2.DISOpticalFlow.create(DIS_PRESETS[self.preset])
        dis.setFinestScale(0)
        if self.patch_stride:
            dis.setPatchStride(self.patch_stride)
        self._dis = dis

    def speeds(self, frames: ClipFrames | np.ndarray, pairs: list[int]):
        """Yield the speed map (480x720 pixel units) of each pair (i, i + 1) in `pairs`."""
        return speeds_of(self.flows(frames, pairs))

    def flows(self, frames: ClipFrames | np.ndarray, pairs: list[int]):
        """Yield the (x, y) flow (480x720 pixel units) of each pair (i, i + 1) in `pairs`.

        Grey frames at the working size come from `frames`, which computes each size once (the
        held-drawing test already asked for 120x180, the default working size).
        """
        if self._dis is None:
            self.load()
        grey = _checked_frames(frames).grey(self.size)
        for i in pairs:
            flow = self._dis.calc(grey[i], match_brightness(grey[i + 1], grey[i]), None)
            yield in_unit_pixels(flow[..., 0], flow[..., 1], self.size)


class MemFlowBackend:
    """MemFlow (Dong & Fu, CVPR 2024) through ptlflow: the paper's flow model, for GPU machines.

    Pairs of one clip run in order as one sequence, so MemFlow's memory of earlier motion and
    the warm start from the previous pair's flow work as the model was trained to use them.
    """

    def __init__(
        self,
        model: str = "memflow",
        checkpoint: str | None = None,
        device: str = "auto",
        scale: float = 1.0,
        random_weights: bool = False,
    ):
        if not random_weights:
            _check_checkpoint(checkpoint)
        self.model_name, self.checkpoint, self.device_name = model, checkpoint, device
        self.random_weights, self.size = random_weights, working_size(scale)
        if min(self.size) < MEMFLOW_MIN_SIDE:
            raise MotionError(
                f"motion.memflow_scale={scale} gives {self.size[0]}x{self.size[1]}: "
                f"MemFlow needs at least {MEMFLOW_MIN_SIDE} pixels a side (its 4-level "
                f"correlation pyramid at 1/8 resolution degenerates below that)"
            )
        weights = "random-weights-TEST-ONLY" if random_weights else Path(checkpoint or "").stem
        self.name = f"ptlflow-{model}:{weights}@{self.size[0]}x{self.size[1]}"
        self._model: Any = None  # the ptlflow model, built in load()
        self._device: Any = None  # its torch.device

    @property
    def uses_gpu(self) -> bool:
        return uses_cuda(self.device_name)

    def load(self) -> None:
        import torch

        from core.compat import import_ptlflow

        ptlflow = import_ptlflow()

        try:
            self._device = torch.device(pick_device(self.device_name, "motion.memflow_device"))
        except DeviceError as exc:
            raise MotionError(str(exc)) from None
        checkpoint = None if self.random_weights else str(self.checkpoint)
        try:
            # MemFlow prints its layer choices and a train_avg_length warning that a checkpoint
            # then overrides: keep the pipeline's output readable.
            with contextlib.redirect_stdout(io.StringIO()):
                model = ptlflow.get_model(self.model_name, ckpt_path=checkpoint)
        except (RuntimeError, KeyError, ValueError, EOFError, pickle.UnpicklingError) as exc:
            raise MotionError(
                f"{checkpoint or self.model_name}: cannot build {self.model_name} "
                f"from it ({type(exc).__name__}: {exc})"
            ) from None
        self._model = model.to(self._device).eval()

    def speeds(self, frames: ClipFrames | np.ndarray, pairs: list[int]):
        return speeds_of(self.flows(frames, pairs))

    def flows(self, frames: ClipFrames | np.ndarray, pairs: list[int]):
        if self._model is None:
            self.load()
        import torch

        rgb = _checked_frames(frames).rgb()
        with torch.inference_mode():
            previous = None
            for n, i in enumerate(pairs):
                inputs = {
                    "images": self._tensor(rgb[i : i + 2]),
                    "meta": {"is_seq_start": n == 0, "is_seq_end": n == len(pairs) - 1},
                }
                if previous is not None and pairs[n - 1] == i - 1:
                    inputs["prev_preds"] = {
                        "flow_small": previous
                    }  # warm start: adjacent pairs only
                outputs = self._model(inputs)
                previous = outputs["flow_small"]
                flow = outputs["flows"][0, 0].float().cpu().numpy()
                yield in_unit_pixels(flow[0], flow[1], self.size)

    def _tensor(self, pair: np.ndarray):
        import torch

        # ptlflow models take BGR in [0, 1], shaped batch x frames x 3 x H x W.
        resized = np.stack([resize(f, self.size)[..., ::-1] for f in pair])
        tensor = torch.from_numpy(np.ascontiguousarray(resized)).permute(0, 3, 1, 2)
        return (tensor.float() / 255.0)[None].to(self._device)


def _check_checkpoint(checkpoint: str | None) -> None:
    # ptlflow would treat a bare name such as 'things' as a URL to download: we only take files.
    if not checkpoint:
        raise MotionError(
            "motion.backend=memflow needs motion.memflow_checkpoint: the path to a "
            "MemFlow checkpoint file (for example memflow-things-90d0b74c.ckpt from "
            "ptlflow's release page); weights are never downloaded at run time"
        )
    if not Path(checkpoint).is_file():
        raise MotionError(f"motion.memflow_checkpoint={checkpoint}: no such file")


def make_backend(config: MotionConfig):
    """The flow backend the settings name; MemFlow's 'auto' device is resolved here, once, so
    that the GPU the stage reserves and the device MemFlow takes are one decision."""
    if config.backend == "dis":
        return DisFlow(config.dis_preset, config.dis_scale, config.dis_patch_stride)
    if config.backend == "memflow":
        return MemFlowBackend(
            config.memflow_model,
            config.memflow_checkpoint,
            resolve_device(config.memflow_device),
            config.memflow_scale,
            config.memflow_random_weights,
        )
    raise MotionError(f"motion.backend={config.backend!r}: choose one of {list(BACKENDS)}")


# ----------------------------------------------------------------------------- the stage


class MotionScope(ClipStage):
    """Fills motion_scope, motion_level, motion_backend and motion_levels_version of a clip.

    Needs `clip.frames` (the 16 in-memory frames; DIS reads small grey frames made from their
    luma, MemFlow their RGB), so it runs where clips are cut, before
    the frames are dropped. Build it from `config.motion`; `setup()` loads the backend once per
    worker (it also runs on the first `process` call if nobody called it).
    """

    name = "motion"

    def __init__(self, config: MotionConfig | None = None):
        self.config = config or MotionConfig()
        self.backend = make_backend(self.config)  # cheap: checks settings, loads nothing
        self.resources = Resources(cpus=1.0, gpus=1.0 if self.backend.uses_gpu else 0.0)
        self.levels: MotionLevels | None = None

    def setup(self) -> None:
        cv2.setNumThreads(
            1
        )  # one worker per core already: OpenCV's own threads would oversubscribe
        self.levels = load_levels(self.config.level_edges)
        self.backend.load()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise MotionError(
                f"clip {clip.clip_id}: motion needs the in-memory frames "
                f"(clip.frames is None); run the motion stage before frames are dropped"
            )
        if self.levels is None:
            self.setup()
        levels = self.levels
        assert levels is not None  # setup() loaded them or raised
        measured = self.measure(clip.frames)
        clip.motion_scope = measured.scope
        clip.motion_level = levels.level(measured.scope)
        clip.motion_backend = self.backend_descriptor
        clip.motion_levels_version = levels.version
        return clip

    def measure(self, frames: ClipFrames | np.ndarray) -> MotionMeasurement:
        return measure_motion(frames, self.backend, self.config)

    @property
    def backend_descriptor(self) -> str:
        """What motion_backend stores: the flow backend and the rule's parameters."""
        return f"{self.backend.name};{rule_descriptor(self.config)}"


# What the stage fills (core/schema.py has the same fields; stages.base.clip_schema checks them).
MOTION_COLUMNS = (
    pa.field("motion_scope", pa.float64()),
    pa.field("motion_level", pa.int8()),
    pa.field("motion_backend", pa.string()),
    pa.field("motion_levels_version", pa.string()),
)


@register_clip_stage("motion", settings=MotionConfig, columns=MOTION_COLUMNS, order=10)
def motion_stage(settings: MotionConfig) -> ClipStage | None:
    """First: it measures the in-memory frames, which encoding releases."""
    return MotionScope(settings) if settings.enabled else None
