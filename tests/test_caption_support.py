"""Shared pieces of the caption tests: real clips from tests/media/bikes.mp4 written as a film
folder, the Sintel reference images, and an engine that answers from what it is shown.

(A module of helpers, not tests; the caption test files import from it.)
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from core.io import write_json_atomic, write_table_atomic
from core.record import Clip, make_clip_id
from core.schema import MANIFEST_SCHEMA, rows_to_table
from core.shards import ShardConfig, ShardWriter
from core.video import encode_mp4
from stages.captioning.engines import CaptionEngine, Completion

ROOT = Path(__file__).resolve().parents[1]
BIKES = ROOT / "tests" / "media" / "bikes.mp4"
SINTEL_REFERENCES = [
    ("Sintel", [ROOT / "manifests/sintel/sintel_1.png", ROOT / "manifests/sintel/sintel_2.png"]),
    ("Scales", [ROOT / "manifests/sintel/scales_1.png", ROOT / "manifests/sintel/scales_2.png"]),
]
CLIP_FRAMES = 16
NUM_TEST_CLIPS = 5


def _bikes_frames() -> np.ndarray:
    with av.open(str(BIKES)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


@pytest.fixture(scope="session")
def clip_videos() -> list[tuple[list[int], bytes]]:
    """Five 16-frame 480x720 clips cut from bikes.mp4 (frames 0, 50, 100, ...; every 2nd frame)."""
    frames = _bikes_frames()
    videos = []
    for n in range(NUM_TEST_CLIPS):
        indices = list(range(n * 50, n * 50 + 2 * CLIP_FRAMES, 2))
        resized = np.stack(
            [cv2.resize(frames[i], (720, 480), interpolation=cv2.INTER_AREA) for i in indices]
        )
        videos.append((indices, encode_mp4(resized, fps=8.0, preset="ultrafast")))
    return videos


def make_clips(clip_videos, motion_levels=(1, 2, 3, 4, 5)) -> list[Clip]:
    clips = []
    for n, ((indices, video), level) in enumerate(zip(clip_videos, motion_levels)):
        clips.append(
            Clip(
                clip_id=make_clip_id("bikes", indices, (0, 0, 640, 272), (480, 720), "crop"),
                film_id="bikes",
                film_name="bikes",
                ip="sintel",
                segment_index=0,
                scene_index=n,
                clip_index=n,
                start_frame=indices[0],
                end_frame=indices[-1] + 1,
                start_time=indices[0] / 25,
                end_time=(indices[-1] + 1) / 25,
                frame_indices=indices,
                crop_x=0,
                crop_y=0,
                crop_w=640,
                crop_h=272,
                height=480,
                width=720,
                num_frames=CLIP_FRAMES,
                fps=8.0,
                source_fps=25.0,
                video=video,
                first_frame=b"jpeg",
                motion_scope=float(level),
                motion_level=level,
                motion_backend="test",
                motion_levels_version="test",
            )
        )
    return clips


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


@pytest.fixture
def film(tmp_path, clip_videos) -> Path:
    return write_film(tmp_path / "bikes", make_clips(clip_videos))


# ---- an engine that answers from what it is shown ------------------------------------------


def image_word(image) -> str:
    """A letters-only word that names one picture: the answer depends on the pixels sent."""
    digest = hashlib.sha256(image.tobytes()).hexdigest()[:8]
    return "x" + digest.translate(str.maketrans("0123456789abcdef", "abcdefghijklmnop"))


def level_in(text: str) -> int:
    return int(text.split("<ML>", 1)[1].split("</ML>", 1)[0])


ADVERB_BY_LEVEL = {1: "barely", 2: "slowly", 3: "steadily", 4: "quickly", 5: "wildly"}


def good_state_answer(request) -> str:
    level = level_in(request.text)
    return (
        f"<S>{image_word(request.images[0])}</S><MD>rides a bike</MD><EV>street</EV>"
        f"<MA>{ADVERB_BY_LEVEL[level]}</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"
    )


def good_character_answer(request) -> str:
    return "[Number]1[Index]1"


class ScriptedEngine(CaptionEngine):
    """Answers each request with `answer(request, attempt)` and returns them shuffled, so that
    only the keys can bind answers to clips. `loads` counts load() calls."""

    def __init__(self, answer, seed: int = 0):
        self.answer = answer
        self.rng = random.Random(seed)
        self.requests = []
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


def answer_well(request, attempt):
    return good_character_answer(request) if "[Num]" in request.text else good_state_answer(request)


def read_raw(clip) -> dict:
    return json.loads(clip.caption_raw)
