"""Random-weight models at the real sizes (and tiny ones for CPU tests) for `python -m bench.gpu`.

Speed does not depend on the values of the weights, so the GPU benchmark builds every network from
its published configuration with random weights, on the GPU, instead of downloading it:

- InternVL2.5-8B (InternViT-300M-448px-V2.5 + InternLM2.5-7B-chat, written in the transformers-native
  InternVL layout with the LLM as a Llama of the same shapes) is written to a local checkpoint
  folder with a tokenizer built here, because the caption engines load from a folder;
- the trainer's backbones (CLIP ViT-B/16, T5 v1.1 XXL, CogVideoX-2B, Mistral-7B) are built in
  memory and handed to the trainer in place of its from-disk loaders (`random_backbones`), so the
  trainer's own phase classes, models and optimiser step run unchanged.

Nothing here is used by the pipeline or the trainer; a real run always loads real checkpoints.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from prompts import load_prompt
from trainer.shared.tiny import TINY_CONFIGS

# ---- configurations (the released checkpoints' config.json values) ---------------------------

INTERNVL_2_5_8B = {
    "vision": dict(  # InternViT-300M-448px-V2_5
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        image_size=[448, 448],
        patch_size=[14, 14],
        use_qk_norm=False,
        norm_type="layer_norm",
        layer_norm_eps=1e-6,
        layer_scale_init_value=0.1,
    ),
    "text": dict(  # internlm2_5-7b-chat: a Llama with these shapes
        model_type="llama",
        architectures=["LlamaForCausalLM"],  # as -hf checkpoints name it (lmdeploy reads it)
        vocab_size=92553,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
    "tile": 448,
    "max_tiles": 12,
    "image_seq_length": 256,  # (448 / 14)^2 patches, pixel-shuffled by 0.5 x 0.5
}
INTERNVL_TINY = {
    "vision": dict(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=[28, 28],
        patch_size=[14, 14],
    ),
    "text": dict(
        model_type="llama",
        architectures=["LlamaForCausalLM"],
        vocab_size=1200,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    ),
    "tile": 28,
    "max_tiles": 4,
    "image_seq_length": 1,
}

CLIP_VIT_B16 = dict(
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    image_size=224,
    patch_size=16,
)
# openai/clip-vit-large-patch14 (its config.json), which LAION's aesthetic heads read
CLIP_VIT_L14 = dict(CLIP_VIT_B16, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24)
CLIP_VIT_L14 |= dict(num_attention_heads=16, patch_size=14)
CLIP_TEXT_L14 = dict(
    hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12
)
T5_V11_XXL = dict(
    vocab_size=32128,
    d_model=4096,
    d_kv=64,
    d_ff=10240,
    num_layers=24,
    num_heads=64,
    feed_forward_proj="gated-gelu",
)
COGVIDEOX_2B: dict = {}  # diffusers' CogVideoXTransformer3DModel defaults are CogVideoX-2B's
MISTRAL_7B = dict(  # Mistral-7B-Instruct-v0.1 (also MistralConfig's defaults)
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=32768,
    sliding_window=4096,
)

REAL = {
    "clip": CLIP_VIT_B16,
    "t5": T5_V11_XXL,
    "cogvideox": COGVIDEOX_2B,
    "cogvideox_vae": {},
    "mistral": MISTRAL_7B,
    "text_tokens": 30,
}
# the trainer's tiny test backbones, with fixed vocabularies (the bench builds its own tokenizers)
TINY = {
    **TINY_CONFIGS,
    "t5": dict(TINY_CONFIGS["t5"], vocab_size=400),
    "mistral": dict(TINY_CONFIGS["mistral"], vocab_size=500),
}


# ---- tokenizers built here (the real ones are files we cannot fetch) --------------------------


def word_tokenizer(vocab_size: int, specials: dict[str, str], named: dict[str, str] | None = None):
    """A word-level fast tokenizer with exactly `vocab_size` entries.

    Its words are those of the caption prompts and game instructions, then numbered fillers up to
    the real vocabulary size, so the model's embedding and output layers keep their real shapes
    and every id a random model generates decodes to something. Text comes out at about one token
    per word or punctuation mark, close to what the real sub-word tokenizers give on English.
    """
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    named = named or {}
    special = list(dict.fromkeys([*specials.values(), *named.values()]))
    words = _corpus_words()
    vocab: dict[str, int] = {}
    for token in [*special, *words]:
        vocab.setdefault(token, len(vocab))
    if len(vocab) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the {len(vocab)} known words")
    for n in range(vocab_size - len(vocab)):
        vocab[f"w{n}"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials.get("unk_token")))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(True),
        ]
    )
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    extra = {"extra_special_tokens": named} if named else {}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials, **extra)


def _corpus_words() -> list[str]:
    text = " ".join(
        [
            load_prompt("character_match").text,
            load_prompt("game_state").text,
            "Character: Motion: Background: girl boy man woman dragon run fly walk forest sky "
            "quickly slowly gently INST",
        ]
    )
    from tokenizers import pre_tokenizers

    splitter = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(True),
        ]
    )
    return list(dict.fromkeys(piece for piece, _ in splitter.pre_tokenize_str(text)))


# ---- InternVL checkpoint folder ---------------------------------------------------------------

_INTERNVL_IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
_INTERNVL_CHAT = (  # InternLM2-chat's turns, as the InternVL2.5 release uses; text or parts
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<IMG_CONTEXT>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def internvl_config(shape: dict, image_token_id: int):
    from transformers import InternVLConfig

    return InternVLConfig(
        vision_config=dict(shape["vision"]),
        text_config=dict(shape["text"]),
        image_token_id=image_token_id,
        image_seq_length=shape["image_seq_length"],
        downsample_ratio=0.5,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=shape["text"].get("tie_word_embeddings", False),
    )


def internvl_tokenizer(shape: dict):
    return word_tokenizer(
        shape["text"]["vocab_size"],
        {
            "unk_token": "<unk>",
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "pad_token": "</s>",
        },
        _INTERNVL_IMAGE_TOKENS,
    )


def write_internvl(
    path: Path, shape: dict, new_tokens: int, device: str = "cpu", dtype=torch.bfloat16
) -> Path:
    """Write a random-weight InternVL checkpoint folder of `shape` (config, weights, processor).

    Its generation config asks for exactly `new_tokens` tokens (min = max), so every answer has the
    same length and generated tokens per second is exact. The weights are made on `device`.
    """
    from transformers import GenerationConfig, InternVLForConditionalGeneration, InternVLProcessor
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    tokenizer = internvl_tokenizer(shape)
    image_token_id = tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>")
    processor = InternVLProcessor(
        image_processor=_image_processor(shape),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(),
        image_seq_length=shape["image_seq_length"],
        chat_template=_INTERNVL_CHAT,
    )
    config = internvl_config(shape, image_token_id)
    with torch.device(device):
        model = InternVLForConditionalGeneration._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path.mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(path)
    model.save_pretrained(path)
    del model
    return path


def _image_processor(shape: dict):
    """InternVL's dynamic tiling: up to `max_tiles` square tiles plus a thumbnail."""
    settings = dict(
        size={"height": shape["tile"], "width": shape["tile"]},
        crop_to_patches=True,
        min_patches=1,
        max_patches=shape["max_tiles"],
    )
    if torch.cuda.is_available():  # the torchvision processor; it needs torchvision's own ops
        from transformers.models.got_ocr2.image_processing_got_ocr2 import GotOcr2ImageProcessor

        return GotOcr2ImageProcessor(**settings)
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    return GotOcr2ImageProcessorPil(**settings)


