"""Border detection on synthetic films with known bars, including the frames that fool it."""

from __future__ import annotations

import av
import numpy as np
import pytest
from conftest import MEDIA, local_config, make_video

from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.crop import BorderCrop, CropBox, CropConfig, percentile_above
from stages.probe import FilmError, Probe


@pytest.mark.parametrize(
    "border,box",
    [
        ((40, 0), (0, 40, 640, 280)),  # letterbox
        ((0, 80), (80, 0, 480, 360)),  # pillarbox
        ((30, 60), (60, 30, 520, 300)),  # windowbox
        ((0, 0), (0, 0, 640, 360)),  # nothing to crop
    ],
)
def test_detects_known_bars(tmp_path, border, box):
    film = Probe().process(make_video(tmp_path / "bars.mp4", border=border, num_frames=48))
    found = BorderCrop().process(film)
    assert (found.x, found.y, found.w, found.h) == box
    assert found.source == ("full" if border == (0, 0) else "detected")


def _luma(height=360, width=640, bar=40, picture=None):
    frame = np.zeros((height, width), np.uint8)
    if picture is not None:
        frame[bar : height - bar] = picture
    return frame


def test_dark_scenes_fades_and_title_cards_do_not_shrink_the_box():
    rng = np.random.default_rng(0)
    bright = [_luma(picture=rng.integers(60, 250, (280, 640))) for _ in range(3)]
    dark = [_luma(picture=rng.integers(0, 12, (280, 640))) for _ in range(10)]  # night scene
    black = [_luma() for _ in range(5)]  # fade to black
    title = []
    for _ in range(6):  # white text in the middle of a black card
        frame = _luma()
        frame[170:190, 250:390] = 255
        title.append(frame)
    found = BorderCrop().detect(bright + dark + black + title, 640, 360)
    assert (found.x, found.y, found.w, found.h) == (0, 40, 640, 280)


def test_one_glitched_frame_does_not_widen_the_box():
    rng = np.random.default_rng(1)
    frames = [_luma(picture=rng.integers(60, 250, (280, 640))) for _ in range(8)]
    glitch = frames[0].copy()
    glitch[:40] = 200  # a single frame with something bright in the bar
    found = BorderCrop(CropConfig(agree=2)).detect(frames + [glitch], 640, 360)
    assert (found.y, found.h) == (40, 280)


def test_all_black_film_keeps_the_full_frame():
    found = BorderCrop().detect([_luma() for _ in range(5)], 640, 360)
    assert found == CropBox(0, 0, 640, 360, "full")


def test_manifest_override_is_used_and_checked(tmp_path):
    path = make_video(tmp_path / "film.mp4", border=(40, 0), num_frames=60)
    manifest = tmp_path / "ip.yaml"
    manifest.write_text(
        "name: testip\n"
        "films:\n"
        "  - path: film.mp4\n"
        "    overrides: {crop: {box: [20, 60, 600, 240]}}\n"
    )
    ip = load_ip(manifest)
    from pipeline.running.runner import film_config

    # the crop box is what is tested: the overlay pass still runs inside it (and the frames are
    # still sampled, as they are for any film with the pass on), on 8 frames instead of 48 (its
    # text detector calls were most of this film's run: 1.7 CPU-s, 0.6 with 8)
    config = film_config(local_config(overlays__samples=8), ip, path)
    result = run_film(path, tmp_path / "out", config, ip)
    assert result.summary.crop is not None
    assert (result.summary.crop.box, result.summary.crop.source) == ((20, 60, 600, 240), "manifest")
    assert result.summary.ip == "testip"

    film = Probe().process(path)
    with pytest.raises(FilmError, match="does not fit inside the 640x360 picture"):
        BorderCrop(CropConfig(box=[0, 0, 700, 360])).process(film)


def test_the_counted_percentile_test_is_numpys():
    """`percentile_above` gives `np.percentile(...) > threshold` line for line: on small random
    pictures near every count where the answer turns (bars, flat patches, thresholds between
    grey levels, below and above the range) and on frames of the bundled films."""
    rng = np.random.default_rng(3)
    pictures = []
    for _ in range(1500):
        height, width = rng.integers(1, 50, 2)
        low, high = sorted(rng.integers(0, 256, 2))
        picture = rng.integers(low, high + 1, (height, width), dtype=np.uint8)
        picture[rng.random((height, width)) < rng.random()] = rng.integers(0, 256)
        pictures.append(picture)
    for name in ("bikes.mp4", "bigbuckbunny_5s.mp4"):
        with av.open(str(MEDIA / name)) as container:
            pictures += [f.to_ndarray(format="gray") for f in container.decode(video=0)][::25]
    thresholds = (24, 23.5, 0, -1, 255, 100.25)
    for picture in pictures:
        for threshold in thresholds:
            for axis in (0, 1):
                expected = np.percentile(picture, 98, axis=axis) > threshold
                assert np.array_equal(percentile_above(picture, 98, threshold, axis), expected)
