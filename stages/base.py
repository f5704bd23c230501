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
listed. A stage module declares everything the rest of the project needs to know about it:

    COLUMNS = (pa.field("sharpness", pa.float32()),)  # what it adds to a shard row

    @register_clip_stage("sharpness", settings=SharpnessConfig, columns=COLUMNS, order=60)
    def build(settings: SharpnessConfig) -> ClipStage | None:  # None: switched off
        return SharpnessStage(settings)

- `settings`: its `core.settings.Settings` section (named `section`, the stage's name unless
  given). `pipeline.data.config.PipelineConfig` composes every registered section it does not name
  itself, so the section is reachable from YAML, `--set sharpness.x=...`, IP manifests and
  `--help` with no other edit, and enters the fingerprint as the class declares
  (`Settings.content_fields`). A section PipelineConfig does name (`config.motion`) is checked
  to be of the declared class.
- `columns`: the Arrow fields it fills. `clip_schema()` is the shard schema with every declared
  column it lacks appended; a declared column the schema already has must have the declared
  type. A column without a `core.record.Clip` field lives in `clip.extra[name]`.
- `resources` (on the built stage): what a segment task reserves for it; the runner reserves
  the most any stage declares and names the stages that declare a GPU when none is free.

`build_clip_stages(config)` finds the registrations (every module of the `stages` package is
imported once), so adding a clip stage is one new file plus its test. `order` places it: motion
is 10 (it needs the frames), encode is 100 (last: it releases the frames). A stage registered
outside the `stages` package (a test) exists in that process only: run it with the local
executor.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import cv2
import numpy as np
import pyarrow as pa

from core.film import OverlayRecord
from core.record import Clip
from core.resources import Resources
from core.schema import CLIP_SCHEMA
from core.settings import Settings
from stages.scoring.scores import Score


@dataclass
class Frame:
    """One decoded source frame. `small()` is the cropped picture at detection size in BGR (what
    PySceneDetect expects); `planes()` is the whole upright picture as its Y, U, V planes (yuv420p,
    8-bit, limited range; views of the decoder's own buffers where the source allows), which clip
    splitting crops and scales into I420 without going through RGB (core/frames.py). Each is
    computed when called, so a stage that never asks never pays. `starts_scene` and
    `in_transition` (the frame is part of a fade or dissolve: no clip may hold it) are known once
    scene detection has settled the frame (its lag has passed), and so is `is_flash` (one bright
    frame inside a shot, stages/scenes/cuts.py SceneCuts: a clip shows the frame before it instead)."""

    index: int
    small: Callable[[], np.ndarray]
    planes: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]
    starts_scene: bool = False
    in_transition: bool = False
    is_flash: bool = False
    _grey: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def grey(self) -> np.ndarray:
        """`small()` in grey levels, converted once however many stages ask (cut, flash and
        black-run detection all do)."""
        if self._grey is None:
            self._grey = cv2.cvtColor(self.small(), cv2.COLOR_BGR2GRAY)
        return self._grey


Found = TypeVar("Found")


class FrameStage(Protocol[Found]):
    def process(self, frame: Frame) -> list[Found]:
        """Take the next frame; return what it completes."""
        ...

    def finish(self, end: int) -> list[Found]:
        """No frame at or after `end` (exclusive) will come: return what is still held."""
        ...


@dataclass(frozen=True)
class FilmContext:
    """What a film's prepare step found that a clip stage may need: the overlays of the film
    (stages/burned_in/overlays.py; None when that pass is off), how clips fit their window
    (`clips.resize`), and the text detector the film pass used (`quality.text_model` and
    `quality.text_pixel_probability`), so that a clip is looked at as its film was."""

    overlays: OverlayRecord | None = None
    resize: str = "center_crop"
    text_model: str | None = None
    text_probability: float = 0.3
    picture: tuple[int, int, int, int] | None = None  # the border crop (x, y, w, h), source pixels


class ClipStage(ABC):
    name: str = "stage"
    resources: Resources = Resources()

    def setup(self) -> None:  # noqa: B027 - optional hook, not every stage loads state
        """Load heavy state once per worker. The default has nothing to load."""

    def for_film(self, film: FilmContext) -> None:  # noqa: B027 - optional hook
        """Told, before a segment's first clip, what its film's prepare step found. The
        default needs nothing of it."""

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
    settings: type[Settings]  # that section's class
    columns: tuple[pa.Field, ...]  # the shard columns it fills
    order: int  # stages run in increasing order
    build: Callable[[Any], ClipStage | None]
    scores: tuple[Score, ...] = ()  # which of its columns people filter and threshold by


