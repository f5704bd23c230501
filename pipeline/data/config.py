"""Configuration, declared once.

Each stage declares its own settings as a dataclass next to its code; `PipelineConfig` composes
them into sections: the ones it names as typed fields (code elsewhere reads `config.motion`),
and every section a registered clip stage declares that it does not name (stages/base.py), so a
new stage's settings need no edit here. The same field is reachable from a YAML file (`section: {field: value}`), from
an IP manifest's per-film overrides, and from the command line (`--set section.field=value`), all
through `apply_overrides`, so no option is ever declared a second time.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import (
    ConfigError,
    Settings,
    check_choice,
    field_docs,
    parse_assignment,
    read_settings_file,
    set_setting,
)
from core.shards import ShardConfig
from pipeline.executors import EXECUTORS
from stages.base import registered_sections
from stages.scoring.camera import CameraConfig
from stages.captioning.stage import CaptionConfig
from stages.scoring.clarity import ClarityConfig
from stages.scoring.clip_scores import ClipScoreConfig
from stages.clips import ClipConfig
from stages.crop import CropConfig
from stages.sources.blending import BlendingConfig
from stages.sources.fields import FieldConfig
from stages.motion import MotionConfig
from stages.burned_in.overlays import OverlayConfig
from stages.quality import QualityConfig, RejectConfig
from stages.scenes import SceneConfig


@dataclass
class RunConfig(Settings):
    executor: str = "auto"
    """'auto': Ray on the cluster RAY_ADDRESS names, else 'processes'. 'processes': a pool of
    worker processes on this machine, one per CPU (under a second to start). 'ray': Ray
    (RAY_ADDRESS, else a Ray started on this machine, which costs seconds and about a third more
    CPU on a folder of short films: docs/corpus.md). 'local': everything in this one process."""
    segment_seconds: float = 120.0
    """Films are cut into the fewest equal time segments of at most this length (5 % over is let
    pass), processed in parallel (a 90-min feature film makes 45; a 130-s film, 2). Each boundary is a forced scene boundary: a scene tail under
    2 s there is dropped and counted as segment_tail, at most one clip per boundary."""
    num_cpus: int | None = None
    """Cores this run may use on this machine: the process pool has that many workers, held to
    that many cores; the embedded Ray gets that many CPUs, its processes held likewise; the local
    executor's work is held likewise; the folder pass's duplicate search runs that many threads;
    None: every core this process may use, fewer under a
    cgroup CPU quota (a container's --cpus; 1.5 counts as 2). The pool takes at most that many:
    a larger value is lowered to it, with a one-line warning. Ignored on a cluster (RAY_ADDRESS),
    whose nodes declare their own CPUs."""
    films_in_flight: int | None = None
    """Films being probed, cut or finalized at once; None: twice the cluster's CPUs. Bounds the
    driver's and the object store's memory on corpora of thousands of films."""
    task_threads: int = 1
    """OpenCV and torch threads per task: tasks already run one per CPU, so more threads per task
    would oversubscribe the node."""
    decode_threads: int = 1
    """Decoder threads per segment task (FFmpeg's frame threading; the frames are the same with
    any number). One by default: measured on the quiet machine, a second thread cost 6 % more
    CPU on the 10.4-min film and 15 % more at 1080p, and gained nothing on a folder of short
    films (docs/speed.md); a third and fourth runnable thread on a node whose tasks already fill
    its cores slow every stage. 2 lets a lone segment (a single film's last) take an idle core."""
    decode_once_mib: int = 512
    """A film of one segment whose decoded frames fit in this many MiB is decoded once: its
    prepare task decodes it first to last and holds the frames, then cuts its segment from them
    (pipeline/running/film_tasks.py). A 6-s film was decoded nearly twice, for its samples and
    field runs and then for its segment (docs/speed.md). The bound holds per task: a 6-s 1080p
    film holds about 430 MiB, a 480p one 84. 0: every film's segments decode it again."""
    progress: bool = True

    content_fields = ("segment_seconds",)  # segment boundaries are forced scene boundaries

    def validate(self) -> None:
        check_choice("run", "executor", self.executor, EXECUTORS)
        if self.decode_once_mib < 0:
            raise ConfigError("run.decode_once_mib must be 0 (off) or more")


@dataclass
class PipelineConfig:
    crop: CropConfig = field(default_factory=CropConfig)
    overlays: OverlayConfig = field(default_factory=OverlayConfig)
    fields: FieldConfig = field(default_factory=FieldConfig)
    blending: BlendingConfig = field(default_factory=BlendingConfig)
    scenes: SceneConfig = field(default_factory=SceneConfig)
    clips: ClipConfig = field(default_factory=ClipConfig)
    motion: MotionConfig = field(default_factory=MotionConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    clarity: ClarityConfig = field(default_factory=ClarityConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    reject: RejectConfig = field(default_factory=RejectConfig)
    caption: CaptionConfig = field(default_factory=CaptionConfig)
    clip_scores: ClipScoreConfig = field(default_factory=ClipScoreConfig)
    shards: ShardConfig = field(default_factory=ShardConfig)
    run: RunConfig = field(default_factory=RunConfig)
    stage_sections: dict[str, Settings] = field(default_factory=lambda: _stage_sections())
    """The sections of registered clip stages that no field above names, by section name."""

    def sections(self) -> dict[str, Settings]:
        """Every section by name: the named ones in field order, then the registered stages'."""
        named = {f.name: getattr(self, f.name) for f in _named_sections()}
        return named | self.stage_sections

    def section(self, name: str) -> Settings:
        return self.sections()[name]

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(s) for name, s in self.sections().items()}  # type: ignore[call-overload]

    def fingerprint(self) -> str:
        """Settings that change clip content, as each section declares them
        (`Settings.content_fields`); resumed work with another fingerprint is redone."""
        content: dict = {}
        for name, section in self.sections().items():
            declared = type(section).content_fields
            if declared is None:
                content[name] = dataclasses.asdict(section)  # type: ignore[call-overload]
            else:
                content |= {field: getattr(section, field) for field in declared}
            content |= {f"{name}.{k}": v for k, v in section.optional_content().items()}
        return json.dumps(content, sort_keys=True, default=str)


def _named_sections() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(PipelineConfig) if f.name != "stage_sections"]


def _stage_sections() -> dict[str, Settings]:
    """A default section for each registered clip stage's section that PipelineConfig does not
    name; a section it names must be of the class the stage declares."""
    named = {f.name: f for f in _named_sections()}
    hints = typing.get_type_hints(PipelineConfig)
    sections: dict[str, Settings] = {}
    for name, settings in registered_sections().items():
        if name not in named:
            sections[name] = settings()
        elif hints[name] is not settings:
            raise TypeError(
                f"PipelineConfig.{name} is {hints[name].__name__}; the clip stage that reads it "
                f"declares {settings.__name__}"
            )
    return sections


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> PipelineConfig:
    config = PipelineConfig()
    if path:
        data = read_settings_file(path, expected="a mapping of sections")
        apply_mapping(config, data, source=str(path))
    apply_overrides(config, overrides or [])
    check_choices(config, "settings")
    return config


def apply_mapping(config: PipelineConfig, data: dict, source: str) -> None:
    """Apply `{section: {field: value}}` onto `config`, rejecting unknown names."""
    for section_name, values in data.items():
        section = _section(config, section_name, source)
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: section '{section_name}' must be a mapping")
        for name, value in values.items():
            _set_field(section, section_name, name, value, source)


def apply_overrides(config: PipelineConfig, overrides: list[str]) -> None:
    """Apply `section.field=value` strings; values are parsed as YAML scalars/lists."""
    for item in overrides:
        key, value = parse_assignment(item, form="section.field=value")
        section_name, dot, name = key.partition(".")
        if not dot:
            raise ConfigError(f"--set {item!r}: expected section.field=value")
        _set_field(_section(config, section_name, "--set"), section_name, name, value, "--set")


def check_choices(config: PipelineConfig, source: str) -> None:
    """Every section checks its own settings here, before any film is touched."""
    for settings in config.sections().values():
        try:
            settings.validate()
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def describe_fields() -> list[tuple[str, object, str]]:
    """(section.field, default, help) for every setting: the CLI's --help lists these."""
    rows = []
    for name, section in PipelineConfig().sections().items():
        docs = field_docs(type(section))
        for f in dataclasses.fields(section):  # type: ignore[arg-type]
            rows.append((f"{name}.{f.name}", getattr(section, f.name), docs.get(f.name, "")))
    return rows


def _section(config: PipelineConfig, name: str, source: str) -> Settings:
    sections = config.sections()
    if name not in sections:
        raise ConfigError(f"{source}: unknown section '{name}' (known: {', '.join(sections)})")
    return sections[name]


def _set_field(section, section_name: str, name: str, value, source: str) -> None:
    set_setting(section, name, value, source, label=f"{section_name}.{name}")
