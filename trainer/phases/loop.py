"""The one training loop every phase runs (nanoGPT's train.py, shared).

A phase supplies a model whose forward(batch) returns {"loss": ..., other metrics}, the dataset,
and optionally `before_optimizer_step(step)` and `adapters()`. The loop owns the optimiser,
learning rate, mixed precision, DDP, logging and checkpoints. Steps count finished optimiser
steps; a checkpoint at step s resumes at step s with the same batches and random numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import math
import shutil
import time
from pathlib import Path

import torch

from core.io import write_text_atomic
from core.settings import ConfigError
from trainer.shared import checkpoint, distributed
from trainer.shared.data import make_loader


def sample_generators(seed: int, uids: torch.Tensor, stream: int = 0) -> list[torch.Generator]:
    """One generator per sample, seeded by its position in the stream (not by rank or batch).

    `stream` separates independent uses (0: diffusion noise, 1: condition dropout), so turning
    dropout on or off leaves every sample's noise as it was."""
    return [
        torch.Generator().manual_seed(seed * 1_000_003 + int(uid) + stream * 2**48) for uid in uids
    ]


def learning_rate(config, step: int) -> float:
    if config.lr_warmup_steps and step < config.lr_warmup_steps:
        return config.lr * (step + 1) / config.lr_warmup_steps
    return config.lr


def train(phase: str, config, build, resume: bool = True, log=print) -> list[dict]:
    """Run one phase; `build(config, device, dtype)` returns (model, dataset). Returns the metrics."""
    env = distributed.setup(config.device)
    dtype = distributed.pick_dtype(config.dtype, env.device)
    accum = accumulation_steps(config, env.world_size)
    torch.manual_seed(config.seed)
    model, dataset = build(config, env.device, dtype)
    trainable, optimizer = make_optimizer(model, config)
    start = _start_step(phase, model, optimizer, config.out_dir, resume, env, log)
    if env.is_main:
        log(
            f"[{phase}] {dataset.summary()}, {env.world_size} rank(s) on {env.device} in {dtype}, "
            f"{config.batch_size * env.world_size * accum} samples per step "
            f"({config.batch_size} x {env.world_size} rank(s) x {accum} accumulated), "
            f"steps {start}..{config.max_steps}"
        )
        log(f"[{phase}] {describe_trainable(model)}")
    wrapped = _wrap(model, env)
    loader = make_loader(
        dataset,
        config.batch_size,
        config.seed,
        env.rank,
        env.world_size,
        start,
        config.num_workers,
        accum,
    )
    micro_batches = iter(loader)
    metrics, clock = [], time.time()
    for step in range(start, config.max_steps):
        batches = list(itertools.islice(micro_batches, accum))
        record = optimizer_step(
            wrapped, model, optimizer, trainable, batches, step, config, env, dtype
        )
        metrics.append(record)
        if env.is_main:
            _log(phase, record, config, start, clock, log)
        if (step + 1) % config.save_every == 0 or step + 1 == config.max_steps:
            _save(phase, config, model, optimizer, step + 1, env, log)
    # The DDP wrapper's reducer holds the process group: freeing it after the group is destroyed
    # deadlocks in gloo's destructor (seen here: a rank hung at exit), so release it first.
    del wrapped, micro_batches
    gc.collect()
    distributed.teardown()
    return metrics


def accumulation_steps(config, world_size: int) -> int:
    """Micro-batches per optimiser step: `grad_accum`, or what `global_batch` asks for."""
    if config.global_batch <= 0:
        if config.grad_accum < 1:
            raise ConfigError(f"grad_accum={config.grad_accum}: must be 1 or more")
        return config.grad_accum
    per_pass = config.batch_size * world_size
    if config.global_batch % per_pass:
        raise ConfigError(
            f"global_batch={config.global_batch} is not a multiple of batch_size x ranks = "
            f"{config.batch_size} x {world_size}: choose a global batch or batch_size that divides"
        )
    return config.global_batch // per_pass


# Named groups of trained weights, for the start-up line (first match wins).
WEIGHT_GROUPS = (
    ("LoRA", ("lora_",)),
    ("adaLN modulation", ("norm1.linear", "norm2.linear")),
    ("motion MLP", ("time_embedding.motion",)),
    ("embedding", ("embed_tokens",)),
    ("lm_head", ("lm_head",)),
    ("RMSNorm", ("layernorm", ".norm.")),
)


def describe_trainable(model: torch.nn.Module) -> str:
    """'N trainable weights: G1 n1, G2 n2, ...' by WEIGHT_GROUPS, else by the top-level module."""
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            group = next(
                (g for g, keys in WEIGHT_GROUPS if any(k in name for k in keys)),
                name.split(".")[0] + "." + name.split(".")[1] if "." in name else name,
            )
            counts[group] = counts.get(group, 0) + p.numel()
    parts = ", ".join(f"{group} {count:,}" for group, count in counts.items())
    return f"{sum(counts.values()):,} trainable weights: {parts}"


