"""The stage contracts: frame-level stages take `Frame`s; clip stages register themselves with
their settings section and columns, and the configuration, the shard schema and the record follow
from the registrations; every section checks its settings before any film is cut."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import av
import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, local_config, make_video

from core.record import Clip, persisted_fields
from core.schema import CLIP_SCHEMA
from core.settings import Settings
from core.shards import read_clips
from pipeline.cli import main as cli_main
from pipeline.data.config import ConfigError, PipelineConfig, describe_fields, load_config
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.base import (
    ClipStage,
    Frame,
    build_clip_stages,
    clip_schema,
    register_clip_stage,
    registered_clip_stages,
    registered_scores,
    unregister_clip_stage,
)
from stages.clips import ClipConfig, ClipSplitter, output_region
from stages.crop import CropBox
from stages.encode import EncodeMedia
from stages.motion import MOTION_COLUMNS, MotionConfig, MotionScope
from stages.probe import Probe
from stages.scenes import SceneConfig, SceneCuts
from stages.scoring.clip_scores import CLIP_SCORE_COLUMNS

SINTEL = Path(__file__).resolve().parents[1] / "samples" / "sintel_trailer.mp4"


def test_the_bundled_stages_register_in_running_order():
    names = [entry.name for entry in registered_clip_stages()]
    assert names.index("motion") < names.index("encode")
    assert names[-1] == "encode"  # it releases the frames every earlier stage needs


def test_the_registry_alone_finds_the_stages_and_scores_of_every_room():
    """In a fresh process that imports nothing else (a notebook, the review page): the stages
    in rooms (stages/scoring/, stages/sources/) register too, not only the top-level modules."""
    names = [entry.name for entry in registered_clip_stages()]
    columns = [score.column for score in registered_scores()]
    code = (
        "from stages.base import registered_clip_stages, registered_scores\n"
        "print([e.name for e in registered_clip_stages()], [s.column for s in registered_scores()])"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert found.strip() == str(names) + " " + str(columns)
    assert {"camera", "clarity", "fields"} <= set(names)


def test_the_configuration_switches_stages_on_and_off():
    on = build_clip_stages(load_config())
    assert [type(s) for s in on if isinstance(s, (MotionScope, EncodeMedia))] == [
        MotionScope,
        EncodeMedia,
    ]
    off = build_clip_stages(load_config(None, ["motion.enabled=false"]))
    assert not any(isinstance(s, MotionScope) for s in off)


# ---- a new stage, end to end: its own settings section, its own column --------------------


@dataclass
class SharpnessConfig(Settings):
    enabled: bool = True
    """Measure how sharp each clip is."""
    frame: int = 0
    """Which of the clip's 16 frames is measured."""


SHARPNESS_COLUMNS = (pa.field("sharpness", pa.float32()),)


class Sharpness(ClipStage):
    """The variance of the Laplacian of one frame's grey picture: low on blur and flat frames."""

    name = "sharpness"

    def __init__(self, config: SharpnessConfig):
        self.config = config

    def process(self, clip: Clip) -> Clip:
        assert clip.frames is not None  # it runs before encode, which releases them
        grey = clip.frames.grey((120, 180))[self.config.frame]
        clip.extra["sharpness"] = float(cv2.Laplacian(grey, cv2.CV_64F).var())
        return clip


@pytest.fixture
def sharpness_stage():
    """The recipe of docs/architecture.md ("Adding a clip stage"), registered for one test."""

    @register_clip_stage("sharpness", settings=SharpnessConfig, columns=SHARPNESS_COLUMNS, order=60)
    def sharpness_stage(settings: SharpnessConfig) -> ClipStage | None:
        return Sharpness(settings) if settings.enabled else None

    yield
    unregister_clip_stage("sharpness")


def test_a_new_stage_brings_its_settings_and_its_column_through_a_real_cut(
    tmp_path, sharpness_stage
):
    config = local_config(sharpness__frame=3)
    assert isinstance(config.section("sharpness"), SharpnessConfig)
    assert config.section("sharpness").frame == 3  # --set reaches the new section
    assert ("sharpness.frame", 0, "Which of the clip's 16 frames is measured.") in (
        describe_fields()
    )
    assert config.fingerprint() != local_config().fingerprint()  # it changes what is stored
    kinds = [type(s) for s in build_clip_stages(config)]
    assert kinds.index(MotionScope) < kinds.index(Sharpness) < kinds.index(EncodeMedia)

    # small frames (the clips are 480x720 all the same): the film pictures' text detection costs
    # a third of a 360x640 film's, and the values stay far above the blur line (250-280)
    film = make_video(tmp_path / "film.mp4", size=(144, 256), num_frames=96, cuts=(48,))
    result = run_film(film, tmp_path / "out", config, load_ip(None))
    assert result.ok, result.message
    folder = Path(result.film_dir)
    shard = pq.read_table(folder / "shards")
    assert shard.schema.field("sharpness").type == pa.float32()
    values = shard.column("sharpness").to_pylist()
    assert len(values) == 2 and all(v > 100 for v in values)  # blocky textures: sharp edges
    assert [c.extra["sharpness"] for c in read_clips(folder / "shards")] == values
    assert pq.read_table(folder / "manifest.parquet").column("sharpness").to_pylist() == values
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["config"]["sharpness"] == {"enabled": True, "frame": 3}


