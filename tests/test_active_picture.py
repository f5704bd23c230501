"""The active picture of DVD-era sources (issue 35): the dark strips around a 704-pixel active
width (black or a grey ramp, uneven sides, under `crop.min_bar` or not), a half-black first line
and noisy last rows are cropped away; picture is not (dark scenes, a fade, a still shot's dark
edge, an HD film's edge). Labelled films: tests/edge_films.py."""

from __future__ import annotations

import json
from fractions import Fraction

import cv2
import numpy as np
import pandas as pd
import pytest
from conftest import BIKES, BUNNY, local_config
from edge_films import ANALOG, BLACK_704, NARROW, Strips, bikes_frames, bikes_shots, edge_film

from core.shards import read_clips
from core.video import decode_image
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.burned_in.overlays import OverlayConfig, overlay_sample_plan
from stages.crop import BorderCrop, CropBox, CropConfig
from stages.probe import Probe
from stages.sources.film_samples import sample_film

# (stored size, SAR, codec): the DVD and capture storage the analog strips are tried in
STORAGE = {
    "ntsc_4x3_x264": ((720, 480), Fraction(8, 9), "libx264"),
    "ntsc_4x3_rec601_mpeg2": ((720, 480), Fraction(10, 11), "mpeg2video"),
    "ntsc_16x9_mpeg2": ((720, 480), Fraction(32, 27), "mpeg2video"),
    "pal_16x9_x264": ((720, 576), Fraction(64, 45), "libx264"),
}
CODED_ROWS = 8  # MPEG-2 codes 8-row blocks: the rows sharing a block with the noise carry it


def found_box(path, **settings) -> CropBox:
    """The film's crop box as the pipeline finds it: the frames the overlay pass and the crop
    share (one spread pass over a short film), then the border crop."""
    film = Probe().process(path)
    config = OverlayConfig()
    frames = sample_film(film, overlay_sample_plan(film, config, max(48, config.samples))).frames
    return BorderCrop(CropConfig(**settings)).detect(frames, film.width, film.height)


def lost_and_kept(box: CropBox, active: tuple[int, int, int, int]) -> tuple[list[int], list[int]]:
    """Picture rows/columns the box loses on each side (left, top, right, bottom), and strip
    rows/columns it keeps."""
    x0, y0, x1, y1 = active
    edges = (box.x - x0, box.y - y0, x1 - (box.x + box.w), y1 - (box.y + box.h))
    return [max(0, e) for e in edges], [max(0, -e) for e in edges]


@pytest.fixture(scope="module")
def films(tmp_path_factory):
    folder = tmp_path_factory.mktemp("edges")
    out = {}
    for name, (size, sar, codec) in STORAGE.items():
        suffix = "mpg" if codec == "mpeg2video" else "mp4"
        out[name] = edge_film(folder / f"{name}.{suffix}", ANALOG, size, sar, codec)
    out["black_704"] = edge_film(folder / "black_704.mp4", BLACK_704)
    out["narrow"] = edge_film(folder / "narrow.mpg", NARROW, codec="mpeg2video")
    return out


@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_the_cause_the_bar_rule_alone_keeps_the_strips(films):
    """Without the edge rule (main's crop): the ramp's greys (40 and 80, above the threshold)
    count as picture, the half line and the noise have picture-bright pixels, and strips under
    `min_bar` are ignored; only black columns of 4 or more are found as bars."""
    analog = films["ntsc_4x3_x264"]
    _, kept = lost_and_kept(found_box(analog.path, edges=False), analog.active[0])
    assert kept == [2, 1, 4, 2]  # left: 40 and 80; top: the half line; right: 40, 40, 80, 80
    narrow = films["narrow"]
    assert found_box(narrow.path, edges=False).source == "full"
    black = films["black_704"]
    assert found_box(black.path, edges=False) == CropBox(8, 0, 704, 480, "detected")


@pytest.mark.parametrize("name", STORAGE)
@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_the_strips_are_cropped_and_the_picture_kept(films, name):
    """Each storage of the analog capture: the box holds only picture, and loses at most the
    one row or column that even offsets and sizes take (and on MPEG-2, the rows that share
    a coded block with the noise, which the noise smears)."""
    film = films[name]
    box = found_box(film.path)
    lost, kept = lost_and_kept(box, film.active[0])
    assert kept == [0, 0, 0, 0], (box, film.active[0])
    left, top, right, bottom = lost
    noise_block = film.active[0][3] % CODED_ROWS if name.endswith("mpeg2") else 1
    assert left <= 1 and top <= 1 and right <= 1 and bottom <= max(1, noise_block), (box, lost)
    assert box.strips != (0, 0, 0, 0) and box.source == "detected"