_CLIP_STAGES: dict[str, ClipStageEntry] = {}
_SCORES: dict[str, tuple[Score, ...]] = {}  # scores of passes that are no clip stage, by owner

BuildFn = Callable[[Any], ClipStage | None]


def register_clip_stage(
    name: str,
    *,
    settings: type[Settings],
    order: int,
    columns: Sequence[pa.Field] = (),
    section: str | None = None,
    scores: Sequence[Score] = (),
) -> Callable[[BuildFn], BuildFn]:
    """Declare a clip stage, its settings section, the columns it fills, the scores among them
    (stages/scoring/scores.py) and its place (see the module docstring)."""

    def register(build: BuildFn) -> BuildFn:
        known = _CLIP_STAGES.get(name)
        if known is not None and known.build.__module__ != build.__module__:
            raise ValueError(f"clip stage {name!r} is registered twice")
        entry = ClipStageEntry(
            name, section or name, settings, tuple(columns), order, build, tuple(scores)
        )
        undeclared = {s.column for s in scores} - {c.name for c in columns}
        if undeclared:
            raise ValueError(f"clip stage {name!r} scores columns it does not fill: {undeclared}")
        _check_against_others(entry)
        _CLIP_STAGES[name] = entry
        return build

    return register


def unregister_clip_stage(name: str) -> None:
    """Forget a stage registered at run time (a test's own stage)."""
    _CLIP_STAGES.pop(name, None)


def registered_clip_stages() -> list[ClipStageEntry]:
    """Every registered clip stage, in running order."""
    _import_stage_modules()
    return sorted(_CLIP_STAGES.values(), key=lambda entry: (entry.order, entry.name))


def register_scores(owner: str, scores: Sequence[Score]) -> None:
    """Declare the scores a pass that is no clip stage fills (a caption-match score, a folder
    pass's): call it at the import of a module of the `stages` package, as a registration."""
    _SCORES[owner] = tuple(scores)


def registered_scores() -> list[Score]:
    """Every declared score: the clip stages' in running order, then the other passes'."""
    scores = [score for entry in registered_clip_stages() for score in entry.scores]
    scores += [score for owner in sorted(_SCORES) for score in _SCORES[owner]]
    columns = [score.column for score in scores]
    if len(set(columns)) != len(columns):
        raise ValueError(f"a score column is declared twice: {sorted(columns)}")
    return scores


def registered_sections() -> dict[str, type[Settings]]:
    """The settings section of every registered clip stage, by section name."""
    return {entry.section: entry.settings for entry in registered_clip_stages()}


def build_clip_stages(config: Any) -> list[ClipStage]:
    """The clip stages `config` (a PipelineConfig) switches on, in running order. Building a
    stage checks its settings and loads nothing (models load in `setup`)."""
    stages = []
    for entry in registered_clip_stages():
        stage = entry.build(config.section(entry.section))
        if stage is not None:
            stages.append(stage)
    return stages


def clip_schema() -> pa.Schema:
    """The shard schema: `core.schema.CLIP_SCHEMA` with the columns registered stages add, in
    running order. A declared column the schema has already must have the declared type."""
    added = []
    for entry in registered_clip_stages():
        for column in entry.columns:
            if column.name not in CLIP_SCHEMA.names:
                added.append(column.with_nullable(True))  # clips cut before the stage have none
                continue
            known = CLIP_SCHEMA.field(column.name)
            if known.type != column.type:
                raise TypeError(
                    f"clip stage {entry.name!r} declares column {column.name} as {column.type}; "
                    f"the shard schema has it as {known.type}"
                )
    if not added:
        return CLIP_SCHEMA
    return pa.schema(list(CLIP_SCHEMA) + added, metadata=CLIP_SCHEMA.metadata)


def _check_against_others(entry: ClipStageEntry) -> None:
    """One column has one owner, and stages sharing a section share its settings class."""
    for other in _CLIP_STAGES.values():
        if other.name == entry.name:
            continue
        shared = {c.name for c in other.columns} & {c.name for c in entry.columns}
        if shared:
            raise ValueError(
                f"clip stage {entry.name!r} declares column(s) {sorted(shared)} that "
                f"{other.name!r} fills already"
            )
        if other.section == entry.section and other.settings is not entry.settings:
            raise ValueError(
                f"clip stage {entry.name!r} reads section {entry.section!r} as "
                f"{entry.settings.__name__}; {other.name!r} reads it as {other.settings.__name__}"
            )


def _import_stage_modules() -> None:
    """Import every module of the `stages` package and of its rooms once, which runs their
    registrations (a stage in a room, stages/scoring/ say, registers only when imported)."""
    import stages

    for module in pkgutil.walk_packages(stages.__path__, prefix="stages."):
        importlib.import_module(module.name)
