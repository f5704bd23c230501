"""Loading the pretrained backbones from local folders (or hub names where a network exists).

A missing checkpoint is an error that names the setting and the path: the trainer never falls back
to random weights. Frozen backbones are loaded in the run's dtype (bf16 on GPU) and switched to
eval mode with gradients off.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class MissingCheckpoint(FileNotFoundError):
    pass


def resolve(
    setting: str, location: str, needs: tuple[str, ...] = ("config.json",), hub: bool = True
) -> str:
    """Check that `location` is a checkpoint folder holding `needs`, or (with `hub`) a hub name."""
    path = Path(location).expanduser()
    if path.is_dir():
        missing = [n for n in needs if not (path / n).exists()]
        if missing:
            raise MissingCheckpoint(
                f"{setting}={location}: folder lacks {', '.join(missing)}; "
                f"is it the right checkpoint? (see docs/training.md)"
            )
        return str(path)
    if (
        hub
        and _HUB_NAME.match(location)
        and not location.startswith(("./", "../", "checkpoints/", "runs/"))
    ):
        return location  # a hub name: from_pretrained downloads it where a network exists
    raise MissingCheckpoint(
        f"{setting}={location}: no such checkpoint folder; download it and "
        f"point `{setting}` at it (see docs/training.md, 'Training from shards')"
    )


def frozen(module: torch.nn.Module) -> torch.nn.Module:
    module.requires_grad_(False)
    return module.eval()


def load_clip_vision(location: str, dtype: torch.dtype):
    from transformers import CLIPVisionModel

    return frozen(CLIPVisionModel.from_pretrained(resolve("clip_model", location), dtype=dtype))


def load_t5(model_location: str, tokenizer_location: str, dtype: torch.dtype):
    from transformers import AutoTokenizer, T5EncoderModel

    model = T5EncoderModel.from_pretrained(resolve("t5_model", model_location), dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(resolve("t5_tokenizer", tokenizer_location, needs=()))
    return frozen(model), tokenizer


def load_cogvideox(
    location: str, dtype: torch.dtype, noise_shift: float = 3.0, zero_terminal_snr: bool = True
):
    """The transformer, VAE and noise scheduler of a diffusers CogVideoX folder.

    The schedule's SNR shift and zero terminal SNR are settings (the release's values by
    default), so the schedule is the configured one whatever the folder's scheduler file says.
    """
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDDIMScheduler,
        CogVideoXTransformer3DModel,
    )

    root = resolve(
        "cogvideox_model",
        location,
        needs=("transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json"),
    )
    transformer = CogVideoXTransformer3DModel.from_pretrained(
        root, subfolder="transformer", torch_dtype=dtype
    )
    vae = AutoencoderKLCogVideoX.from_pretrained(root, subfolder="vae", torch_dtype=dtype)
    scheduler = CogVideoXDDIMScheduler.from_pretrained(
        root,
        subfolder="scheduler",
        snr_shift_scale=noise_shift,
        rescale_betas_zero_snr=zero_terminal_snr,
        prediction_type="v_prediction",
    )
    return frozen(transformer), frozen(vae), scheduler


def load_mistral(location: str, dtype: torch.dtype):
    from transformers import AutoTokenizer, MistralForCausalLM

    root = resolve("mistral_model", location)
    # sdpa takes the custom 4D mask (bidirectional query block) as it is.
    model = MistralForCausalLM.from_pretrained(root, dtype=dtype, attn_implementation="sdpa")
    return frozen(model), AutoTokenizer.from_pretrained(root)
