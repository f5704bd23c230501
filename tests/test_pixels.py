"""Pixels of every shape: anamorphic NTSC and PAL copies of a bundled film give clips whose
pictures match a square-pixel copy's (core/pixels.py, stages/clips.py output_region)."""

from __future__ import annotations

import json
from fractions import Fraction

import cv2
import numpy as np
import pandas as pd
import pytest
from conftest import BUNNY, local_config, resized_copy

from core.shards import read_clips
from core.video import FrameReader, decode_image
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.clips import ClipConfig, fit_frame, output_region, source_scale
from stages.crop import BorderCrop, CropBox
from stages.probe import Probe

# (stored size, SAR, the picture's shape as shown): what DVDs and captures hold
SHAPES = {
    "ntsc_16x9": ((720, 480), Fraction(32, 27), 16 / 9),
    "pal_16x9": ((720, 576), Fraction(64, 45), 16 / 9),
    "ntsc_4x3": ((720, 480), Fraction(8, 9), 4 / 3),
    "ntsc_4x3_rec601": ((720, 480), Fraction(10, 11), 720 * 10 / 11 / 480),
    "pal_4x3": ((720, 576), Fraction(16, 15), 4 / 3),
}


def _square_size(size: tuple[int, int], sar: Fraction) -> tuple[int, int]:
    """The same picture in square pixels: its rows kept, its width as shown (even)."""
    width, height = size
    return int(round(width * sar / 2)) * 2, height


def _clip_picture(path, config: ClipConfig | None = None) -> tuple[np.ndarray, tuple, float]:
    """The first frame of a film as its clips show it (grey), the film's window and pixel
    aspect: the probe, the border crop and the clip geometry the pipeline uses."""
    config = config or ClipConfig()
    film = Probe().process(path)
    _, frame = next(FrameReader(str(path), film.frame_pts, threads=1).frames(0, 1))
    rgb = frame.to_ndarray(format="rgb24")
    crop = BorderCrop().detect([frame.to_ndarray(format="gray")], film.width, film.height)
    region = output_region(crop, config, film.pixel_aspect)
    fitted = fit_frame(rgb, region, config, aspect=film.pixel_aspect)
    return cv2.cvtColor(fitted, cv2.COLOR_RGB2GRAY).astype(np.float32), region, film.pixel_aspect


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).mean())


