"""What the trainer tests train on, a pytest plugin of tests/conftest.py: shards of real bikes.mp4
frames (the `shards` fixture), a tiny InternVL and tiny backbones built offline from configs
(`tiny_internvl`, `backbones`), and phase configs that point at them."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from conftest import (
    BIKES,
    CLIP_FPS,
    CLIP_FRAMES,
    built_once,
    make_clip,
)

from core.record import Clip, make_clip_id
from core.shards import ShardConfig, ShardWriter, read_clips
from core.video import encode_image, encode_mp4
from prompts.game import instruction_text
from stages.base import clip_schema
from stages.motion_levels import DEFAULT_LEVELS

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