def make_optimizer(model, config) -> tuple[list, torch.optim.Optimizer]:
    """The trainable weights (in name order) and the AdamW that steps them."""
    trainable = [p for _, p in sorted(model.named_parameters()) if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable, lr=config.lr, betas=tuple(config.adam_betas), weight_decay=config.weight_decay
    )
    return trainable, optimizer


def optimizer_step(
    wrapped, model, optimizer, trainable, batches, step: int, config, env, dtype
) -> dict:
    """One optimiser step over `batches` (micro-batches of equal size, whose gradients add up);
    returns its metrics averaged over micro-batches and ranks."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(config, step)
    totals: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(batches):
        # Dropout draws from the global generator: reseed per micro-batch and rank so a resume
        # replays it.
        micro = step * len(batches) + index
        torch.manual_seed(config.seed * 7919 + micro * env.world_size + env.rank)
        # gradients are averaged over ranks once, after the last micro-batch
        last = index == len(batches) - 1
        sync = contextlib.nullcontext() if last or not env.enabled else wrapped.no_sync()
        with sync:
            with _autocast(env.device, dtype):
                out = wrapped(batch, step)
            (out["loss"] / len(batches)).backward()
        for key, value in out.items():
            totals[key] = totals.get(key, 0) + value.detach().float() / len(batches)
    getattr(model, "before_optimizer_step", lambda s: None)(step)
    torch.nn.utils.clip_grad_norm_(trainable, config.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    record = {
        "step": step + 1,
        "lr": optimizer.param_groups[0]["lr"],
        **{k: distributed.mean_across_ranks(v) for k, v in totals.items()},
    }
    if not math.isfinite(record["loss"]):
        raise FloatingPointError(f"loss became {record['loss']} at step {step + 1}")
    return record


def _log(phase: str, record: dict, config, start: int, clock: float, log) -> None:
    with (Path(config.out_dir) / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    step = record["step"]
    if step % config.log_every == 0 or step == start + 1:
        log(
            f"[{phase}] step {step}/{config.max_steps} loss {record['loss']:.4f} lr {record['lr']:.2e} "
            f"{(time.time() - clock) / (step - start):.2f}s/step"
        )


def _start_step(phase: str, model, optimizer, out_dir: str, resume: bool, env, log) -> int:
    """0 for a fresh run (old checkpoints removed), else the step of the latest checkpoint."""
    if env.is_main:
        if not resume:
            _clear(out_dir)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    distributed.barrier()
    start = _resume(phase, model, optimizer, out_dir, log) if resume else 0
    if env.is_main:
        _drop_metrics_after(Path(out_dir) / "metrics.jsonl", start)
    return start


def _resume(phase: str, model, optimizer, out_dir: str, log) -> int:
    found = checkpoint.find(out_dir)
    if found is None:
        return 0
    state = checkpoint.load(found)
    if state["phase"] != phase:
        raise ValueError(
            f"{found}: a '{state['phase']}' checkpoint; phase {phase} needs its own out_dir"
        )
    checkpoint.restore_trainable(model, state["trainable"], source=str(found))
    optimizer.load_state_dict(state["optimizer"])
    log(f"resuming from {found} at step {state['step']}")
    return state["step"]


def _drop_metrics_after(path: Path, step: int) -> None:
    """A resumed run rewrites the steps after its checkpoint: drop their old lines."""
    if not path.is_file():
        return
    kept = [
        line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step
    ]
    write_text_atomic("".join(line + "\n" for line in kept), path)


def _clear(out_dir: str) -> None:
    """A fresh run drops the run folder's old checkpoints and metrics (never other files)."""
    root = Path(out_dir)
    shutil.rmtree(root / "checkpoints", ignore_errors=True)
    (root / "metrics.jsonl").unlink(missing_ok=True)


def _save(phase, config, model, optimizer, step, env, log) -> None:
    if env.is_main:
        adapters: dict = getattr(model, "adapters", dict)()
        extra: dict = getattr(model, "saved_tensors", dict)()
        path = checkpoint.save(
            config.out_dir,
            step,
            phase,
            dataclasses.asdict(config),
            model,
            optimizer,
            adapters,
            config.keep_checkpoints,
            extra,
        )
        log(f"[{phase}] saved {path}")
    distributed.barrier()


def _wrap(model, env):
    if not env.enabled:
        return model
    # Frozen backbones (Mistral, T5-XXL, CogVideoX: tens of GB) are loaded from disk by every
    # rank already: DDP need not broadcast them at start-up nor watch them.
    model._ddp_params_and_buffers_to_ignore = [
        name for name, p in model.named_parameters() if not p.requires_grad
    ] + [name for name, _ in model.named_buffers()]
    return torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=[env.device.index] if env.device.type == "cuda" else None,
        find_unused_parameters=getattr(model, "may_skip_parameters", False),
    )


def _autocast(device: torch.device, dtype: torch.dtype):
    if device.type == "cuda" and dtype != torch.float32:
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()
