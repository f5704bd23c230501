"""`animegamer train`: run one training phase on clip shards (also `python -m trainer.cli`,
which is what torchrun starts: `torchrun --nproc_per_node 2 -m trainer.cli --phase mllm ...`)."""

from __future__ import annotations

import argparse
import importlib
import sys

from core.cli import input_errors, module_parser, run_command

HELP = """Train AnimeGamer from clip shards, one phase at a time:
  encoder  phase (a): shot encoder E_a + CogVideoX decoder D_a (warm-up, then joint)
  mllm     phase (b): next game state prediction (needs encoder_checkpoint)
  adapt    phase (c): decoder adaptation to the MLLM (needs encoder_checkpoint, mllm_checkpoint)
Settings come from the phase's defaults (the paper's), then --config YAML, then --set name=value;
`--settings` lists them. A run resumes from the latest checkpoint in its out_dir unless --fresh.
Several processes: torchrun --nproc_per_node N -m trainer.cli --phase ... (gloo on CPU, NCCL on GPU)."""

PHASE_MODULES = {
    "encoder": "trainer.phases.encoder",
    "mllm": "trainer.phases.mllm",
    "adapt": "trainer.phases.adapt",
}


def add_arguments(parser: argparse.ArgumentParser, phase: str | None = None) -> None:
    if phase is None:
        parser.add_argument(
            "--phase", required=True, choices=list(PHASE_MODULES), help="which phase to train"
        )
    parser.add_argument("--config", help="YAML settings (trainer/configs/*.yaml)")
    parser.add_argument(
        "--shards", nargs="+", help="shard files or dataset/film folders (sets `shards`)"
    )
    parser.add_argument("--out", help="run folder for checkpoints and metrics (sets `out_dir`)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one setting (repeatable), e.g. --set max_steps=100",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start over: delete out_dir's checkpoints and metrics first",
    )
    parser.add_argument(
        "--settings", action="store_true", help="list the phase's settings and exit"
    )


def run(args: argparse.Namespace) -> int:
    from trainer.shared.config import ConfigError, apply_overrides, describe, load_config

    if args.settings:
        for name, default, text in describe(args.phase):
            print(f"{name} = {default!r}\n    {text}" if text else f"{name} = {default!r}")
        return 0
    # Bad settings, checkpoints or shards: the message names the file or setting (a missing
    # backbone is trainer.backbones.MissingCheckpoint, a FileNotFoundError).
    with input_errors(ConfigError, FileNotFoundError, ValueError):
        config = load_config(args.phase, args.config)
        config.shards = list(args.shards) if args.shards else config.shards
        config.out_dir = args.out or config.out_dir
        apply_overrides(config, args.overrides)  # --set comes last
        if not config.shards:
            raise ConfigError("no shards given (--shards or the `shards` setting)")
        # Only now torch and the phase's model code (transformers, peft, diffusers: seconds): the
        # settings above are refused at once, before any of it is imported.
        from trainer.phases.loop import train

        module = importlib.import_module(PHASE_MODULES[args.phase])
        train(args.phase, config, module.build_phase, resume=not args.fresh)
    return 0


def main_for_phase(phase: str, argv: list[str] | None = None) -> int:
    """Entry point of one phase's module (`python -m trainer.phases.mllm ...`)."""
    parser = module_parser(f"python -m {PHASE_MODULES[phase]}", HELP, add_arguments, phase)
    args = parser.parse_args(argv)
    args.phase = phase
    return run_command("train", run, args)


def main(argv: list[str] | None = None) -> int:
    args = module_parser("python -m trainer.cli", HELP, add_arguments).parse_args(argv)
    return run_command("train", run, args)


if __name__ == "__main__":
    sys.exit(main())
