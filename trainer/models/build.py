"""Building the model parts from a config: backbones from their checkpoints, then our layers."""

from __future__ import annotations

import torch

from trainer.models.decoder import ShotDecoder
from trainer.models.encoder import ShotEncoder
from trainer.models.mllm import GameStateModel
from trainer.shared import backbones, checkpoint
from trainer.shared.config import MllmConfig, config_from_dict, saved_settings


def decoder_shape(config) -> tuple[int, int]:
    """(shot width, shot tokens) the decoder's text slot takes: 1920 x 226 for CogVideoX-2B."""
    from diffusers import CogVideoXTransformer3DModel

    root = backbones.resolve(
        "cogvideox_model", config.cogvideox_model, needs=("transformer/config.json",)
    )
    tc = CogVideoXTransformer3DModel.load_config(root, subfolder="transformer")
    return tc["num_attention_heads"] * tc["attention_head_dim"], tc["max_text_seq_length"]


def shot_encoder(config, device: torch.device, dtype: torch.dtype) -> ShotEncoder:
    width, tokens = decoder_shape(config)
    clip = backbones.load_clip_vision(config.clip_model, dtype)
    t5_dtype = torch.float32 if config.t5_dtype == "fp32" else dtype
    t5, tokenizer = backbones.load_t5(config.t5_model, config.t5_tokenizer, t5_dtype)
    encoder = ShotEncoder(
        clip,
        t5,
        tokenizer,
        width,
        config.text_tokens,
        config.clip_layer,
        config.clip_input,
        config.t5_attention_mask,
    )
    if encoder.num_tokens != tokens:
        raise ValueError(
            f"E_a gives {config.text_tokens} text + {encoder.num_tokens - config.text_tokens} CLIP "
            f"tokens = {encoder.num_tokens}, but the decoder's text slot holds {tokens}: "
            f"set text_tokens to {tokens - encoder.num_tokens + config.text_tokens}"
        )
    return encoder.to(device)


def shot_decoder(config, device: torch.device, dtype: torch.dtype) -> ShotDecoder:
    transformer, vae, scheduler = backbones.load_cogvideox(
        config.cogvideox_model, dtype, config.noise_shift, config.zero_terminal_snr
    )
    width, _ = decoder_shape(config)
    if config.gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    return ShotDecoder(
        transformer,
        vae,
        scheduler,
        width,
        config.decoder_lora_rank,
        config.decoder_lora_alpha,
        config.decoder_lora_targets,
        config.motion_hidden,
        config.train_adaln,
    ).to(device)


def game_state_model(config, device: torch.device, dtype: torch.dtype) -> GameStateModel:
    width, tokens = decoder_shape(config)
    llm, tokenizer = backbones.load_mistral(config.mistral_model, dtype)
    if config.gradient_checkpointing:
        llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # transformers checkpoints only in training mode; the frozen weights stay frozen through
        # requires_grad, and Mistral has no dropout to switch on
        llm.train()
    return GameStateModel(
        llm,
        tokenizer,
        width,
        tokens,
        config.lora_rank,
        config.lora_alpha,
        config.lora_dropout,
        config.lora_targets,
        config.prompt_format,
        config.train_embeddings,
        config.train_norms,
    ).to(device)


# Settings that shape a part without being weights: a later phase that rebuilds the part must
# use the values its weights were trained with, or it would differ silently (other CLIP
# features, another LoRA scaling, untrained extra LoRA layers).
ENCODER_SHAPE = ("text_tokens", "clip_layer", "clip_input", "t5_attention_mask", "t5_dtype")
DECODER_SHAPE = (
    "decoder_lora_rank",
    "decoder_lora_alpha",
    "decoder_lora_targets",
    "motion_hidden",
    "noise_shift",
    "zero_terminal_snr",
)


def check_same_shape(config, location: str, names: tuple[str, ...]) -> None:
    """Refuse a config whose `names` differ from the ones saved with the checkpoint."""
    saved = saved_settings(checkpoint.load(location)["config"], config)
    differ = [
        f"{n}={getattr(config, n)!r} (checkpoint: {saved[n]!r})"
        for n in names
        if n in saved and hasattr(config, n) and getattr(config, n) != saved[n]
    ]
    if differ:
        raise ValueError(
            f"{location}: trained with other settings than this run: "
            f"{'; '.join(differ)}; use the checkpoint's values"
        )


def frozen_from_checkpoint(module: torch.nn.Module, location: str, prefix: str) -> torch.nn.Module:
    """Load `prefix` weights of an earlier phase's checkpoint into `module` and freeze it."""
    state = checkpoint.load(location)
    checkpoint.restore_trainable(module, _strip(state["trainable"], prefix), source=str(location))
    module.requires_grad_(False)
    return module.eval()


def trained_mllm(
    location: str, device: torch.device, dtype: torch.dtype
) -> tuple[GameStateModel, MllmConfig]:
    """The MLLM of a phase (b) checkpoint, rebuilt from the config saved with it, frozen."""
    state = checkpoint.load(location)
    if state["phase"] != "mllm":
        raise ValueError(f"{location}: a '{state['phase']}' checkpoint, expected one of phase mllm")
    config = config_from_dict("mllm", state["config"])
    assert isinstance(config, MllmConfig)
    config.lora_dropout = 0.0
    model = game_state_model(config, device, dtype)
    checkpoint.restore_trainable(model, _strip(state["trainable"], "mllm."), source=str(location))
    model.requires_grad_(False)
    return model.eval(), config


def _strip(weights: dict, prefix: str) -> dict:
    return {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