@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_black_and_narrow_strips(films):
    """Black columns of 8 stay the bar rule's (nothing more is taken); strips of 2 and 3 columns,
    under `min_bar`, are found by the edge rule."""
    black = films["black_704"]
    assert found_box(black.path) == CropBox(8, 0, 704, 480, "detected")
    narrow = films["narrow"]
    box = found_box(narrow.path)
    lost, kept = lost_and_kept(box, narrow.active[0])
    assert kept == [0, 0, 0, 0] and max(lost) <= 1, box


def _darkened(pictures: list[np.ndarray], gain: float) -> list[np.ndarray]:
    return [(p.astype(np.float32) * gain).astype(np.uint8) for p in pictures]


@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_dark_scenes_and_a_fade_do_not_lose_picture(tmp_path):
    """A night film (every shot at a fifth of its brightness, its edges as dark as a strip's
    ramp) and a fade from black: no strip, nothing cropped. With the analog strips, the night
    shots and the fade's dark frames do not vote, and the bright shots find the strips."""
    shots = bikes_shots()
    night = _darkened(shots, 0.2)
    fade = [_darkened([p], (k + 1) / len(shots))[0] for k, p in enumerate(shots)]
    for name, pictures in (("night", night), ("fade", fade)):
        clean = edge_film(tmp_path / f"{name}.mp4", Strips(), pictures=pictures)
        assert found_box(clean.path).source == "full", name
    half = len(shots) // 2
    mixed = edge_film(tmp_path / "mixed.mp4", ANALOG, pictures=night[:half] + shots[half:])
    lost, kept = lost_and_kept(found_box(mixed.path), mixed.active[0])
    assert kept == [0, 0, 0, 0] and max(lost) <= 1


@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_a_still_shots_dark_edge_is_picture(tmp_path):
    """One picture all film long, with a dark door frame 10 columns wide at its left edge: the
    picture beside the edge never changes, so only what one view can tell is taken (lines of
    one grey, a half line, noise), and the door frame is kept."""
    still = bikes_shots(1)[2]
    still = cv2.resize(still, (720, 480), interpolation=cv2.INTER_AREA)
    still[:, :10] = (still[:, :10] * 0.3).astype(np.uint8)
    film = edge_film(tmp_path / "still.mp4", Strips(), pictures=[still] * 24)
    assert found_box(film.path).source == "full"
    # with the analog strips, from one view: the columns of one grey that are dim beside the
    # picture (the right's 80s, as bright as the picture's edge there, are not), the half line
    # and the noisy rows (restless while the picture stands still)
    film = edge_film(tmp_path / "still_analog.mp4", ANALOG, pictures=[still] * 24)
    box = found_box(film.path)
    assert (box.x, box.x + box.w, box.y, box.y + box.h) == (6, 712, 2, 478), box


@pytest.mark.slow  # over 1.5 s: films made and encoded
def test_an_hd_films_dark_edge_is_left_to_the_bar_rule(tmp_path):
    """A 1280x720 film with a grey ramp 6 columns wide at each side: above `edge_max_height`,
    only the bar rule looks at its edges (it takes the 4 black columns); let in, the ramp is
    found too."""
    ramp = Strips(left=(16, 16, 16, 16, 40, 80), right=(16, 16, 16, 16, 40, 80))
    pictures = bikes_shots(2)
    film = edge_film(tmp_path / "hd.mp4", ramp, (1280, 720), Fraction(1), pictures=pictures)
    box = found_box(film.path)
    assert (box.x, box.w, box.strips) == (4, 1272, (0, 0, 0, 0))  # the black bars' 4 columns
    box = found_box(film.path, edge_max_height=720)
    assert (box.x, box.w) == (6, 1268)


def test_the_bundled_films_have_no_strips():
    """Square-pixel films without strips keep their box (bikes, and Big Buck Bunny let in)."""
    assert found_box(BIKES) == CropBox(0, 0, 640, 272, "full")
    assert found_box(BUNNY, edge_max_height=720) == CropBox(0, 0, 1280, 720, "full")