# ---- the trainer's backbones, random, in memory ----------------------------------------------


def clip_vision(shape: dict):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return CLIPVisionModel(CLIPVisionConfig(**shape["clip"]))


def t5_encoder(shape: dict):
    from transformers import T5Config, T5EncoderModel

    tokenizer = word_tokenizer(
        shape["t5"]["vocab_size"], {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    )
    config = T5Config(
        **shape["t5"], pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    return T5EncoderModel(config), tokenizer


def cogvideox(shape: dict):
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDDIMScheduler,
        CogVideoXTransformer3DModel,
    )

    scheduler = CogVideoXDDIMScheduler(  # CogVideoX-2B's scheduler_config.json
        prediction_type="v_prediction",
        rescale_betas_zero_snr=True,
        timestep_spacing="trailing",
        snr_shift_scale=3.0,
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        clip_sample=False,
        set_alpha_to_one=True,
    )
    transformer = CogVideoXTransformer3DModel(**shape["cogvideox"])
    return transformer, AutoencoderKLCogVideoX(**shape["cogvideox_vae"]), scheduler


def mistral(shape: dict):
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = word_tokenizer(
        shape["mistral"]["vocab_size"],
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"},
    )
    config = MistralConfig(
        **shape["mistral"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = MistralForCausalLM._from_config(config, attn_implementation="sdpa")
    return model, tokenizer


def decoder_width_and_slot(shape: dict) -> tuple[int, int]:
    """(shot width, shot tokens) of the decoder's text slot, as trainer.models.build.decoder_shape reads
    them from a checkpoint's transformer/config.json."""
    import inspect

    from diffusers import CogVideoXTransformer3DModel

    defaults = {
        name: p.default
        for name, p in inspect.signature(CogVideoXTransformer3DModel.__init__).parameters.items()
    }
    config = {**defaults, **shape["cogvideox"]}
    return (
        config["num_attention_heads"] * config["attention_head_dim"],
        config["max_text_seq_length"],
    )


@contextlib.contextmanager
def _made_on(device: torch.device, dtype: torch.dtype):
    """Parameters are created on `device` in `dtype` (no CPU copy, no fp32 detour for 7B models)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def random_backbones(shape: dict, device: torch.device):
    """Within the block, the trainer's backbone loaders return random models of `shape`.

    `trainer.models.build` calls `trainer.shared.backbones.load_*` and `decoder_shape`; these are
    swapped for builders of the same networks from their configurations, made on `device` in the
    requested dtype and frozen as the real loaders freeze them. A backbone asked for twice is built once
    (frozen weights are shared, as the page cache would share a file read twice).
    """
    from trainer.models import build
    from trainer.shared import backbones

    built: dict = {}

    def once(key, make, dtype):
        if key not in built:
            with _made_on(device, dtype):
                built[key] = make()
        return built[key]

    def load_clip(location, dtype):
        return backbones.frozen(once("clip", lambda: clip_vision(shape), dtype))

    def load_t5(model_location, tokenizer_location, dtype):
        model, tokenizer = once("t5", lambda: t5_encoder(shape), dtype)
        return backbones.frozen(model), tokenizer

    def load_cogvideox(location, dtype, *schedule):  # the release schedule, as built
        transformer, vae, scheduler = once("cogvideox", lambda: cogvideox(shape), dtype)
        return backbones.frozen(transformer), backbones.frozen(vae), scheduler

    def load_mistral(location, dtype):
        model, tokenizer = once("mistral", lambda: mistral(shape), dtype)
        return backbones.frozen(model), tokenizer

    swaps = {
        (backbones, "load_clip_vision"): load_clip,
        (backbones, "load_t5"): load_t5,
        (backbones, "load_cogvideox"): load_cogvideox,
        (backbones, "load_mistral"): load_mistral,
        (build, "decoder_shape"): lambda config: decoder_width_and_slot(shape),
    }
    saved = {key: getattr(*key) for key in swaps}
    for (module, name), replacement in swaps.items():
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
        built.clear()
