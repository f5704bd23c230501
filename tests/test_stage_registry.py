"""The stage contracts: frame-level stages take `Frame`s; clip stages register themselves and
the list comes from the configuration; every section checks its settings before any film is cut."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import make_video

from core.record import Clip
from pipeline.cli import main as cli_main
from pipeline.config import ConfigError, load_config
from stages import base
from stages.base import (
    ClipStage,
    Frame,
    build_clip_stages,
    register_clip_stage,
    registered_clip_stages,
)
from stages.clips import ClipConfig, ClipSplitter
from stages.crop import CropBox
from stages.encode import EncodeMedia
from stages.motion import MotionScope
from stages.probe import Probe
from stages.scenes import SceneConfig, SceneCuts

SINTEL = Path(__file__).resolve().parents[1] / "samples" / "sintel_trailer.mp4"


def test_the_bundled_stages_register_in_running_order():
    names = [entry.name for entry in registered_clip_stages()]
    assert names.index("motion") < names.index("encode")
    assert names[-1] == "encode"  # it releases the frames every earlier stage needs


def test_the_configuration_switches_stages_on_and_off():
    on = build_clip_stages(load_config())
    assert [type(s) for s in on if isinstance(s, (MotionScope, EncodeMedia))] == [
        MotionScope,
        EncodeMedia,
    ]
    off = build_clip_stages(load_config(None, ["motion.enabled=false"]))
    assert not any(isinstance(s, MotionScope) for s in off)


class _Marks(ClipStage):
    name = "marks"

    def __init__(self, crf: int):
        self.crf = crf

    def process(self, clip: Clip) -> Clip:
        return clip


def test_a_new_stage_is_one_registration_built_from_its_section():
    @register_clip_stage("marks", section="clips", order=50)
    def marks_stage(settings):
        return _Marks(settings.crf)

    try:
        stages = build_clip_stages(load_config(None, ["clips.crf=23"]))
        kinds = [type(s) for s in stages]
        assert kinds.index(MotionScope) < kinds.index(_Marks) < kinds.index(EncodeMedia)
        assert next(s for s in stages if isinstance(s, _Marks)).crf == 23
    finally:
        base._CLIP_STAGES.pop("marks")


def test_a_stage_name_taken_by_another_module_is_refused():
    def other(settings):
        return None

    other.__module__ = "somewhere.else"
    with pytest.raises(ValueError, match="'motion' is registered twice"):
        register_clip_stage("motion", section="motion", order=10)(other)


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
    splitter = ClipSplitter(ClipConfig(), film, crop, "generic", 0, True)
    converted: list[int] = []

    def rgb(index: int) -> np.ndarray:
        converted.append(index)
        return np.zeros((film.height, film.width, 3), np.uint8)

    def no_small() -> np.ndarray:
        raise AssertionError("splitting never needs the detection-size picture")

    found: list = []
    for index in range(film.num_frames):
        frame = Frame(index, small=no_small, rgb=partial(rgb, index), starts_scene=index == 0)
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
            cuts += detector.process(Frame(index, small=lambda s=small: s, rgb=_no_rgb))
    cuts += detector.finish(film.num_frames)
    assert cuts == [36]


def _no_rgb() -> np.ndarray:
    raise AssertionError("scene detection never needs the full picture")
