"""The `animegamer` console script.

Sub-commands are modules listed in COMMANDS, imported only when chosen (so `--help` stays fast and
a command's heavy imports never slow another). Each module exposes `HELP`,
`add_arguments(parser)` and `run(args) -> int`; errors end a command as core/cli.py
says (one line on stderr; exit 2 for usage or input errors, 1 for failed work).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import signal
import sys

from core.cli import USAGE_ERROR, OneLineParser, run_command

COMMANDS = {
    "dataset": "pipeline.commands.dataset",
    "caption": "pipeline.commands.caption",
    "motion-calibrate": "pipeline.commands.motion_calibrate",
    "motion-eval": "pipeline.commands.motion_eval",
    "quality-calibrate": "pipeline.commands.quality_calibrate",
    "camera-audit": "pipeline.commands.camera_audit",
    "report": "pipeline.commands.report",
    "review": "pipeline.commands.review",
    "train": "trainer.phases.cli",
    "play": "trainer.delivery.play",
    "export": "trainer.delivery.export",
    "eval": "trainer.evaluation.evaluate",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="animegamer",
        description="Turn anime films into AnimeGamer training clips, inspect them, train on them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, module_name in COMMANDS.items():
        if chosen == name:
            module = importlib.import_module(module_name)
            command = sub.add_parser(
                name,
                help=module.HELP,
                description=module.HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            module.add_arguments(command)
            command.set_defaults(handler=module.run)
        else:
            sub.add_parser(name, help=f"(see: animegamer {name} --help)")
    return parser


def shorthand_overrides(
    overrides: list[str], model: str | None = None, executor: str | None = None, quiet: bool = False
) -> list[str]:
    """The --set assignments, then those `dataset`'s shorthand flags stand for (--model,
    --executor, --quiet), which win as later assignments do: the command reads its settings with
    this, and `prestart_executor` its executor, before the command's own imports."""
    overrides = list(overrides)
    if model:
        overrides.append(f"caption.model={model}")
    if executor:
        overrides.append(f"run.executor={executor}")
    if quiet:
        overrides.append("run.progress=false")
    return overrides


def prestart_executor(argv: list[str]) -> str | None:
    """For `dataset`, once its arguments parsed and before the command's imports (most of a
    second: its module imports them only when it runs, for this): the executor its
    arguments choose, read as the command reads them (its --config file's run.executor, then
    --set run.executor=... and --executor, the last one winning; default auto), started in the
    background where that pays (pipeline.executors.prestart), and named; None for other commands,
    --help, --dry-run (no task runs) and a --config file the command will refuse."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("command", nargs="?")
    early.add_argument("--config")
    early.add_argument("--executor")
    early.add_argument("--set", dest="overrides", action="append", default=[])
    early.add_argument("--dry-run", "-h", "--help", dest="no_tasks", action="store_true")
    known, _ = early.parse_known_args(argv)
    if known.command != "dataset" or known.no_tasks:
        return None
    executor = _configured_executor(known.config)
    if executor is None:
        return None
    overrides = shorthand_overrides(known.overrides, executor=known.executor)
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("run.executor=")]
    executor = chosen[-1] if chosen else executor  # the last one, as load_config applies them
    from pipeline.executors import prestart

    prestart(executor)
    return executor


def _configured_executor(config: str | None) -> str | None:
    """run.executor as a --config file sets it ('auto' without a file or the setting), read with
    the command's own reader; None where the command will refuse the file (its one-line error
    says why), so nothing is started for a run that never starts."""
    if not config:
        return "auto"
    from core.settings import ConfigError, read_settings_file

    try:
        run = read_settings_file(config, expected="a mapping of sections").get("run") or {}
    except ConfigError:
        return None
    executor = run.get("executor", "auto") if isinstance(run, dict) else None
    return executor if isinstance(executor, str) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)  # a refused argument ends here, before anything is started
    prestart_executor(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    status = run_command(args.command, args.handler, args)
    # The command has said its last word: a Ctrl-C now would only interrupt the interpreter's
    # exit handlers (Ray's shutdown among them, registered after this module's) with a traceback.
    # atexit runs handlers last-registered first, so this one runs before Ray's.
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    # The interpreter's last full collections walk every object the imports made: 2.0 s of exit
    # after torchvision, peft or bitsandbytes (torch alone 0.5 s), 0.4 s with those objects
    # frozen. Nothing written waits on a collection: every output was closed and renamed into
    # place before the command returned, and exit handlers (Ray's, the pools') run as before.
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(main())
