"""Frames in memory (core/frames.py): planes fitted without RGB, each representation on request,
sources of any pixel format and colour matrix, and scene scores identical to PySceneDetect's."""

from __future__ import annotations

import statistics

import av
import cv2
import numpy as np
import pytest
from conftest import BIKES, local_config
from scenedetect import FrameTimecode
from scenedetect.detectors import AdaptiveDetector, ContentDetector

from core.frames import ClipFrames, yuv_planes
from core.shards import read_clips
from core.video import decode_mp4
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.clips import ClipConfig, fit_frame, fit_i420
from stages.scenes import FastAdaptiveDetector, FastContentDetector

REGION = (100, 20, 408, 232)  # an odd-free 3:2 box of bikes' 640x272 picture, enlarged to 720x480


def _bikes_frames(count: int = 8, start: int = 40) -> list[av.VideoFrame]:
    frames = []
    with av.open(str(BIKES)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index >= start:
                frames.append(frame)
            if len(frames) == count:
                break
    return frames


def test_planes_fitted_into_i420_match_the_rgb_reference():
    config = ClipConfig()
    for frame in _bikes_frames():
        reference = fit_frame(frame.to_ndarray(format="rgb24"), REGION, config).astype(int)
        fitted = ClipFrames(fit_i420(yuv_planes(frame), REGION, config)[None]).rgb()[0]
        assert fitted.shape == (480, 720, 3)
        assert np.abs(fitted.astype(int) - reference).mean() < 2.0


def test_pad_mode_bars_are_black_in_every_plane():
    frame = _bikes_frames(1)[0]
    i420 = fit_i420(yuv_planes(frame), (0, 0, 640, 272), ClipConfig(resize="pad"))
    rgb = ClipFrames(i420[None]).rgb()[0]
    assert rgb[:60].max() <= 2 and rgb[-60:].max() <= 2  # letterbox above and below
    assert rgb[200:280].mean() > 20  # the picture in between


def test_each_representation_agrees_with_the_one_made_from_rgb():
    config = ClipConfig()
    frames = _bikes_frames()
    planar = ClipFrames(np.stack([fit_i420(yuv_planes(f), REGION, config) for f in frames]))
    rgb = ClipFrames.from_rgb(planar.rgb())
    assert planar.shape == rgb.shape == (8, 480, 720)
    for size in [(120, 180), (240, 360)]:
        grey_planar, grey_rgb = np.stack(planar.grey(size)), np.stack(rgb.grey(size))
        assert grey_planar.shape == (8, *size)
        assert np.abs(grey_planar.astype(int) - grey_rgb.astype(int)).mean() < 1.0
        assert planar.grey(size) is planar.grey(size)  # computed once
    assert planar.luma().shape == (8, 480, 720) and planar.luma().base is not None  # a view
    assert np.abs(planar.i420(3).astype(int) - rgb.i420(3).astype(int)).mean() < 1.5


def test_rgb_frames_are_checked():
    with pytest.raises(ValueError, match="N x H x W x 3 uint8"):
        ClipFrames.from_rgb(np.zeros((2, 8, 8), np.uint8))
    with pytest.raises(ValueError, match=r"N x \(H \* 3/2\) x W"):
        ClipFrames(np.zeros((2, 7, 8), np.uint8))


@pytest.fixture(scope="module")
def bikes_small() -> list[np.ndarray]:
    """Every frame of bikes.mp4 as 256x108 BGR, decoded once for both detectors (read-only)."""
    frames = []
    with av.open(str(BIKES)) as container:
        for frame in container.decode(video=0):
            small = frame.reformat(width=256, height=108, format="bgr24").to_ndarray()
            small.flags.writeable = False
            frames.append(small)
    return frames


@pytest.mark.parametrize(
    "fast,library",
    [(FastAdaptiveDetector, AdaptiveDetector), (FastContentDetector, ContentDetector)],
)
def test_fast_detectors_score_exactly_like_pyscenedetect(bikes_small, fast, library):
    ours, theirs = fast(), library()
    ours_cuts, their_cuts = [], []
    for index, small in enumerate(bikes_small):
        timecode = FrameTimecode(index, 25.0)
        ours_cuts += ours.process_frame(timecode, small)
        their_cuts += theirs.process_frame(timecode, small)
        assert ours._frame_score == theirs._frame_score
    assert ours_cuts == their_cuts and len(ours_cuts) >= 4


def test_the_windows_median_is_numpys_to_the_last_bit():
    """The adaptive rule's median of a window's scores (`statistics.median`) is numpy's, for windows of
    every length it meets (odd and even), on random scores mixed with
    ties, zeros and values whose halved sum rounds."""
    rng = np.random.default_rng(7)
    scores = [0.0, 0.0, 1e-300, 3.0000000000000004, 17.25, 0.1, 0.2, 0.30000000000000004]
    for _ in range(5000):
        count = int(rng.integers(1, 10))
        window = [float(v) for v in rng.choice(scores + list(rng.random(8) * 60), count)]
        assert statistics.median(window) == float(np.median(window))


def _pattern(index: int, height: int = 240, width: int = 320) -> np.ndarray:
    """Saturated colour bars and a grey ramp, drifting 3 px a frame: colour matrices show."""
    bars = np.array(
        [[230, 30, 30], [30, 200, 40], [40, 40, 220], [220, 210, 40], [200, 40, 200], [128] * 3],
        np.uint8,
    )
    x = (np.arange(width) + 3 * index) % width
    rgb = bars[(x * len(bars)) // width][None].repeat(height, 0)
    rgb[height // 2 :] = np.linspace(16, 240, width).astype(np.uint8)[None, :, None]
    return rgb


def _film(path, pix_fmt: str, colorspace: int | None = None, range_: int | None = None):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 320, 240, pix_fmt
        stream.options = {"crf": "12", "preset": "ultrafast"}
        if colorspace is not None:
            stream.codec_context.colorspace = colorspace
        if range_ is not None:
            stream.codec_context.color_range = range_
        for index in range(60):
            frame = av.VideoFrame.from_ndarray(_pattern(index), format="rgb24").reformat(
                format=pix_fmt, dst_colorspace=colorspace, dst_color_range=range_
            )
            frame.pts = index
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _clip_frames(film, out) -> np.ndarray:
    # the decoded and fitted frames are what is compared: no motion, and no overlay pass (the
    # bars carry no text; the pass's 96 text detector calls are most of this film's run)
    config = local_config(motion__enabled="false", overlays__enabled="false")
    result = run_film(film, out, config, load_ip(None))
    [clip] = list(read_clips(result.film_dir))
    return decode_mp4(clip.video).astype(int)


@pytest.fixture(scope="module")
def reference_clip(tmp_path_factory) -> np.ndarray:
    """The clip of the plain yuv420p film, which every other format is compared with."""
    folder = tmp_path_factory.mktemp("reference")
    return _clip_frames(_film(folder / "ref.mp4", "yuv420p"), folder / "ref")


@pytest.mark.slow
@pytest.mark.parametrize(
    "pix_fmt,colorspace,range_",
    [("yuv420p", 1, None), ("yuvj420p", None, 2), ("yuv420p10le", None, None)],
    ids=["bt709-tagged", "full-range", "10-bit"],
)
def test_sources_of_other_formats_and_matrices_give_the_same_clip(
    reference_clip, tmp_path, pix_fmt, colorspace, range_
):
    other = _clip_frames(_film(tmp_path / "other.mp4", pix_fmt, colorspace, range_), tmp_path / "o")
    assert np.abs(other - reference_clip).mean() < 2.5


def test_decoder_threads_do_not_change_the_output(tmp_path):
    film = _film(tmp_path / "f.mp4", "yuv420p")
    rows = []
    for threads in (1, 3):
        # every column is compared, the overlay pass's too, with 8 sampled frames for its 48
        # (its text detector calls were half of each run: 1.1 CPU-s a run, 0.5 with 8)
        config = local_config(run__decode_threads=threads, overlays__samples=8)
        result = run_film(film, tmp_path / f"t{threads}", config, load_ip(None))
        rows.append([clip.to_row() for clip in read_clips(result.film_dir)])
    assert rows[0] and rows[0] == rows[1]


def test_one_rgb_frame_is_the_frame_of_all_of_them():
    """Each frame converted alone equals its place in `rgb()`, which converts every frame into
    one array made beforehand (not into new arrays stacked afterwards)."""
    frames = _bikes_frames(5)
    planar = ClipFrames(np.stack([fit_i420(yuv_planes(f), REGION, ClipConfig()) for f in frames]))
    singles = [planar.rgb_frame(k) for k in range(len(frames))]  # before rgb(): converted alone
    assert np.array_equal(planar.rgb(), np.stack(singles))
    single = planar.rgb_frame(1)
    assert np.array_equal(single, planar.rgb()[1])
    assert np.array_equal(ClipFrames.from_rgb(planar.rgb()).rgb_frame(2), planar.rgb()[2])


def test_shrinking_by_twice_or_more_averages_blocks_first_and_stays_an_area_resize():
    frame = _bikes_frames(1)[0].to_ndarray(format="rgb24")
    big = cv2.resize(frame, (1920, 1080), interpolation=cv2.INTER_CUBIC)  # a 1080p picture
    config = ClipConfig(resize="stretch")
    fitted = fit_frame(big, (0, 0, 1920, 1080), config)
    direct = cv2.resize(big, (720, 480), interpolation=cv2.INTER_AREA)
    assert not np.array_equal(fitted, direct)  # the block means did run
    assert np.abs(fitted.astype(int) - direct.astype(int)).mean() < 0.5
    small = fit_frame(big[:, :1300], (0, 0, 1300, 1080), config)  # under twice: OpenCV alone
    assert np.array_equal(
        small, cv2.resize(big[:, :1300], (720, 480), interpolation=cv2.INTER_AREA)
    )


def test_a_pass_for_some_frames_skips_others_and_decodes_those_alike():
    """FrameReader.frames(only=...) (the overlay pass's spread samples): the frames no other
    refers to are skipped unless wanted, and the wanted ones are the full pass's, pixel for
    pixel (bikes.mp4 has such B-frames)."""
    from core.video import FrameReader
    from stages.probe import Probe

    film = Probe().process(BIKES)
    wanted = set(range(0, film.num_frames, 7))
    passes = []
    for only in (None, wanted):
        reader = FrameReader(str(BIKES), film.frame_pts)
        count, planes = 0, {}
        for index, frame in reader.frames(0, film.num_frames, only):
            count += 1
            if index in wanted:
                planes[index] = frame.to_ndarray(format="gray")
        passes.append((count, planes))
    (everything, full), (fewer, some) = passes
    assert everything == film.num_frames and fewer < everything
    assert some.keys() == full.keys() == wanted
    assert all(np.array_equal(some[i], full[i]) for i in wanted)


def test_the_decoders_own_threads_are_timed():
    """With frame threading the decoding runs in FFmpeg's threads, which the segment thread's
    clock does not see: the reader adds their CPU, and adds none with one thread."""
    from core.video import FrameReader
    from stages.probe import Probe

    film = Probe().process(BIKES)
    seconds = {}
    for threads in (1, 2):
        reader = FrameReader(str(BIKES), film.frame_pts, threads)
        for _ in range(3):  # bikes decodes in about 0.1 CPU-s: enough clock ticks to see
            assert sum(1 for _ in reader.frames(0, film.num_frames)) == film.num_frames
        seconds[threads] = reader.codec_thread_seconds
    assert seconds[1] == 0.0 and seconds[2] > 0.0
