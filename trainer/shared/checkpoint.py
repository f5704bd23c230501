"""Checkpoints: everything a resumed run needs, and LoRA adapters in peft's standard format.

OUT/checkpoints/step-00000100/
    state.json                 phase, config, step, the optimiser's settings (plain JSON)
    trainable.safetensors      trainable weights, by parameter name
    optimizer.safetensors      the optimiser's per-weight state (AdamW's moments and step)
    extra.safetensors          tensors a phase keeps beside its weights (the unconditional shot)
    <name>_lora/               adapter_config.json + adapter_model.safetensors (peft format)
OUT/checkpoints/latest         the name of the newest complete checkpoint

Nothing in a checkpoint can run code when it is loaded: tensors are safetensors, the rest JSON.
(Checkpoints are shared between users; a pickle would execute whatever it carries.) An older
`state.pt` checkpoint is still read, with `torch.load(weights_only=True)`, which refuses any
pickled object that is not plain data.

Only trainable weights are stored: frozen backbones come from their own checkpoints. A checkpoint
is written to a temporary folder and renamed, so `latest` never names a half-written one.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from core.io import write_text_atomic

# torch and safetensors are imported where tensors are read or written: `play` and the trainer's
# commands look up a checkpoint folder (and name one that holds none) before torch is imported.
if TYPE_CHECKING:
    import torch

FORMAT = "animegamer-trainer/2"
STATE_FILE = "state.json"
LEGACY_STATE_FILE = "state.pt"


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that would run code, or is not what the trainer writes."""


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
    extra: dict[str, torch.Tensor] | None = None,
) -> Path:
    """adapters: {name: (peft state dict, LoraConfig[, tokenizer])} exported beside the state."""
    root = Path(out_dir) / "checkpoints"
    final, tmp = root / f"step-{step:08d}", root / f".step-{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    optimizer_tensors, optimizer_json = _split_optimizer(optimizer)
    state = {
        "format": FORMAT,
        "phase": phase,
        "config": config,
        "step": step,
        "optimizer": optimizer_json,
    }
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True))
    _save_tensors(trainable_state(model), tmp / "trainable.safetensors")
    _save_tensors(optimizer_tensors, tmp / "optimizer.safetensors")
    _save_tensors(extra or {}, tmp / "extra.safetensors")
    for name, adapter in adapters.items():
        save_adapter(tmp / f"{name}_lora", *adapter)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    write_text_atomic(final.name, root / "latest")
    _prune(root, keep)
    return final


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, path)


def _split_optimizer(optimizer) -> tuple[dict[str, torch.Tensor], dict | None]:
    """An optimiser state dict as tensors (`<param index>/<key>`) plus JSON for the rest."""
    import torch

    if optimizer is None:
        return {}, None
    saved = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in saved["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}/{key}"] = value
            else:
                scalars[f"{index}/{key}"] = value
    return tensors, {"param_groups": saved["param_groups"], "scalars": scalars}


def _join_optimizer(tensors: dict[str, torch.Tensor], saved: dict | None) -> dict | None:
    if saved is None:
        return None
    state: dict[int, dict] = {}
    for key, value in [*tensors.items(), *saved["scalars"].items()]:
        index, name = key.split("/", 1)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": saved["param_groups"]}


def save_adapter(folder: Path, weights: dict, lora_config, tokenizer=None) -> None:
    from safetensors.torch import save_file

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
    if (location / STATE_FILE).is_file() or (location / LEGACY_STATE_FILE).is_file():
        return location
    latest = location / "checkpoints" / "latest"
    if latest.is_file():
        return location / "checkpoints" / latest.read_text().strip()
    return None


def locate(location: str | Path) -> Path:
    """`find`, or a FileNotFoundError that names the location."""
    path = find(location)
    if path is None:
        raise FileNotFoundError(
            f"{location}: no trainer checkpoint here (expected {STATE_FILE} or checkpoints/latest)"
        )
    return path


def load(location: str | Path) -> dict:
    """phase, config, step, trainable, optimizer (a torch state dict) and extra tensors."""
    path = locate(location)
    if not (path / STATE_FILE).is_file():
        return _load_legacy(path / LEGACY_STATE_FILE)
    from safetensors.torch import load_file

    try:
        state = json.loads((path / STATE_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise UnsafeCheckpoint(f"{path / STATE_FILE}: not valid JSON ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UnsafeCheckpoint(f"{path / STATE_FILE}: not a {FORMAT} checkpoint state")
    tensors = {n: load_file(path / f"{n}.safetensors") for n in ("trainable", "optimizer", "extra")}
    return {
        **state,
        "trainable": tensors["trainable"],
        "optimizer": _join_optimizer(tensors["optimizer"], state["optimizer"]),
        "extra": tensors["extra"],
    }


def _load_legacy(path: Path) -> dict:
    """A checkpoint of the first format (one torch.save file): plain data only, no code."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "an object that is not plain data"
        raise UnsafeCheckpoint(
            f"{path}: refused: it carries pickled code or objects ({reason}); "
            "only tensors and plain values are loaded"
        ) from None
    # settings that did not exist then, at the values that first trainer used
    state["config"] = {"clip_input": "center_crop", **state["config"]}
    return {**state, "extra": state.get("extra", {})}


def restore_trainable(
    model: torch.nn.Module,
    weights: dict[str, torch.Tensor],
    prefix: str = "",
    source: str = "checkpoint",
) -> int:
    """Copy saved weights whose names start with `prefix` into the model; all of them must fit."""
    import torch

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
