"""Shards for the trainer's tests, made from real frames of tests/media/bikes.mp4.

`write_bikes_dataset` cuts the video into 2-second clips of 16 frames at 8 fps, as the pipeline
does, and writes them with the pipeline's ShardWriter. Two films come out of it (the second is
the first mirrored, a stand-in for another film) so film boundaries are tested; rows are written
out of time order so the trainer has to sort; one clip is left uncaptioned so runs must break.
Motion and caption columns are filled directly (the real stages fill them in the pipeline).
`caption_film` fills the captions of a film folder the real pipeline wrote (captions pending),
keeping its measured motion.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from core.record import Clip, make_clip_id
from core.shards import ShardConfig, ShardWriter, read_clips
from core.video import encode_image, encode_mp4
from prompts.game import instruction_text
from stages.motion_levels import DEFAULT_LEVELS

BIKES = Path(__file__).parent / "media" / "bikes.mp4"
CLIP_FRAMES, CLIP_FPS = 16, 8.0
SIZE = (96, 144)  # small, with the 480x720 aspect ratio
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
    """All frames at 8 fps, resized to SIZE: (N x H x W x 3 uint8, source fps)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        source_fps = float(stream.average_rate)
        frames = [
            f.to_ndarray(format="rgb24", width=SIZE[1], height=SIZE[0])
            for f in container.decode(stream)
        ]
    step = source_fps / CLIP_FPS
    picks = np.arange(0, len(frames), step).astype(int)
    return np.stack([frames[i] for i in picks]), source_fps


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
            _clip(film, i, film_frames[i * CLIP_FRAMES : (i + 1) * CLIP_FRAMES], source_fps)
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


def caption_film(film_dir: Path, out: Path) -> Path:
    """Copy a pipeline-written film folder's clips with captions filled in (for `bikes_dataset`)."""
    clips = sorted(read_clips(film_dir), key=lambda c: c.clip_index)
    for clip in clips:
        if clip.motion_scope is None:  # keep the pipeline's motion where its stage ran
            fill_motion(clip, clip.clip_index)
        fill_captions(clip, clip.clip_index)
    with ShardWriter(out / Path(film_dir).name / "shards", "clips") as writer:
        writer.write_all(clips)
    return out


def _clip(film: str, index: int, frames: np.ndarray, source_fps: float) -> Clip:
    frames = np.ascontiguousarray(frames)
    start = index * CLIP_FRAMES
    indices = [round(i * source_fps / CLIP_FPS) for i in range(start, start + CLIP_FRAMES)]
    return Clip(
        clip_id=make_clip_id(film, indices, (0, 0, 640, 272), SIZE, "fixture"),
        film_id=film,
        film_name=film,
        ip="bikes",
        segment_index=0,
        scene_index=0,
        clip_index=index,
        start_frame=indices[0],
        end_frame=indices[-1] + 1,
        start_time=index * 2.0,
        end_time=index * 2.0 + 2.0,
        frame_indices=indices,
        crop_x=0,
        crop_y=0,
        crop_w=640,
        crop_h=272,
        height=SIZE[0],
        width=SIZE[1],
        num_frames=CLIP_FRAMES,
        fps=CLIP_FPS,
        source_fps=source_fps,
        video=encode_mp4(frames, CLIP_FPS),
        first_frame=encode_image(frames[0]),
    )


def tiny_settings(backbones: dict) -> dict:
    """Settings that point a config at tiny backbones and shrink every trained part."""
    return {
        **backbones,
        "num_workers": 0,
        "decoder_lora_rank": 4,
        "decoder_lora_alpha": 4,
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
    from trainer.config import CONFIG_CLASSES, set_field

    config = CONFIG_CLASSES[phase]()
    values = {**tiny_settings(backbones), "shards": [str(shards)], "out_dir": str(out), **settings}
    for name, value in values.items():
        if name in CONFIG_CLASSES[phase].__dataclass_fields__:
            set_field(config, name, value, "test")
    return config
