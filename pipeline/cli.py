"""The `animegamer` console script.

Sub-commands are modules listed in COMMANDS, imported only when chosen (so `--help` stays fast and
a command's heavy imports never slow another). Each module exposes `HELP`,
`add_arguments(parser)` and `run(args) -> int`; errors end a command as core/cli.py
says (one line on stderr; exit 2 for usage or input errors, 1 for failed work).
"""

from __future__ import annotations

import argparse
import atexit
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
    "report": "pipeline.commands.report",
    "review": "pipeline.commands.review",
    "train": "trainer.cli",
    "play": "trainer.play",
    "export": "trainer.export",
    "eval": "trainer.evaluate",
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    status = run_command(args.command, args.handler, args)
    # The command has said its last word: a Ctrl-C now would only interrupt the interpreter's
    # exit handlers (Ray's shutdown among them, registered after this module's) with a traceback.
    # atexit runs handlers last-registered first, so this one runs before Ray's.
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    return status


if __name__ == "__main__":
    sys.exit(main())
