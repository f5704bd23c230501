"""Checkpoints: everything a resumed run needs, and LoRA adapters in peft's standard format.

OUT/checkpoints/step-00000100/
    state.pt              phase, config, step, trainable weights (by name), optimiser state
    <name>_lora/          adapter_config.json + adapter_model.safetensors (peft format)
OUT/checkpoints/latest    the name of the newest complete checkpoint

Only trainable weights are stored: frozen backbones come from their own checkpoints. A checkpoint
is written to a temporary folder and renamed, so `latest` never names a half-written one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.io import write_text_atomic


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad
    }


def save(
    out_dir: str | Path,
    step: int,
    phase: str,
    config: dict,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    adapters: dict,
    keep: int = 2,
) -> Path:
    """adapters: {name: (peft state dict, LoraConfig[, tokenizer])} exported beside the state."""
    root = Path(out_dir) / "checkpoints"
    final, tmp = root / f"step-{step:08d}", root / f".step-{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(
        {
            "phase": phase,
            "config": config,
            "step": step,
            "trainable": trainable_state(model),
            "optimizer": optimizer.state_dict() if optimizer else None,
        },
        tmp / "state.pt",
    )
    for name, adapter in adapters.items():
        save_adapter(tmp / f"{name}_lora", *adapter)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    write_text_atomic(final.name, root / "latest")
    _prune(root, keep)
    return final


def save_adapter(folder: Path, weights: dict, lora_config, tokenizer=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lora_config.save_pretrained(str(folder))
    if tokenizer is not None:  # with the special tokens the adapter's embedding rows belong to
        tokenizer.save_pretrained(str(folder))
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in weights.items()},
        folder / "adapter_model.safetensors",
    )


def find(location: str | Path) -> Path | None:
    """A checkpoint folder from a run folder (its latest) or a checkpoint folder itself."""
    location = Path(location)
    if (location / "state.pt").is_file():
        return location
    latest = location / "checkpoints" / "latest"
    if latest.is_file():
        return location / "checkpoints" / latest.read_text().strip()
    return None


def load(location: str | Path) -> dict:
    path = find(location)
    if path is None:
        raise FileNotFoundError(
            f"{location}: no trainer checkpoint here (expected state.pt or checkpoints/latest)"
        )
    return torch.load(path / "state.pt", map_location="cpu", weights_only=False)


def restore_trainable(
    model: torch.nn.Module,
    weights: dict[str, torch.Tensor],
    prefix: str = "",
    source: str = "checkpoint",
) -> int:
    """Copy saved weights whose names start with `prefix` into the model; all of them must fit."""
    params = dict(model.named_parameters())
    chosen = {k: v for k, v in weights.items() if k.startswith(prefix)}
    unknown = [k for k in chosen if k not in params]
    if not chosen or unknown:
        raise ValueError(
            f"{source}: weights {unknown[:3] or [prefix + '*']} do not match this model "
            f"(trained with another phase or model size?)"
        )
    # Every weight that trains here must come from the checkpoint: one left out would stay at its
    # random initial value without a word.
    missing = [
        n for n, p in params.items() if p.requires_grad and n.startswith(prefix) and n not in chosen
    ]
    if missing:
        raise ValueError(
            f"{source}: has no weights for {missing[:3]} ({len(missing)} missing; trained "
            f"with other LoRA targets or settings?)"
        )
    with torch.no_grad():
        for name, value in chosen.items():
            if params[name].shape != value.shape:
                raise ValueError(
                    f"{source}: {name} has shape {tuple(value.shape)}, "
                    f"the model expects {tuple(params[name].shape)}"
                )
            params[name].copy_(value)
    return len(chosen)


def _prune(root: Path, keep: int) -> None:
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
