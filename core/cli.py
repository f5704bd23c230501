"""How every `animegamer` command ends when something is wrong: one line on stderr, naming the file
or setting and the problem, and an exit status that says whose move it is.

  2  usage or input error: bad arguments, settings, or input files; nothing was done
  1  failed work: the command ran and some of its work failed (a film, a clip, a phase)
130  interrupted (Ctrl-C): one line saying so (and how to resume, where the command can), no
     traceback
141  the reader of its output went away (`animegamer dataset --dry-run | head`): it stops
     quietly, as a shell tool does (128 + SIGPIPE)

Commands raise `UsageError` or `WorkFailed` (or wrap expected exception types with
`input_errors` / `work_errors`); `run_command` turns them into the line and the status, so no
command prints its own error format. Argument errors from argparse go through `OneLineParser`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

USAGE_ERROR = 2
WORK_FAILED = 1
INTERRUPTED = 130  # the shell's status for a process ended by SIGINT (128 + 2)
READER_GONE = 141  # the shell's status for a process ended by SIGPIPE (128 + 13)


class CommandError(Exception):
    """An expected way for a command to fail; the message is shown as it is, without traceback."""

    status = WORK_FAILED


class UsageError(CommandError):
    """Bad arguments, settings or input files: nothing was done."""

    status = USAGE_ERROR


class WorkFailed(CommandError):
    """The command ran, and (some of) its work failed."""

    status = WORK_FAILED


class Interrupted(CommandError):
    """Ctrl-C: the message (what was done, how to resume) is the whole output, not an error."""

    status = INTERRUPTED

    def __init__(self, message: str = "interrupted"):
        super().__init__(message)


def one_line(message: object) -> str:
    """The message on one line: a multi-line exception text is joined, never cut."""
    return " ".join(str(message).split())


def print_error(command: str, message: object) -> None:
    """`animegamer <command>: error: <message>` on stderr; also for a failure the run goes past."""
    print(f"animegamer {command}: error: {one_line(message)}", file=sys.stderr, flush=True)


@contextmanager
def input_errors(*types: type[BaseException]) -> Iterator[None]:
    """Exceptions of `types` raised inside are usage/input errors (exit 2)."""
    try:
        yield
    except types as exc:
        raise UsageError(str(exc)) from exc


@contextmanager
def work_errors(*types: type[BaseException]) -> Iterator[None]:
    """Exceptions of `types` raised inside are failed work (exit 1)."""
    try:
        yield
    except types as exc:
        raise WorkFailed(str(exc)) from exc


_ctrl_c_taken = 0


def ctrl_c_taken() -> int:
    """How many Ctrl-Cs this process took while a command ran. A native module whose import a
    Ctrl-C lands in turns the KeyboardInterrupt into an ImportError of its own ("initialization
    failed": pybind11, in cv2, onnxruntime, scipy), without a cause to find it by; code that
    records a job's own errors as failed work (the local executor) asks this whether the count
    moved during the job, so that Ctrl-C still ends the run with 130, not 1 (issue 30)."""
    return _ctrl_c_taken


def _take_ctrl_c(signum, frame) -> None:
    global _ctrl_c_taken
    _ctrl_c_taken += 1
    raise KeyboardInterrupt


def run_command(
    command: str, handler: Callable[[argparse.Namespace], int | None], args: argparse.Namespace
) -> int:
    """Run a command's handler; a CommandError becomes its one line and its exit status, and
    Ctrl-C ends it with one line and 130."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not where Ctrl-C is ignored (a background job)
        signal.signal(signal.SIGINT, _take_ctrl_c)
    try:
        status = int(handler(args) or 0)
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at exit
        return status
    except BrokenPipeError:
        # stdout's reader (`| head`) has gone: nothing more can be shown; point stdout at
        # nothing so the interpreter's last flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return READER_GONE
    except Interrupted as exc:
        print(one_line(exc), file=sys.stderr, flush=True)
        return exc.status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED
    except CommandError as exc:
        print_error(command, exc)
        return exc.status
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line (and the --help hint) instead of the usage text."""

    epilog_of: Callable[[], str] | None = None  # see `epilog_when_helping`

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(USAGE_ERROR)

    def format_help(self) -> str:
        if self.epilog_of is not None:
            self.epilog = self.epilog_of()
        return super().format_help()


def module_parser(prog: str, description: str, add, *add_args) -> argparse.ArgumentParser:
    """The parser of a module run on its own (`python -m ...`, e.g. under torchrun), with the same
    arguments as its `animegamer` sub-command."""
    parser = OneLineParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add(parser, *add_args)
    return parser


def epilog_when_helping(parser: argparse.ArgumentParser, make: Callable[[], str]) -> None:
    """The parser's epilog, made by `make` only when --help prints it: a list of every setting
    imports every stage (most of a second), which a command's other arguments never need."""
    if isinstance(parser, OneLineParser):
        parser.epilog_of = make
    else:
        parser.epilog = make()
