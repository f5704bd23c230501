"""Training configuration, declared once: one dataclass per phase.

Each field's default is the paper's value (or the released code's where the paper is silent) and
its docstring is its help text. A YAML file sets fields by name, either at the top level (for every
phase that has the field) or under a phase section (`encoder:`, `mllm:`, `adapt:`), and the command
line's `--set name=value` sets one field last. Unknown names are errors, never ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import (
    ConfigError,
    field_docs,
    parse_assignment,
    read_settings_file,
    set_setting,
)

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
    motion_levels: str = ""
    """Level-edges file the shards' motion levels were made with (motion-calibrate writes one).
    Empty: found from the clips' motion_levels_version, as `motion_levels/<version>.json` in a
    folder of or above the shards, else the bundled file of that name. The run records the file."""
    level_scopes: list[float] = field(default_factory=list)
    """Representative motion scope of levels 1..5, read from the levels file when a run starts and
    saved with its checkpoints: `play` renders a predicted level at this scope."""
    include_unusable: bool = False
    """Also train on clips a shard marks not `usable` (a shard without the column: all usable)."""
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
    t5_attention_mask: bool = False
    """Give T5 the padding mask. The release (FrozenT5Embedder, is_plan_3) and CogVideoX call T5
    on the 30 padded tokens with no mask, so padding attends and shapes every token's features."""
    t5_dtype: str = "fp32"
    """T5's precision: `fp32` as the release (its T5 runs with autocast off), or `auto` (the
    run's dtype: bf16 on GPU, half the memory of T5-XXL)."""
    clip_input: str = "resize"
    """How the first frame becomes CLIP's square input: `resize` squeezes the whole frame to
    224x224 (the release); `center_crop` keeps the aspect and crops the middle square (CLIP's own
    recipe, which loses a third of a 720x480 frame's width)."""
    # optimisation
    max_steps: int = 1000
    lr: float = 1e-4
    lr_warmup_steps: int = 0
    """Linear learning-rate warm-up; the paper gives none."""
    weight_decay: float = 0.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    batch_size: int = 1
    """Samples per rank and micro-batch (one forward and backward pass)."""
    grad_accum: int = 1
    """Micro-batches whose gradients add up before each optimiser step."""
    global_batch: int = 0
    """Samples per optimiser step over all ranks; when set, grad_accum is derived from it
    (global_batch / (batch_size x ranks), which must divide). 0: batch_size x ranks x grad_accum."""
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
    """The decoder D_a: its LoRA, its motion MLP, its noise schedule and how it samples."""

    decoder_lora_rank: int = 64
    decoder_lora_alpha: int = 1
    """LoRA scale = alpha / rank: 1 / 64 as the release (SAT's LoraMixin, lora_alpha defaults to 1)."""
    decoder_lora_targets: list[str] = field(
        default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"]
    )
    """The 3D attention's query/key/value and output projections."""
    train_adaln: bool = True
    """Train the decoder's adaLN modulation layers in full (norm1.linear and norm2.linear of every
    block: the path the timestep and the motion scope take), in the joint and adapt phases, as the
    release (its `adaLN_modulations`). false: LoRA and the motion MLP only."""
    motion_hidden: int = 512
    """Width of the motion-scope MLP (sinusoid -> Linear -> SiLU -> Linear, last zero-initialised)."""
    noise_shift: float = 3.0
    """SNR shift of the noise schedule: alpha_bar / (s + (1 - s) alpha_bar) (release: 3.0)."""
    zero_terminal_snr: bool = True
    """Rescale the schedule so its last step is pure noise (release: ZeroSNRDDPMDiscretization)."""
    sampler: str = "dpm++2m"
    """`dpm++2m`: the release's stochastic DPM++ 2M (VPSDEDPMPP2MSampler); `ddim`: DDIM."""
    sample_steps: int = 50
    """Denoising steps when a shot is rendered (release: 50)."""
    guidance_scale: float = 6.0
    """Classifier-free guidance scale (release: 6); 1 renders without guidance (one model pass
    per step, as the release's sampler does for scale 1)."""
    guidance_schedule: str = "dynamic"
    """`dynamic`: the release's DynamicCFG, weight 1 + scale (1 - cos(pi ((N - t) / N)^exp)) / 2 at
    timestep t of N steps; `constant`: weight = scale at every step."""
    guidance_exp: float = 5.0
    """Exponent of the dynamic guidance schedule (release: 5)."""