def test_a_new_section_is_read_from_yaml_and_switches_its_stage_off(tmp_path, sharpness_stage):
    settings = tmp_path / "settings.yaml"
    settings.write_text("sharpness: {enabled: false}\n")
    config = load_config(settings)
    assert not any(isinstance(s, Sharpness) for s in build_clip_stages(config))


def test_a_declared_column_must_match_the_shard_schema():
    @register_clip_stage(
        "wrong", settings=SharpnessConfig, columns=(pa.field("crop_w", pa.string()),), order=60
    )
    def wrong(settings):
        return None

    try:
        with pytest.raises(TypeError, match="declares column crop_w as string; .* int32"):
            clip_schema()
    finally:
        unregister_clip_stage("wrong")


def test_a_column_has_one_owner_and_a_section_one_class():
    with pytest.raises(ValueError, match=r"\['motion_scope'\] that 'motion' fills already"):
        register_clip_stage(
            "rival", settings=SharpnessConfig, columns=MOTION_COLUMNS[:1], order=20
        )(lambda settings: None)
    with pytest.raises(ValueError, match="reads section 'motion' as SharpnessConfig"):
        register_clip_stage("rival", settings=SharpnessConfig, section="motion", order=20)(
            lambda settings: None
        )
    assert "rival" not in {entry.name for entry in registered_clip_stages()}


def test_the_bundled_stages_declare_what_the_record_and_schema_hold():
    """Every column a bundled stage declares is a typed Clip field with the same Arrow type in
    the shard schema, or one of the CLIP scores' columns, which only clip_schema() appends (they
    are null without a checkpoint: shards of films cut before them keep their schema version);
    every section a bundled stage reads is PipelineConfig's, of the declared class."""
    clip_fields = set(persisted_fields())
    appended = {column.name: column.type for column in CLIP_SCORE_COLUMNS}
    for entry in registered_clip_stages():
        assert entry.columns, entry.name
        for column in entry.columns:
            if column.name in appended:
                assert entry.name == "clip_scores" and column.type == appended[column.name]
                continue
            assert column.name in clip_fields, (entry.name, column.name)
            assert CLIP_SCHEMA.field(column.name).type == column.type
        assert type(PipelineConfig().section(entry.section)) is entry.settings
    assert clip_schema().names == CLIP_SCHEMA.names + list(appended)
    assert PipelineConfig().stage_sections == {}


def test_a_stage_name_taken_by_another_module_is_refused():
    def other(settings):
        return None

    other.__module__ = "somewhere.else"
    with pytest.raises(ValueError, match="'motion' is registered twice"):
        register_clip_stage("motion", settings=MotionConfig, order=10)(other)


@pytest.mark.parametrize(
    "override,allowed",
    [
        ("caption.engine=tranformers", "['transformers', 'lmdeploy', 'openai']"),
        ("caption.executor=slurm", "['auto', 'ray', 'local']"),
        ("motion.dis_preset=slow", "['ultrafast', 'fast', 'medium']"),
        ("scenes.detector=magic", "['adaptive'"),
    ],
)
def test_each_section_checks_its_choices(override, allowed):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    name, _, value = override.partition("=")
    assert str(caught.value).startswith(f"settings: {name}={value!r}: choose one of ")
    assert allowed in str(caught.value)


def test_a_misspelt_engine_stops_the_cli_before_any_film_is_cut(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(
        ["dataset", str(SINTEL), "--out", str(out), "--set", "caption.engine=tranformers"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [
        "animegamer dataset: error: settings: caption.engine='tranformers': choose one of "
        "['transformers', 'lmdeploy', 'openai']"
    ]
    assert not out.exists()  # nothing was probed, cropped or cut


def test_the_clip_splitter_converts_only_the_frames_it_samples(tmp_path):
    film = Probe().process(make_video(tmp_path / "f.mp4", num_frames=48, fps=24))  # one 2-s clip
    crop = CropBox(0, 0, film.width, film.height, source="full")
    splitter = ClipSplitter(
        ClipConfig(), film, output_region(crop, ClipConfig()), "generic", 0, True
    )
    converted: list[int] = []

    def planes(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        converted.append(index)
        half = (film.height // 2, film.width // 2)
        return (
            np.zeros((film.height, film.width), np.uint8),
            np.zeros(half, np.uint8),
            np.zeros(half, np.uint8),
        )

    def no_small() -> np.ndarray:
        raise AssertionError("splitting never needs the detection-size picture")

    found: list = []
    for index in range(film.num_frames):
        frame = Frame(index, small=no_small, planes=partial(planes, index), starts_scene=index == 0)
        found += splitter.process(frame)
    found += splitter.finish(film.num_frames)
    [clip] = [item for item in found if isinstance(item, Clip)]
    assert converted == clip.frame_indices and len(converted) == 16


def test_scene_detection_finds_a_cut_through_the_frame_contract(tmp_path):
    film = Probe().process(make_video(tmp_path / "c.mp4", num_frames=72, cuts=(36,)))
    detector = SceneCuts(SceneConfig(), film.fps)
    cuts: list[int] = []
    with av.open(str(film.path)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            small = picture.reformat(width=128, height=72, format="bgr24").to_ndarray()
            cuts += detector.process(Frame(index, small=lambda s=small: s, planes=_no_planes))
    cuts += detector.finish(film.num_frames)
    assert cuts == [36]


def _no_planes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raise AssertionError("scene detection never needs the full picture")
