"""The trainer's steps at real size: phase (a) (E_a + CogVideoX-2B with LoRA) and phase (b) (E_a
frozen + Mistral-7B with LoRA) through the trainer's own phase classes and optimiser step, with
random backbones; seconds per step, samples per second, peak memory and MFU (bench/gpu/flops.py)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from bench.gpu import flops, models
from bench.gpu.common import (
    RUN_FACTS,
    Settings,
    peak_memory_gib,
    release_memory,
    synchronise,
    within_memory,
)


def encoder_config(settings: Settings, batch: int):
    from trainer.shared.config import EncoderConfig

    height, width = settings.frame_size
    return EncoderConfig(
        out_dir=str(settings.workdir / "train-encoder"),
        frame_height=height,
        frame_width=width,
        num_frames=17,
        text_tokens=settings.shape["text_tokens"],
        batch_size=batch,
        encoder_warmup_steps=0,  # the joint E_a + D_a regime (80k of the 90k steps)
        gradient_checkpointing=True,
        device=settings.device,
        num_workers=0,
    )


def mllm_config(settings: Settings, batch: int, encoder_checkpoint: Path, checkpointing=False):
    from trainer.shared.config import MllmConfig

    height, width = settings.frame_size
    return MllmConfig(
        out_dir=str(settings.workdir / "train-mllm"),
        encoder_checkpoint=str(encoder_checkpoint),
        frame_height=height,
        frame_width=width,
        text_tokens=settings.shape["text_tokens"],
        batch_size=batch,
        gradient_checkpointing=checkpointing,
        device=settings.device,
        num_workers=0,
    )


def synthetic_turns(count: int, frame_size: tuple[int, int], seed: int) -> list[dict]:
    """Turns shaped as trainer.shared.data.ShotDataset makes them (random pictures, game-demo text)."""
    from prompts.game import action_text

    generator = torch.Generator().manual_seed(seed)
    motions = ["flying on broomstick", "running through the forest", "talking with a friend"]
    return [
        {
            "clip_id": f"bench{seed:04d}{n:04d}",
            "film_id": "bench",
            "clip_index": n,
            "first_frame": torch.randint(0, 256, (3, *frame_size), generator=generator).to(
                torch.uint8
            ),
            "motion_description": motions[n % len(motions)],
            "action": action_text("quickly", motions[n % len(motions)]),
            "instruction": f"Character: Sintel; Motion: quickly {motions[n % len(motions)]}; "
            "Background: forest.",
            "motion_scope": 2.5 + n,
            "motion_level": 1 + n % 5,
            "stamina": -1,
            "social": n % 2,
            "entertainment": 1,
        }
        for n in range(count)
    ]


def synthetic_batch(batch: int, turns: int, frame_size, frames: int | None) -> dict:
    from trainer.shared.data import collate

    samples = []
    for b in range(batch):
        sample = {"uid": b, "turns": synthetic_turns(turns, frame_size, seed=b)}
        if frames:
            generator = torch.Generator().manual_seed(1000 + b)
            sample["video"] = torch.randint(
                0, 256, (frames, 3, *frame_size), generator=generator
            ).to(torch.uint8)
        samples.append(sample)
    return collate(samples)


def time_steps(model, config, batch: dict, settings: Settings) -> dict:
    """Warm-up step, then `steps` timed optimiser steps through the trainer's own step."""
    from trainer.phases.loop import make_optimizer, optimizer_step
    from trainer.shared import distributed

    env = distributed.setup(config.device)
    dtype = distributed.pick_dtype(config.dtype, env.device)
    trainable, optimizer = make_optimizer(model, config)
    optimizer_step(model, model, optimizer, trainable, [batch], 0, config, env, dtype)
    synchronise(settings.device)
    release_memory()
    times = []
    for step in range(1, 1 + settings.steps):
        began = time.perf_counter()
        optimizer_step(model, model, optimizer, trainable, [batch], step, config, env, dtype)
        synchronise(settings.device)
        times.append(time.perf_counter() - began)
    seconds = statistics.median(times)
    return {
        "s_per_step": round(seconds, 3),
        "samples_per_s": round(config.batch_size / seconds, 2),
        "peak_mem_gib": peak_memory_gib(settings.device),
        "trainable_weights": sum(p.numel() for p in trainable),
    }


def with_mfu(row: dict, step_flops: float, settings: Settings) -> dict:
    seconds = row["s_per_step"]
    row["model_tflop_per_step"] = float(f"{step_flops / 1e12:.4g}")
    row["tflops"] = round(step_flops / seconds / 1e12, 1)
    peak = settings_peak(settings)
    ratio = flops.mfu(step_flops, seconds, peak)
    row["mfu"] = None if ratio is None else round(ratio, 3)
    ceiling = RUN_FACTS.get("matmul_tflops")
    row["mfu_of_measured_matmul"] = round(row["tflops"] / ceiling, 3) if ceiling else None
    return row


def settings_peak(settings: Settings) -> float | None:
    return RUN_FACTS.get("peak_bf16_tflops")


