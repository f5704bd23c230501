"""The two stage contracts: frame-level stages see each decoded frame of a segment in order,
clip-level stages see each finished clip.

A frame-level stage (`FrameStage`: scene detection, clip splitting) takes `process(frame)` for
every frame and `finish(end)` once after the last, and returns what it found on the way (cuts,
clips, drops). Frames reach it as `Frame` objects whose pixels are converted only when asked for.

A clip-level stage (`ClipStage`) is described below.

A clip stage is an object built from its settings section that must define one method,
`process(clip) -> clip`, which fills fields of the clip. The rest are optional hooks with
defaults: `setup()` runs once per worker before the first clip (load a model there, not in
`__init__`, so that a stage object stays cheap to build, copy and ship to a worker);
`process_batch` serves a stage that works better on batches (a model server); `take_stats()`
hands the executor the stage's counts since the last call (captioning counts requests).
`resources` (core.resources.Resources) is data the executor reads to place the stage; stage code
never imports Ray.

Clip stages that run while a clip's pixels are in memory (during cutting) are registered, not
listed: a stage module declares

    @register_clip_stage("name", section="its_settings_section", order=50)
    def build(settings: ItsConfig) -> ClipStage | None:  # None: switched off by its settings
        return ItsStage(settings)

and `build_clip_stages(config)` finds it (every module of the `stages` package is imported once),
so adding a clip stage is one new file plus its test. `order` places it: motion is 10 (it needs
the frames), encode is 100 (last: it releases the frames). The settings section is a
`core.settings.Settings` dataclass composed into `pipeline.config.PipelineConfig`.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from core.record import Clip
from core.resources import Resources


@dataclass
class Frame:
    """One decoded source frame. `small()` is the cropped picture at detection size in BGR (what
    PySceneDetect expects); `planes()` is the whole upright picture as its Y, U, V planes (yuv420p,
    8-bit, limited range; views of the decoder's own buffers where the source allows), which clip
    splitting crops and scales into I420 without going through RGB (core/frames.py). Each is
    computed when called, so a stage that never asks never pays. `starts_scene` is known once
    scene detection has settled the frame (its lag has passed)."""

    index: int
    small: Callable[[], np.ndarray]
    planes: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]
    starts_scene: bool = False


Found = TypeVar("Found")


class FrameStage(Protocol[Found]):
    def process(self, frame: Frame) -> list[Found]:
        """Take the next frame; return what it completes."""
        ...

    def finish(self, end: int) -> list[Found]:
        """No frame at or after `end` (exclusive) will come: return what is still held."""
        ...


class ClipStage(ABC):
    name: str = "stage"
    resources: Resources = Resources()

    def setup(self) -> None:  # noqa: B027 - optional hook, not every stage loads state
        """Load heavy state once per worker. The default has nothing to load."""

    @abstractmethod
    def process(self, clip: Clip) -> Clip:
        """Fill this stage's fields of `clip` and return it."""

    def process_batch(self, clips: list[Clip]) -> list[Clip]:
        """Run `process` on each clip; one clip's failure is recorded on it, never lost."""
        return [self.process_safely(clip) for clip in clips]

    def process_safely(self, clip: Clip) -> Clip:
        try:
            return self.process(clip)
        except Exception as exc:  # a bad clip must not take its film down with it
            clip.fail(self.name, f"{type(exc).__name__}: {exc}")
            return clip

    def take_stats(self) -> Counter[str]:
        """Counts since the last call (the executor sums them over replicas, per film). The
        default has nothing to count."""
        return Counter()


@dataclass(frozen=True)
class ClipStageEntry:
    name: str
    section: str  # the configuration section its settings live in
    order: int  # stages run in increasing order
    build: Callable[[Any], ClipStage | None]


_CLIP_STAGES: dict[str, ClipStageEntry] = {}

BuildFn = Callable[[Any], ClipStage | None]


def register_clip_stage(name: str, section: str, order: int) -> Callable[[BuildFn], BuildFn]:
    """Declare a clip stage built from the `section` settings (see the module docstring)."""

    def register(build: BuildFn) -> BuildFn:
        known = _CLIP_STAGES.get(name)
        if known is not None and known.build.__module__ != build.__module__:
            raise ValueError(f"clip stage {name!r} is registered twice")
        _CLIP_STAGES[name] = ClipStageEntry(name, section, order, build)
        return build

    return register


def registered_clip_stages() -> list[ClipStageEntry]:
    """Every registered clip stage, in running order."""
    _import_stage_modules()
    return sorted(_CLIP_STAGES.values(), key=lambda entry: (entry.order, entry.name))


def build_clip_stages(config: Any) -> list[ClipStage]:
    """The clip stages `config` (a PipelineConfig) switches on, in running order. Building a
    stage checks its settings and loads nothing (models load in `setup`)."""
    stages = []
    for entry in registered_clip_stages():
        stage = entry.build(getattr(config, entry.section))
        if stage is not None:
            stages.append(stage)
    return stages


def _import_stage_modules() -> None:
    """Import every module of the `stages` package once, which runs their registrations."""
    import stages

    for module in pkgutil.iter_modules(stages.__path__):
        importlib.import_module(f"stages.{module.name}")
