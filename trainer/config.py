"""Training configuration, declared once: one dataclass per phase.

Each field's default is the paper's value (or the released code's where the paper is silent) and
its docstring is its help text. A YAML file sets fields by name, either at the top level (for every
phase that has the field) or under a phase section (`encoder:`, `mllm:`, `adapt:`), and the command
line's `--set name=value` sets one field last. Unknown names are errors, never ignored.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.settings import coerce, field_docs

PHASES = ("encoder", "mllm", "adapt")


@dataclass
class TrainConfig:
    # data
    shards: list[str] = field(default_factory=list)
    """Shard files or folders (a film folder, or a dataset folder holding several)."""
    out_dir: str = "runs/train"
    """Checkpoints, metrics.jsonl and exported LoRA adapters go here."""
    frame_height: int = 480
    """Frames are resized to this height on load (the clip contract is 480x720)."""
    frame_width: int = 720
    num_frames: int = 17
    """Frames given to the decoder: the 16 of a clip, then the last repeated (the VAE needs 4k+1)."""
    num_workers: int = 2
    """DataLoader worker processes per rank (0: load in the training process)."""
    # backbones: local folders (or hub names where a network exists)
    clip_model: str = "checkpoints/CLIP-ViT-B-16-laion2B-s34B-b88K"
    """CLIP vision checkpoint in transformers format; the first frame's features come from it."""
    t5_model: str = "checkpoints/CogVideoX-2b/text_encoder"
    """T5 encoder for the motion description (CogVideoX-2B ships t5-v1_1-xxl as text_encoder)."""
    t5_tokenizer: str = "checkpoints/CogVideoX-2b/tokenizer"
    cogvideox_model: str = "checkpoints/CogVideoX-2b"
    """diffusers CogVideoX folder with transformer/, vae/ and scheduler/."""
    mistral_model: str = "checkpoints/Mistral-7B-Instruct-v0.1"
    # shot encoder E_a
    text_tokens: int = 30
    """Motion-description tokens of E_a; with CLIP's patches they must fill the decoder's text slot."""
    clip_layer: int = -2
    """CLIP hidden state used (-2: the penultimate block, as the release)."""
    # optimisation
    max_steps: int = 1000
    lr: float = 1e-4
    lr_warmup_steps: int = 0
    """Linear learning-rate warm-up; the paper gives none."""
    weight_decay: float = 0.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    batch_size: int = 1
    """Samples per rank and step."""
    seed: int = 0
    # bookkeeping
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 2
    device: str = "auto"
    """auto: cuda:LOCAL_RANK when a GPU exists, else cpu."""
    dtype: str = "auto"
    """auto: bf16 on GPU (frozen backbones in bf16, autocast), fp32 on CPU."""
    gradient_checkpointing: bool = False
    """Recompute the decoder's / LLM's activations in the backward pass (less memory, ~30% slower)."""


@dataclass
class DecoderFields:
    decoder_lora_rank: int = 64
    decoder_lora_alpha: int = 64
    decoder_lora_targets: list[str] = field(
        default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"]
    )
    """The 3D attention's query/key/value and output projections."""
    motion_hidden: int = 512
    """Width of the motion-scope MLP (sinusoid -> Linear -> SiLU -> Linear, last zero-initialised)."""


@dataclass
class EncoderConfig(DecoderFields, TrainConfig):
    """Phase (a): E_a warm-up with D_a frozen, then E_a + D_a jointly, diffusion loss."""

    lr: float = 2e-4
    encoder_warmup_steps: int = 10_000
    max_steps: int = 90_000
    """10k warm-up + 80k joint steps."""


@dataclass
class MllmConfig(TrainConfig):
    """Phase (b): next game state prediction over game sequences, E_a frozen."""

    encoder_checkpoint: str = "runs/encoder"
    """Phase (a) output folder (its latest checkpoint) or one checkpoint folder: the trained E_a."""
    lr: float = 5e-5
    max_steps: int = 15_000
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    max_turns: int = 4
    """Clips per game sequence (history + target); shorter where a film's run of captioned clips is.
    The paper trains short and plays long with a sliding window; it gives no number."""
    mse_weight: float = 0.5
    """alpha: weight of the MSE to the target shot's E_a representation (release: 1.0)."""
    cosine_weight: float = 0.5
    """beta: weight of (1 - cosine similarity) (paper ablation; 0 drops the term, as the release)."""


@dataclass
class AdaptConfig(DecoderFields, TrainConfig):
    """Phase (c): D_a fine-tuned on the frozen MLLM's predicted representations."""

    encoder_checkpoint: str = "runs/encoder"
    """Phase (a) output: E_a and the decoder's LoRA and motion MLP to start from."""
    mllm_checkpoint: str = "runs/mllm"
    """Phase (b) output: the frozen MLLM."""
    lr: float = 5e-5
    max_steps: int = 10_000
    max_turns: int = 4


CONFIG_CLASSES = {"encoder": EncoderConfig, "mllm": MllmConfig, "adapt": AdaptConfig}


class ConfigError(ValueError):
    pass


def load_config(phase: str, path: str | Path | None = None, overrides: list[str] | None = None):
    if phase not in CONFIG_CLASSES:
        raise ConfigError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    config = CONFIG_CLASSES[phase]()
    if path:
        apply_mapping(config, phase, read_yaml(path), source=str(path))
    apply_overrides(config, overrides or [])
    return config


def apply_overrides(config, items: list[str]) -> None:
    """`name=value` strings; values are read as YAML (numbers, true/false, [lists])."""
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected name=value")
        set_field(config, name.strip(), yaml.safe_load(raw), "--set")


def config_from_dict(phase: str, data: dict):
    """Rebuild a config saved in a checkpoint (plain dict of fields)."""
    config = CONFIG_CLASSES[phase]()
    for name, value in data.items():
        set_field(config, name, value, "checkpoint")
    return config


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def apply_mapping(config, phase: str, data: dict, source: str) -> None:
    """Top-level keys apply where the phase has them; a phase section applies to that phase only."""
    names = {f.name for f in dataclasses.fields(config)}
    every_phase = set().union(
        *({f.name for f in dataclasses.fields(c)} for c in CONFIG_CLASSES.values())
    )
    for key, value in data.items():
        if key in PHASES:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: section '{key}' must be a mapping")
            if key == phase:
                for name, item in value.items():
                    set_field(config, name, item, f"{source} [{key}]")
        elif key in names:
            set_field(config, key, value, source)
        elif key not in every_phase:
            raise ConfigError(f"{source}: unknown setting '{key}'")


def set_field(config, name: str, value, source: str) -> None:
    hints = typing.get_type_hints(type(config))
    if name not in hints:
        raise ConfigError(
            f"{source}: unknown setting '{name}' for phase "
            f"{type(config).__name__} (see `animegamer train --help`)"
        )
    try:
        setattr(config, name, coerce(value, hints[name]))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {name}={value!r}: {exc}") from None


def describe(phase: str) -> list[tuple[str, object, str]]:
    """(name, default, help) of each field of a phase, for --help."""
    cls = CONFIG_CLASSES[phase]
    docs = field_docs(cls)
    default = cls()
    return [
        (f.name, getattr(default, f.name), docs.get(f.name, "")) for f in dataclasses.fields(cls)
    ]
