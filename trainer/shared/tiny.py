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

# Sizes: the shot has 4 text tokens + 16 CLIP patches = 20 tokens, which is the tiny decoder's
# text slot; frames of 32x48 become 8x12 latents.
TINY = dict(
    clip_hidden=32,
    clip_image=32,
    clip_patch=8,
    t5_dim=24,
    inner_heads=2,
    head_dim=16,
    text_tokens=4,
    frame_height=16,
    frame_width=24,
    mistral_hidden=64,
)


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
        "text_tokens": TINY["text_tokens"],
        "frame_height": TINY["frame_height"],
        "frame_width": TINY["frame_width"],
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


def _write_clip(path: Path) -> None:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(
        hidden_size=TINY["clip_hidden"],
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=TINY["clip_image"],
        patch_size=TINY["clip_patch"],
        projection_dim=16,
    )
    CLIPVisionModel(config).save_pretrained(path)


def _write_t5(path: Path) -> None:
    from transformers import T5Config, T5EncoderModel

    tokenizer = word_tokenizer({"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"})
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=TINY["t5_dim"],
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        feed_forward_proj="gated-gelu",
    )
    T5EncoderModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def _write_cogvideox(path: Path) -> None:
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDDIMScheduler,
        CogVideoXTransformer3DModel,
    )

    vae = AutoencoderKLCogVideoX(
        down_block_types=("CogVideoXDownBlock3D",) * 3,
        up_block_types=("CogVideoXUpBlock3D",) * 3,
        block_out_channels=(8, 8, 16),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=4,
        sample_height=TINY["frame_height"],
        sample_width=TINY["frame_width"],
    )
    patches = (TINY["clip_image"] // TINY["clip_patch"]) ** 2
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=TINY["inner_heads"],
        attention_head_dim=TINY["head_dim"],
        in_channels=4,
        out_channels=4,
        time_embed_dim=16,
        text_embed_dim=TINY["t5_dim"],
        num_layers=2,
        sample_height=TINY["frame_height"] // 4,
        sample_width=TINY["frame_width"] // 4,
        sample_frames=17,
        max_text_seq_length=TINY["text_tokens"] + patches,
    )
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
        hidden_size=TINY["mistral_hidden"],
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        sliding_window=None,
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