@dataclass
class EncoderConfig(DecoderFields, TrainConfig):
    """Phase (a): E_a warm-up with D_a frozen, then E_a + D_a jointly, diffusion loss."""

    lr: float = 2e-4
    encoder_warmup_steps: int = 10_000
    warmup_trains_motion: bool = True
    """During the warm-up the decoder's motion MLP trains with E_a (the release's warm-up list has
    `flow`); false: the whole decoder waits for the joint steps."""
    max_steps: int = 90_000
    """10k warm-up + 80k joint steps."""
    text_drop_rate: float = 0.1
    """Condition dropout: per sample, the chance that the action's T5 features are zeroed (the
    release's conditioner, ucg_rate 0.1). A zeroed part is what the unconditional shot holds."""
    empty_text_rate: float = 0.05
    """Per sample, the chance that T5 reads an empty action instead (release: do_training_cfg)."""
    image_drop_rate: float = 0.05
    """Per sample, the chance that the first frame's CLIP features are zeroed (release:
    do_training_cfg)."""


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
    train_embeddings: bool = True
    """Train the LLM's whole embedding and lm_head, as the release (peft_models.py sets both
    trainable); false: only the new special tokens' rows (peft trainable tokens)."""
    train_norms: bool = True
    """Train every RMSNorm beside the LoRA (input_layernorm, post_attention_layernorm, norm: the
    release's modules_to_save)."""
    prompt_format: str = "paper"
    """Token layout of a turn: `paper` (<MS>/<ST>/<SC>/<ET>, <VS> + <ANIME_i> slots, [INST]) or
    `release` (the released model's <TURN>, <img><frame> + <frame_00000> slots, <ML>/<SC>/<ET>/
    <ST> with <Strength_k> values); see trainer/prompt.py and docs/training.md."""
    max_turns: int = 4
    """Clips per game sequence (history + target); shorter where a film's run of captioned clips is.
    The paper trains short and plays long with a sliding window; it gives no number."""
    mse_weight: float = 1.0
    """alpha: weight of the MSE to the target shot's E_a representation (the paper's main model
    and the release's rec_loss_scale: 1.0)."""
    cosine_weight: float = 0.0
    """beta: weight of (1 - cosine similarity); the supplement's ablation uses alpha = beta = 0.5
    (trainer/configs/mllm-cosine-ablation.yaml)."""


@dataclass
class AdaptConfig(DecoderFields, TrainConfig):
    """Phase (c): D_a fine-tuned on the frozen MLLM's predicted representations."""

    encoder_checkpoint: str = "runs/encoder"
    """Phase (a) output: E_a and the decoder's LoRA and motion MLP to start from."""
    mllm_checkpoint: str = "runs/mllm"
    """Phase (b) output: the frozen MLLM."""
    shot_drop_rate: float = 0.1
    """Condition dropout: per sample, the chance that the decoder sees the unconditional shot
    instead of the MLLM's prediction, so guidance keeps working after adaptation."""
    lr: float = 5e-5
    max_steps: int = 10_000
    max_turns: int = 4


CONFIG_CLASSES = {"encoder": EncoderConfig, "mllm": MllmConfig, "adapt": AdaptConfig}

# Settings that name one of a fixed set, checked before anything is built.
CHOICES = {
    "clip_input": ("resize", "center_crop"),
    "sampler": ("dpm++2m", "ddim"),
    "guidance_schedule": ("dynamic", "constant"),
    "prompt_format": ("paper", "release"),
    "t5_dtype": ("fp32", "auto"),
}

# Settings a checkpoint written before they existed did not save, at the values that trainer
# used, so a later phase or `play` rebuilds its parts as they were trained.
LEGACY_VALUES = {
    "train_adaln": False,
    "warmup_trains_motion": False,
    "train_embeddings": False,
    "train_norms": False,
    "t5_attention_mask": True,
    "t5_dtype": "auto",
}
RATES = ("text_drop_rate", "empty_text_rate", "image_drop_rate", "shot_drop_rate")


def check(config, source: str = "settings"):
    """Refuse a value outside its choices or a rate outside [0, 1]; return the config."""
    for name, allowed in CHOICES.items():
        if hasattr(config, name) and getattr(config, name) not in allowed:
            raise ConfigError(
                f"{source}: {name}={getattr(config, name)!r}: choose one of {list(allowed)}"
            )
    for name in RATES:
        if hasattr(config, name) and not 0.0 <= getattr(config, name) <= 1.0:
            raise ConfigError(f"{source}: {name}={getattr(config, name)!r}: must be in [0, 1]")
    return config


def load_config(phase: str, path: str | Path | None = None, overrides: list[str] | None = None):
    if phase not in CONFIG_CLASSES:
        raise ConfigError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    config = CONFIG_CLASSES[phase]()
    if path:
        apply_mapping(config, phase, read_settings_file(path), source=str(path))
    apply_overrides(config, overrides or [])
    return check(config)


def apply_overrides(config, items: list[str]) -> None:
    """`name=value` strings; values are read as YAML (numbers, true/false, [lists])."""
    for item in items:
        set_field(config, *parse_assignment(item), "--set")


def config_from_dict(phase: str, data: dict):
    """Rebuild a config saved in a checkpoint (plain dict of fields)."""
    config = CONFIG_CLASSES[phase]()
    for name, value in saved_settings(data, config).items():
        set_field(config, name, value, "checkpoint")
    return config


def saved_settings(data: dict, config) -> dict:
    """A checkpoint's settings, with the values of settings of `config`'s phase that did not exist
    when it was made."""
    legacy = {k: v for k, v in LEGACY_VALUES.items() if hasattr(config, k)}
    return {**legacy, **data}


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
    set_setting(config, name, value, f"{source} ({type(config).__name__})")


def describe(phase: str) -> list[tuple[str, object, str]]:
    """(name, default, help) of each field of a phase, for --help."""
    cls = CONFIG_CLASSES[phase]
    docs = field_docs(cls)
    default = cls()
    return [
        (f.name, getattr(default, f.name), docs.get(f.name, "")) for f in dataclasses.fields(cls)
    ]