def train_a_rows(settings: Settings):
    from trainer.phases.encoder import EncoderPhase
    from trainer.phases.loop import sample_generators

    device = torch.device(settings.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with models.random_backbones(settings.shape, device):
        model = EncoderPhase(encoder_config(settings, 1), device, dtype)
    for batch_size in settings.encoder_batches:
        config = encoder_config(settings, batch_size)
        batch = synthetic_batch(batch_size, 1, settings.frame_size, config.num_frames)
        label = (
            f"E_a + CogVideoX-2B LoRA r{config.decoder_lora_rank}, {config.frame_height}x"
            f"{config.frame_width}x{config.num_frames}, batch {batch_size}, grad ckpt"
        )
        row = within_memory(partial(time_steps, model, config, batch, settings))
        if "error" in row:
            yield {"setting": label, **row}
            break
        # The VAE encoding inside the step (not in the model FLOPs): timed on its own.
        video = batch["video"].to(device)
        synchronise(settings.device)
        began = time.perf_counter()
        model.decoder.encode(video, sample_generators(0, batch["uid"]))
        synchronise(settings.device)
        row["vae_encode_s"] = round(time.perf_counter() - began, 3)
        yield {"setting": label, **with_mfu(row, encoder_step_flops(model, config), settings)}


def encoder_step_flops(model, config) -> float:
    """Phase (a), one step: E_a (frozen CLIP + T5 forward, trained projections) and the decoder
    transformer's forward + backward. The VAE encoder (convolutions) is not counted."""
    transformer = model.decoder.transformer
    tc = transformer.config
    latent_frames = (config.num_frames - 1) // 4 + 1
    patches = (config.frame_height // 8 // tc.patch_size) * (
        config.frame_width // 8 // tc.patch_size
    )
    tokens = tc.max_text_seq_length + latent_frames * patches
    attention = flops.Attention(tc.num_layers, tc.num_attention_heads * tc.attention_head_dim)
    decoder = training_flops_of(transformer, tokens, attention)
    per_sample = decoder + shot_encoder_flops(model.encoder, trained=True)
    return per_sample * config.batch_size


def shot_encoder_flops(encoder, trained: bool) -> float:
    """CLIP over 1 + patches tokens and T5 over text_tokens (forward only, frozen), and the two
    projections (forward, plus backward when trained)."""
    clip, t5 = encoder.clip.config, encoder.t5.config
    clip_tokens = 1 + (clip.image_size // clip.patch_size) ** 2
    total = flops.forward_flops(
        flops.matmul_weights(encoder.clip),
        clip_tokens,
        flops.Attention(clip.num_hidden_layers, clip.hidden_size),
    )
    total += flops.forward_flops(
        flops.matmul_weights(encoder.t5),
        encoder.text_tokens,
        flops.Attention(t5.num_layers, t5.num_heads * t5.d_kv),
    )
    factor = 3.0 if trained else 1.0
    total += factor * flops.forward_flops(
        flops.matmul_weights(encoder.visual_proj), clip_tokens - 1
    )
    total += factor * flops.forward_flops(
        flops.matmul_weights(encoder.text_proj), encoder.text_tokens
    )
    return total


def training_flops_of(module, tokens: int, attention: flops.Attention) -> float:
    return flops.training_flops(
        flops.matmul_weights(module),
        flops.matmul_weights(module, trainable=True),
        tokens,
        attention,
    )


def train_b_rows(settings: Settings):
    from trainer.phases.mllm import MllmPhase

    device = torch.device(settings.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    runs = [(False, settings.mllm_batches), (True, settings.mllm_checkpointed_batches)]
    with models.random_backbones(settings.shape, device):
        encoder_dir = write_encoder_checkpoint(settings, device, dtype)
        for checkpointing, batches in runs:
            if not batches:
                continue
            config = mllm_config(settings, 1, encoder_dir, checkpointing)
            model = MllmPhase(config, device, dtype)
            yield from mllm_steps(model, settings, encoder_dir, checkpointing, batches)
            del model
            release_memory()


def mllm_steps(model, settings: Settings, encoder_dir: Path, checkpointing: bool, batches):
    for batch_size in batches:
        config = mllm_config(settings, batch_size, encoder_dir, checkpointing)
        batch = synthetic_batch(batch_size, config.max_turns, settings.frame_size, None)
        lengths = [len(model.mllm.prompts.sequence(t).input_ids) for t in batch["turns"]]
        label = (
            f"E_a frozen + Mistral-7B LoRA r{config.lora_rank}, {config.max_turns} turns "
            f"({max(lengths)} tokens), batch {batch_size}"
            + (", grad ckpt" if checkpointing else "")
        )
        row = within_memory(partial(time_steps, model, config, batch, settings))
        if "error" in row:
            yield {"setting": label, **row}
            break
        yield {"setting": label, **with_mfu(row, mllm_step_flops(model, batch, lengths), settings)}


def write_encoder_checkpoint(settings: Settings, device, dtype) -> Path:
    """A phase-(a) checkpoint of a random E_a, which phase (b) loads as the real one."""
    from trainer.models import build
    from trainer.shared import checkpoint

    config = encoder_config(settings, 1)
    holder = torch.nn.Module()
    holder.encoder = build.shot_encoder(config, device, dtype)
    out = settings.workdir / "train-encoder-for-mllm"
    checkpoint.save(out, 1, "encoder", dataclasses.asdict(config), holder, None, {})
    return out


def mllm_step_flops(model, batch: dict, lengths: list[int]) -> float:
    """Phase (b), one step: per sequence, E_a forward for each turn, Mistral forward + backward
    over its tokens, the input projection over the history slots and the output projection over
    the query tokens (both trained)."""
    mllm = model.mllm
    llm = mllm.llm.base_model.model
    c = llm.config
    attention = flops.Attention(c.num_hidden_layers, c.num_attention_heads * c.head_dim)
    total = 0.0
    for turns, tokens in zip(batch["turns"], lengths):
        total += len(turns) * shot_encoder_flops(model.encoder, trained=False)
        total += training_flops_of(llm, tokens, attention)
        history = (len(turns) - 1) * mllm.num_queries
        total += 3 * flops.forward_flops(flops.matmul_weights(mllm.input_proj), history)
        total += 3 * flops.forward_flops(flops.matmul_weights(mllm.output_proj), mllm.num_queries)
    return total
