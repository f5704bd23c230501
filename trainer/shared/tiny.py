"""Tiny random-weight backbones written to disk in the real checkpoints' formats (test-only).

The trainer only loads real checkpoint folders; tests and smoke runs call `write_tiny_backbones`
to create small ones with random weights, so the same loading code runs. Nothing here is used
unless asked for explicitly (`python -m trainer.tiny OUT_DIR`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

# Words the tiny tokenizers know: the game-instruction vocabulary plus filler.
_WORDS = (
    "character motion background girl boy man woman cat bike bikes road street city forest "
    "sky day night riding running flying walking quickly slowly gently fast turning on the a "
    "in of and with through along people rider cyclist cycling moving looking standing"
).split()

# The tiny backbones' configurations: the one table that the folders written below and the GPU
# bench's in-memory CPU models (bench/gpu/models.py) are built from. The shot has 4 text tokens +
# 16 CLIP patches = 20 tokens, which is the tiny decoder's text slot; frames of 16x24 become 4x6
# latents.
_CLIP_VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=32,
    patch_size=8,
)
_TEXT_TOKENS = 4
_T5_WIDTH = 24
_FRAME = (16, 24)  # height, width
TINY_CONFIGS: dict = {
    "clip": _CLIP_VISION,
    "t5": dict(
        d_model=_T5_WIDTH,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
    ),
    "cogvideox": dict(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        time_embed_dim=16,
        text_embed_dim=_T5_WIDTH,
        num_layers=2,
        sample_height=_FRAME[0] // 4,
        sample_width=_FRAME[1] // 4,
        sample_frames=17,
        max_text_seq_length=_TEXT_TOKENS
        + (_CLIP_VISION["image_size"] // _CLIP_VISION["patch_size"]) ** 2,
    ),
    "cogvideox_vae": dict(
        down_block_types=("CogVideoXDownBlock3D",) * 3,
        up_block_types=("CogVideoXUpBlock3D",) * 3,
        block_out_channels=(8, 8, 16),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=4,
        sample_height=_FRAME[0],
        sample_width=_FRAME[1],
    ),
    "mistral": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        sliding_window=None,
    ),
    "text_tokens": _TEXT_TOKENS,
}


def write_tiny_backbones(out_dir: str | Path, seed: int = 0) -> dict[str, str | int]:
    """Write CLIP, T5 (+ tokenizer), CogVideoX and Mistral tiny folders; return config settings."""
    out = Path(out_dir)
    torch.manual_seed(seed)
    _write_clip(out / "clip")
    _write_t5(out / "t5")
    _write_cogvideox(out / "cogvideox")
    _write_mistral(out / "mistral")
    return {
        "clip_model": str(out / "clip"),
        "t5_model": str(out / "t5"),
        "t5_tokenizer": str(out / "t5"),
        "cogvideox_model": str(out / "cogvideox"),
        "mistral_model": str(out / "mistral"),
        "text_tokens": _TEXT_TOKENS,
        "frame_height": _FRAME[0],
        "frame_width": _FRAME[1],
    }


def word_tokenizer(special: dict[str, str]):
    """A word-level fast tokenizer trained on the fly (the real ones need files we cannot fetch)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(True),
        ]
    )
    specials = list(dict.fromkeys(special.values()))
    corpus = _WORDS + list("0123456789-;:.,[]/") + ["INST"]
    tokenizer.train_from_iterator(
        [" ".join(corpus)], trainers.WordLevelTrainer(special_tokens=specials)
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)


def write_tiny_clip(path: Path, projection_dim: int = 16) -> Path:
    """A random CLIPModel (vision and text, 32x32 images) with a word tokenizer, saved in
    transformers format: what the pipeline's clip scores and the trainer's CLIP metrics load."""
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    return write_random_clip(path, projection_dim, _CLIP_VISION, text)


def write_random_clip(path: Path, projection_dim: int, vision: dict, text: dict) -> Path:
    """A random CLIPModel of the given tower sizes, with the word tokenizer, saved in
    transformers format (bench.gpu.clip writes ViT-L/14's size with it)."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    tokenizer = word_tokenizer(
        {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "bos_token": "<s>"}
    )
    special = ("eos_token_id", "pad_token_id", "bos_token_id")
    text_config = dict(text, vocab_size=len(tokenizer), max_position_embeddings=77)
    text_config |= {name: getattr(tokenizer, name) for name in special}
    config = CLIPConfig(
        text_config=text_config, vision_config=vision, projection_dim=projection_dim
    )
    CLIPModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _write_clip(path: Path) -> None:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(**TINY_CONFIGS["clip"], projection_dim=16)
    CLIPVisionModel(config).save_pretrained(path)


def _write_t5(path: Path) -> None:
    from transformers import T5Config, T5EncoderModel

    tokenizer = word_tokenizer({"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"})
    config = T5Config(
        vocab_size=len(tokenizer),
        **TINY_CONFIGS["t5"],
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    T5EncoderModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def _write_cogvideox(path: Path) -> None:
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDDIMScheduler,
        CogVideoXTransformer3DModel,
    )

    vae = AutoencoderKLCogVideoX(**TINY_CONFIGS["cogvideox_vae"])
    transformer = CogVideoXTransformer3DModel(**TINY_CONFIGS["cogvideox"])
    scheduler = CogVideoXDDIMScheduler(
        prediction_type="v_prediction",
        rescale_betas_zero_snr=True,
        timestep_spacing="trailing",
        snr_shift_scale=3.0,
    )
    vae.save_pretrained(path / "vae")  # type: ignore[attr-defined]
    transformer.save_pretrained(path / "transformer")  # type: ignore[attr-defined]
    scheduler.save_pretrained(path / "scheduler")  # type: ignore[attr-defined]


def mistral_tokenizer():
    return word_tokenizer(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"}
    )


def _write_mistral(path: Path) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = mistral_tokenizer()
    config = MistralConfig(
        vocab_size=len(tokenizer),
        **TINY_CONFIGS["mistral"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    MistralForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m trainer.tiny OUT_DIR")
    for key, value in write_tiny_backbones(sys.argv[1]).items():
        print(f"--set {key}={value}")
