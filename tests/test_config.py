"""Configuration: one declaration per setting, reachable from YAML, --set and IP manifests."""

from __future__ import annotations

import pytest

from pipeline.data.config import ConfigError, PipelineConfig, describe_fields, load_config
from pipeline.data.ip import ManifestError, load_ip


def test_yaml_and_set_override_in_that_order(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("scenes: {detector: content, threshold: 30}\nclips: {crf: 18}\n")
    config = load_config(path, ["clips.crf=23", "crop.box=[0, 10, 640, 340]"])
    assert (config.scenes.detector, config.scenes.threshold) == ("content", 30.0)
    assert config.clips.crf == 23
    assert config.crop.box == [0, 10, 640, 340]


@pytest.mark.parametrize(
    "override,message",
    [
        ("nosuch.field=1", "unknown section 'nosuch'"),
        ("clips.nosuch=1", "unknown setting 'clips.nosuch'"),
        ("clips.crf=high", "clips.crf='high'"),
        ("run.progress=maybe", "expected true or false"),
        ("clips.crf", "expected section.field=value"),
    ],
)
def test_bad_overrides_are_named(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        load_config(None, [override])


def test_every_setting_is_described_once():
    names = [name for name, _, _ in describe_fields()]
    assert len(names) == len(set(names))
    assert "run.segment_seconds" in names
    described = {name: text for name, _, text in describe_fields()}
    assert described["clips.resize"].startswith("How the cropped picture")


def test_fingerprint_ignores_how_work_runs_but_not_what_it_makes():
    a, b = PipelineConfig(), PipelineConfig()
    b.run.executor = "local"
    assert a.fingerprint() == b.fingerprint()
    b.clips.crf = 30
    assert a.fingerprint() != b.fingerprint()


def test_ip_manifests(tmp_path):
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "hero.png").write_bytes(b"png")
    manifest = tmp_path / "show.yaml"
    manifest.write_text(
        "name: show\nfilms: [a.mp4]\nprotagonists:\n  - {name: Hero, images: [refs/hero.png]}\n"
    )
    ip = load_ip(manifest)
    assert ip.name == "show" and ip.films[0].path == tmp_path / "a.mp4"
    assert ip.protagonists[0].images == [tmp_path / "refs" / "hero.png"]
    assert load_ip(None).name == "generic" and load_ip(None).protagonists == []

    manifest.write_text("name: show\nprotagonists:\n  - {name: Hero, images: [refs/missing.png]}\n")
    with pytest.raises(ManifestError, match="reference images of Hero not found"):
        load_ip(manifest)
    with pytest.raises(ManifestError, match="no such IP manifest"):
        load_ip("no-such-ip")


@pytest.mark.parametrize("loader", ["pipeline", "trainer"])
@pytest.mark.parametrize(
    "text,message",
    [("clips: {crf: [1\n", "not valid YAML"), ("- a list\n", "expected a mapping of")],
)
def test_a_bad_settings_file_is_one_error_naming_it(tmp_path, loader, text, message):
    """The pipeline's and the trainer's --config go through one reader (core.settings)."""
    from trainer.shared.config import load_config as load_trainer_config

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: {message}"):
        if loader == "pipeline":
            load_config(path)
        else:
            load_trainer_config("encoder", path)