@pytest.mark.slow  # over 1.5 s (README, "Test time"): a whole run
def test_the_pipelines_clips_show_only_picture(tmp_path):
    """A whole run of a 4:3 NTSC capture of two of bikes' shots (4.6 s): summary.json records
    the strips, the console line names them, the clips' crop box is inside the active picture,
    and no clip frame has a dark column at its left or right edge."""
    film = edge_film(tmp_path / "capture.mp4", ANALOG, pictures=bikes_frames(range(76, 187)))
    config = local_config(overlays__enabled=False, motion__enabled=False)
    result = run_film(film.path, tmp_path / "out", config, load_ip(None))
    assert result.ok, result.message
    summary = json.loads((result.film_dir / "summary.json").read_text())
    crop = summary["crop"]
    assert (crop["x"], crop["y"], crop["w"], crop["h"]) == (6, 2, 704, 476)
    assert sum(crop["strips"]) >= 8  # past the bars' 4 black columns: left 1-2, right 4, 1, 2
    assert "dark edges cropped: left " in result.message
    manifest = pd.read_parquet(result.film_dir / "manifest.parquet")
    assert len(manifest) >= 1
    x0, y0, x1, y1 = film.active[0]
    assert (manifest.crop_x >= x0).all() and (manifest.crop_x + manifest.crop_w <= x1).all()
    assert (manifest.crop_y >= y0).all() and (manifest.crop_y + manifest.crop_h <= y1).all()
    for clip in read_clips(result.film_dir / "shards"):
        grey = cv2.cvtColor(decode_image(clip.first_frame), cv2.COLOR_RGB2GRAY).astype(float)
        inside = grey[:, 8:24].mean()
        assert grey[:, :2].mean() > 0.7 * inside and grey[:, -2:].mean() > 0.7 * inside


def _painted(pictures: list[np.ndarray], strips: Strips, gain: float = 1.0) -> list[np.ndarray]:
    """Grey 720x480 frames made here without coding: each picture at the active size, the
    strips painted in full-range grey (luma code 16 is grey 0)."""
    x0, _, x1, y1 = strips.active(720, 480)
    rng = np.random.default_rng(0)
    out = []
    for picture in pictures:
        grey = cv2.cvtColor(picture, cv2.COLOR_RGB2GRAY)
        frame = np.zeros((480, 720), np.uint8)
        frame[:, x0:x1] = cv2.resize(grey, (x1 - x0, 480), interpolation=cv2.INTER_AREA) * gain
        for k, code in enumerate(strips.left):
            frame[:, k] = (code - 16) * 255 // 219
        for k, code in enumerate(strips.right):
            frame[:, 719 - k] = (code - 16) * 255 // 219
        frame[0, : 360 * strips.half_top] = 0
        frame[y1:] = rng.integers(0, 256, (480 - y1, 720))
        out.append(frame)
    return out


def test_the_rule_on_frames_made_here():
    """The rule alone, on bikes' six shots with the analog strips painted in (no coding): the
    box is the active picture, even; the same shots at a fifth of their brightness (a night
    film) do not vote, and nothing is cropped; off, the bar rule keeps the ramp."""
    shots = bikes_shots(1)
    frames = _painted(shots, ANALOG)
    assert BorderCrop().detect(frames, 720, 480) == CropBox(
        6, 2, 704, 476, "detected", (2, 4, 1, 2)
    )
    assert BorderCrop(CropConfig(edges=False)).detect(frames, 720, 480).x == 4
    night = _painted(shots, Strips(), gain=0.2)
    assert BorderCrop().detect(night, 720, 480).source == "full"
    assert BorderCrop().detect(_painted(shots, Strips()), 720, 480).source == "full"


def test_the_record_names_the_strips_only_where_there_are_some():
    """summary.json's crop keeps its keys for a film without strips (byte-identical summaries'
    crop section); with strips it gains `strips`, and the console and report words name them.
    A negative zone is refused when the settings are read."""
    from core.film import CropRecord
    from pipeline.data.config import load_config
    from pipeline.inspection.report_data import crop_text

    clean = CropRecord.of(0, 0, 720, 480, "full", (0, 0, 0, 0))
    assert clean.to_dict() == {"x": 0, "y": 0, "w": 720, "h": 480, "source": "full"}
    assert clean.line() == ""
    found = CropRecord.of(6, 2, 704, 476, "detected", (2, 4, 1, 2))
    assert found.to_dict()["strips"] == [2, 4, 1, 2]
    assert CropRecord.from_dict(found.to_dict()).strips == [2, 4, 1, 2]
    assert found.line() == "dark edges cropped: left 2, right 4, top 1, bottom 2 px"
    assert (
        crop_text(found)
        == "6, 2, 704, 476 (detected; dark edges cropped: left 2, right 4, top 1, bottom 2 px)"
    )
    with pytest.raises(ValueError, match="crop.edge_rows must be 0 or more"):
        load_config(None, ["crop.edge_rows=-1"])
