"""Frame-blended rate conversions (issue 35): the mix rule on labelled conversions that ffmpeg
makes of a film drawn on twos from the bundled media, the frame-level detector, the `blended`
column the pipeline fills and the `blended` reason the quality rule gives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from conftest import BUNNY, built_once, cut_film, read_frames, shard_rows, write_frames

from core.settings import ConfigError
from stages.base import Frame
from stages.quality import RejectConfig, clip_reasons
from stages.sources.blending import BlendedFrames, BlendingConfig, is_blend, judged_picture

RATE = 24  # the drawn film's rate; its drawings are held two frames each (on twos)
DRAWINGS = 60
LIMIT = RejectConfig().blended_max_share
COLUMNS = ["blended", "reject_reasons"]


def _drawn_on_twos(path: Path) -> Path:
    """A film of real animation drawn on twos at 24 fps: Big Buck Bunny's frames, every other
    one, each seen through a window that slides 8 pixels a drawing (a pan), each held 2 frames."""
    source = read_frames(BUNNY, 0, 2 * DRAWINGS, size=(800, 450))[::2]
    drawings = [
        np.ascontiguousarray(picture[90:270, 8 * j : 8 * j + 320])
        for j, picture in enumerate(source)
    ]
    return write_frames(path, [d for d in drawings for _ in range(2)], RATE)


def _converted(source: Path, out: Path, filters: str) -> Path:
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-vf", filters]
        + ["-c:v", "libx264", "-crf", "18", "-preset", "ultrafast", str(out)],
        check=True,
    )
    return out


FILMS = {  # name: (ffmpeg filters applied to the film on twos, its rate, whether it blends)
    "twos": ("null", RATE, False),
    "blend25": ("framerate=fps=25", 25, True),  # a PAL conversion that blends
    "blend30": ("framerate=fps=30", 30, True),  # an NTSC one
    "dropped25": ("fps=25", 25, False),  # the same rates by repeating frames
    "dropped30": ("fps=30", 30, False),
}


@pytest.fixture(scope="session")
def conversions(tmp_path_factory) -> dict[str, str]:
    def build(folder: Path) -> dict[str, str]:
        twos = _drawn_on_twos(folder / "twos_source.mp4")
        return {
            name: str(_converted(twos, folder / f"{name}.mp4", filters))
            for name, (filters, _, _) in FILMS.items()
        }

    return built_once(tmp_path_factory, "blend_conversions", build)


def _labels(name: str, count: int) -> list[bool]:
    """Per frame of a conversion, whether it mixes two different drawings. ffmpeg's framerate
    filter shows output frame k at source position k * 24 / rate and mixes the two source frames
    around it unless the position is within 15/256 of one of them (its interp_start and
    interp_end); a mix of two frames of one held drawing is that drawing."""
    _, rate, blends = FILMS[name]
    labels = []
    for k in range(count):
        position = k * RATE / rate
        first = int(position)
        weight = position - first
        mixes = blends and 15 / 256 < weight < 240 / 256 and first // 2 != (first + 1) // 2
        labels.append(mixes)
    return labels


def _pictures(path: str) -> list[np.ndarray]:
    """The film's frames as the detector sees them (256 wide grey, then judged_picture)."""
    with av.open(path) as container:
        return [
            judged_picture(
                cv2.resize(f.to_ndarray(format="gray"), (256, 144), interpolation=cv2.INTER_AREA)
            )
            for f in container.decode(video=0)
        ]


def _blends(pictures: list[np.ndarray]) -> set[int]:
    detector = BlendedFrames(BlendingConfig())
    for index, picture in enumerate(pictures):
        bgr = cv2.cvtColor(picture.astype(np.uint8), cv2.COLOR_GRAY2BGR)
        detector.process(Frame(index, small=lambda bgr=bgr: bgr, planes=lambda: None))
    return detector.blends()


@pytest.mark.parametrize("name", sorted(FILMS))
def test_the_detector_finds_the_mixed_frames_and_only_those(conversions, name):
    pictures = _pictures(conversions[name])
    labels = _labels(name, len(pictures))
    found = _blends(pictures)
    assert not [k for k in found if not labels[k]], "a frame showing one drawing read as a mix"
    mixed = [k for k, mixes in enumerate(labels) if mixes]
    if FILMS[name][2]:
        # the mixes it misses are those nearly all one drawing (weights under 0.2 or over 0.8)
        assert len(found) >= len(mixed) / 3, (sorted(found), mixed)
    else:
        assert not mixed and not found


def test_a_mix_needs_neighbours_that_differ_and_is_no_fade(conversions):
    config = BlendingConfig()
    pictures = _pictures(conversions["twos"])
    a, b = pictures[0], pictures[2]  # two drawings
    assert is_blend(a, (a + b) / 2, b, config) is True
    assert is_blend(a, a, b, config) is False  # a held drawing next to a new one
    assert is_blend(a, a, a, config) is None  # nothing changed: not judged
    # a fade to black: the frame between is the mean of its neighbours, but one gain explains B
    assert is_blend(a, a * 0.75, a * 0.5, config) is None


def test_a_gradual_change_is_no_conversion(conversions):
    """Every frame of a slow dissolve inside a shot lies between its neighbours: none counts."""
    pictures = _pictures(conversions["twos"])
    a, b = pictures[0], pictures[40]
    ramp = [a + (b - a) * (k / 6) for k in range(7)]
    assert _blends([a, a, *ramp, b, b]) == set()


def test_the_pipeline_stores_blended_and_rejects_the_conversion(conversions, tmp_path):
    rows = shard_rows(cut_film(Path(conversions["blend25"]), tmp_path / "blend25"), COLUMNS)
    assert rows and all(row["blended"] > LIMIT for row in rows), [r["blended"] for r in rows]
    assert all("blended" in row["reject_reasons"] for row in rows)
    rows = shard_rows(cut_film(Path(conversions["dropped25"]), tmp_path / "dropped25"), COLUMNS)
    assert rows and all(row["blended"] == 0.0 for row in rows)
    assert not any("blended" in row["reject_reasons"] for row in rows)


def test_the_reason_reads_the_stored_share():
    assert clip_reasons({"blended": LIMIT * 2}, RejectConfig()) == ["blended"]
    assert clip_reasons({"blended": LIMIT}, RejectConfig()) == []
    assert clip_reasons({"blended": None}, RejectConfig()) == []
    assert clip_reasons({"blended": 0.5}, RejectConfig(blended_max_share=1.0)) == []


@pytest.mark.parametrize(
    "setting",
    [
        {"mix_range": (0.8, 0.2)},
        {"min_changed": 0.0},
        {"change_levels": -1.0},
        {"min_middle": 1.5},
        {"min_fit": -0.1},
        {"max_fade_fit": 2.0},
    ],
)
def test_a_setting_out_of_its_range_is_named(setting):
    name = next(iter(setting))
    with pytest.raises(ConfigError, match=f"blending.{name}"):
        BlendingConfig(**setting).validate()
    BlendingConfig().validate()