def _best_width_scale(picture: np.ndarray, reference: np.ndarray) -> float:
    """The horizontal scale (about the centre) that brings `picture` closest to `reference`:
    1.0 when the two show the picture at the same width, 1.16 when `picture` is 16 % too thin."""

    def error(scale: float) -> float:
        height, width = picture.shape
        matrix = np.float32([[scale, 0, width / 2 * (1 - scale)], [0, 1, 0]])
        moved = cv2.warpAffine(picture, matrix, (width, height), flags=cv2.INTER_LINEAR)
        keep = slice(width // 6, width - width // 6)  # the middle, inside any scale tried
        return _difference(moved[:, keep], reference[:, keep])

    return min(np.arange(0.80, 1.2001, 0.005), key=error)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """For each shape: the anamorphic copy, a square copy and a second square copy (another
    encoding of the same picture: the noise floor of the comparison). Two frames each: the
    tests read the first."""
    folder = tmp_path_factory.mktemp("pixels")
    out = {}
    for name, (size, sar, shown) in SHAPES.items():
        square = _square_size(size, sar)
        out[name] = (
            resized_copy(BUNNY, folder / f"{name}.mp4", size, sar, shown=shown, num_frames=2),
            resized_copy(BUNNY, folder / f"{name}_sq.mp4", square, shown=shown, num_frames=2),
            resized_copy(
                BUNNY, folder / f"{name}_sq2.mp4", square, shown=shown, crf=26, num_frames=2
            ),
        )
    return out


def test_the_probe_reads_the_sar_and_names_the_shape(copies):
    film = Probe().process(copies["ntsc_16x9"][0])
    assert (film.width, film.height, film.sar) == (720, 480, "32:27")
    assert film.pixel_aspect == pytest.approx(32 / 27)
    assert film.facts()["sar"] == "32:27"
    from core.pixels import shape_words

    assert shape_words(720, 480, film.sar) == "anamorphic 720x480 SAR 32:27, shown as 853x480"
    square = Probe().process(copies["ntsc_16x9"][1])
    assert (square.sar, square.pixel_aspect) == ("1:1", 1.0)
    assert shape_words(square.width, square.height, square.sar) == ""
    # A SAR a phone editor wrote (seen on a real 700x1036 edit) that shows no other width.
    assert shape_words(700, 1036, "2664:2665") == ""
    assert shape_words(700, 1036, "2664:2625").startswith("anamorphic 700x1036")


@pytest.mark.parametrize("name", SHAPES)
def test_clips_of_an_anamorphic_copy_match_the_square_copy(copies, name):
    anamorphic, square, square_again = copies[name]
    picture, region, aspect = _clip_picture(anamorphic)
    reference, _, _ = _clip_picture(square)
    floor = _difference(_clip_picture(square_again)[0], reference)
    # the window is 3:2 as shown (within 1 %), cut in stored pixels
    assert region[2] * aspect / region[3] == pytest.approx(1.5, rel=0.01)
    # the picture is as wide as the square copy's (within 1 %), and as close to it as two
    # encodings of one picture are to each other
    assert _best_width_scale(picture, reference) == pytest.approx(1.0, abs=0.01)
    assert _difference(picture, reference) < floor + 1.0, (name, floor)


def test_treated_as_square_the_copy_would_be_16_percent_too_thin(copies):
    """The failure the SAR mends, measured the same way: the 16:9 NTSC copy's pixels read as
    square squeeze the whole stored width into 3:2."""
    anamorphic, square, _ = copies["ntsc_16x9"]
    reference, _, _ = _clip_picture(square)
    film = Probe().process(anamorphic)
    _, frame = next(FrameReader(str(anamorphic), film.frame_pts, threads=1).frames(0, 1))
    as_square = fit_frame(frame.to_ndarray(format="rgb24"), (0, 0, 720, 480), ClipConfig())
    grey = cv2.cvtColor(as_square, cv2.COLOR_RGB2GRAY).astype(np.float32)
    assert _best_width_scale(grey, reference) == pytest.approx(16 / 9 / 1.5, abs=0.01)
    assert _difference(grey, reference) > 5 * _difference(_clip_picture(anamorphic)[0], reference)


def test_pad_mode_shows_the_picture_at_its_shape(copies):
    """resize=pad letterboxes the picture as shown: a 16:9 picture stored in 720x480 fills the
    clip's width and about 405 of its 480 rows."""
    config = ClipConfig(resize="pad")
    anamorphic = copies["ntsc_16x9"][0]
    picture, region, _ = _clip_picture(anamorphic, config)
    assert region == (0, 0, 720, 480)
    rows = np.flatnonzero(picture.mean(axis=1) > 8)
    assert rows[-1] - rows[0] + 1 == pytest.approx(720 / (16 / 9), abs=2)


@pytest.mark.slow  # over 1.5 s (README, "Test time"): two whole runs
def test_the_pipeline_cuts_an_anamorphic_film_into_square_clips(tmp_path):
    """A whole run: summary.json records the SAR, the crop box stays in stored pixels, the
    window is 3:2 as shown, the console line names the shape, and the clip matches the one cut
    from a square copy."""
    size, sar, shown = SHAPES["ntsc_16x9"]
    anamorphic = resized_copy(BUNNY, tmp_path / "ana.mp4", size, sar, shown=shown, num_frames=60)
    square = resized_copy(
        BUNNY, tmp_path / "sq.mp4", _square_size(size, sar), shown=shown, num_frames=60
    )
    config = local_config(overlays__enabled=False, motion__enabled=False)
    results = [run_film(p, tmp_path / "out", config, load_ip(None)) for p in (anamorphic, square)]
    assert all(r.ok for r in results), [r.message for r in results]
    ana_dir, sq_dir = (r.film_dir for r in results)
    summary = json.loads((ana_dir / "summary.json").read_text())
    assert summary["film"]["sar"] == "32:27"
    assert summary["crop"] == {"x": 0, "y": 0, "w": 720, "h": 480, "source": "full"}
    window = summary["window"]
    assert (window["w"], window["h"]) == (608, 480)
    assert window["w"] * 32 / 27 / window["h"] == pytest.approx(1.5, rel=0.01)
    assert "anamorphic 720x480 SAR 32:27, shown as 853x480" in results[0].message
    assert "SAR" not in results[1].message
    ana_clips, sq_clips = (pd.read_parquet(d / "manifest.parquet") for d in (ana_dir, sq_dir))
    assert len(ana_clips) == len(sq_clips) >= 1
    first = [
        cv2.cvtColor(decode_image(next(read_clips(d / "shards")).first_frame), cv2.COLOR_RGB2GRAY)
        for d in (ana_dir, sq_dir)
    ]
    assert first[0].shape == first[1].shape == (480, 720)
    assert _difference(first[0].astype(np.float32), first[1].astype(np.float32)) < 4.0


def test_upscaled_and_min_source_height_read_the_picture_as_shown():
    """A 16:9 DVD (720x480, 32:27) is not upscaled: its window, 608x480 stored, is shown
    720x480, its rows kept one for one. A 4:3 DVD (8:9) shows 426 rows, upscaled 1.13 times,
    and clips.min_source_height counts those rows."""
    config = ClipConfig()
    crop = CropBox(0, 0, 720, 480, "full")
    wide = output_region(crop, config, 32 / 27)
    assert wide == (56, 0, 608, 480)
    assert source_scale(wide, config, 32 / 27) is None
    assert source_scale(wide, config) is not None  # read as square, it would be "upscaled 1.18x"
    narrow = output_region(crop, config, 8 / 9)
    assert narrow == (0, 27, 720, 426)
    scale = source_scale(narrow, config, 8 / 9)
    assert scale is not None and scale.note == "upscaled 1.13x from 640x426"
    pal = output_region(CropBox(0, 0, 720, 576, "full"), config, 64 / 45)
    assert source_scale(pal, config, 64 / 45) is None  # 576 rows into 480: shrunk
