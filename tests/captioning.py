"""The caption tests' material, a pytest plugin of tests/conftest.py: five real clips of bikes.mp4
(the `clip_videos` and `film` fixtures), the answers a good captioner gives, and the scripted
engine that answers from the pixels it is sent."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from conftest import (
    BIKES,
    CLIP_FRAMES,
    built_once,
    make_clip,
    write_film,
)

from core.record import Clip
from core.video import encode_mp4
from stages.captioning.engines import CaptionEngine, Completion

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
