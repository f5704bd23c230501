"""`make stress`: run the CLI many times and count the runs that do not end cleanly (issue 30).

A process that did all its work can still die at interpreter exit, when a native thread touches
Python after finalization began (SIGABRT, "terminate called without an active exception"). That
depends on timing, so it shows up once in a few hundred runs on a loaded machine: this runs the
commands over and over, two at a time (the second run is the load), mixing a bad film and a good
one, the process pool and the local executor, Ctrl-C mid-run and normal ends, and the folder
commands. A run counts as an abort when its exit status is not the one its case expects, or its
stderr holds a C++ abort, a fatal Python error or a traceback.

    python -m bench.stress_exit --runs 200 [--jobs 2] [--keep DIR]

Prints one line per failed run (its stderr is kept under --keep) and the tally; exits 1 if any
run failed. Not part of `make test`: it takes minutes, and its figure is a count over many runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from core.cli import INTERRUPTED, USAGE_ERROR, WORK_FAILED

ROOT = Path(__file__).resolve().parent.parent
GOOD_FILM = ROOT / "tests" / "media" / "bikes.mp4"
ABORT_SIGNS = ("terminate called", "Fatal Python error", "Traceback", "core dumped", "Aborted")
INTERRUPT_AFTER = 60.0  # seconds a run may take to start cutting before Ctrl-C is given up
RUN_LIMIT = 600  # seconds before a run counts as hung (and is killed)


@dataclass(frozen=True)
class Case:
    """One way to run a command. `args` name {bad}, {good}, {ready} (a dataset cut once, before
    the runs) and {tmp} (a fresh folder per run); `status` is how a normal end exits."""

    name: str
    args: tuple[str, ...]
    status: int
    interrupt: bool = False  # Ctrl-C (SIGINT to the process group) once the run has started
    on_ctrl_c: int = INTERRUPTED  # 130 and the one line; the review page's normal end is 0
    own_copy: bool = False  # the command rewrites {ready}: it gets a copy of its own


DATASET = ("dataset", "--out", "{tmp}/out", "--quiet")
LOCAL = ("--executor", "local")  # the default executor is the process pool
CASES = (
    Case("dataset bad+good, pool", (*DATASET, "{bad}", "{good}"), WORK_FAILED),
    Case("dataset bad+good, local", (*DATASET, "{bad}", "{good}", *LOCAL), WORK_FAILED),
    Case("dataset good, pool", (*DATASET, "{good}"), 0),
    Case("dataset good, local", (*DATASET, "{good}", *LOCAL), 0),
    Case("dataset, pool, Ctrl-C", (*DATASET, "{good}"), 0, interrupt=True),
    Case("dataset, local, Ctrl-C", (*DATASET, "{good}", *LOCAL), 0, interrupt=True),
    Case("report", ("report", "{ready}", "--out", "{tmp}/report.html", "--previews", "0"), 0),
    Case("report, no films", ("report", "{tmp}"), USAGE_ERROR),
    Case("quality-calibrate", ("quality-calibrate", "{ready}"), 0, own_copy=True),
    Case("motion-calibrate, 3 clips", ("motion-calibrate", "{ready}"), USAGE_ERROR, own_copy=True),
    Case("export", ("export", "{ready}", "--format", "webdataset", "--out", "{tmp}/x"), 0),
    Case("eval, no shots", ("eval", "{tmp}/absent"), USAGE_ERROR),
    Case("review, Ctrl-C", ("review", "{ready}", "--port", "0"), 0, interrupt=True, on_ctrl_c=0),
)


@dataclass
class Outcome:
    case: Case
    status: int
    stderr: str
    interrupted: bool  # the Ctrl-C was sent before the run ended

    @property
    def expected(self) -> set[int]:
        """The case's status; after Ctrl-C, also its Ctrl-C status (a Ctrl-C that lands once the
        command has said its last word is ignored: pipeline/cli.py)."""
        return {self.case.status, self.case.on_ctrl_c} if self.interrupted else {self.case.status}

    @property
    def problem(self) -> str | None:
        """Why this run is an abort, or None for a clean end."""
        sign = next((sign for sign in ABORT_SIGNS if sign in self.stderr), None)
        if self.status not in self.expected:
            expected = " or ".join(map(str, sorted(self.expected)))
            return f"exit {self.status}, expected {expected}" + (f" ({sign})" if sign else "")
        if sign:
            return f"stderr: {sign}"
        last = (self.stderr.strip().splitlines() or [""])[-1]
        if self.status == INTERRUPTED and not last.startswith("interrupted"):
            return "Ctrl-C without its one line"
        return None


def run_case(case: Case, ready: Path, bad: Path, scratch: Path) -> Outcome:
    tmp = Path(tempfile.mkdtemp(dir=scratch))
    source = ready
    if case.own_copy:
        source = tmp / "dataset"
        shutil.copytree(ready, source)
    words = {"bad": str(bad), "good": str(GOOD_FILM), "ready": str(source), "tmp": str(tmp)}
    command = [sys.executable, "-m", "pipeline.cli", *(a.format(**words) for a in case.args)]
    with open(tmp / "stdout", "w") as stdout, open(tmp / "stderr", "w+") as stderr:
        # its own session, so that Ctrl-C reaches the whole group (fork server and workers) as
        # a terminal's would, and none of it reaches this script
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=stdout, stderr=stderr, start_new_session=True
        )
        interrupted = False
        try:
            interrupted = case.interrupt and _interrupt_once_started(process, case, tmp)
            status = process.wait(RUN_LIMIT)
        except subprocess.TimeoutExpired:
            stderr.write(f"\n(hung: killed after {RUN_LIMIT} s)\n")
        finally:
            if process.poll() is None:  # hung, or this script was stopped: leave nothing behind
                os.killpg(process.pid, signal.SIGKILL)
                status = process.wait()
        stderr.seek(0)
        text = stderr.read()
    shutil.rmtree(tmp, ignore_errors=True)
    return Outcome(case, status, text, interrupted)


def _interrupt_once_started(process: subprocess.Popen, case: Case, tmp: Path) -> bool:
    """Ctrl-C once the command is at work (a film folder exists, or the review page listens),
    after a random part of a second; False if it ended first."""
    deadline = time.monotonic() + INTERRUPT_AFTER
    while process.poll() is None and time.monotonic() < deadline and not _at_work(case, tmp):
        time.sleep(0.05)
    time.sleep(int.from_bytes(os.urandom(1)) / 255 * 0.5)
    if process.poll() is not None:
        return False
    os.killpg(process.pid, signal.SIGINT)
    return True


def _at_work(case: Case, tmp: Path) -> bool:
    if case.args[0] == "dataset":
        return any((tmp / "out").glob("*/"))
    return "http://" in (tmp / "stdout").read_text()  # the review page's address


def prepare(scratch: Path) -> tuple[Path, Path]:
    """A bad film (not a video) and a dataset cut from the good one, for the folder commands."""
    bad = scratch / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    ready = scratch / "ready"
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(GOOD_FILM)]
    subprocess.run(
        [*command, "--out", str(ready), "--quiet"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )
    return bad, ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (the others: load)")
    parser.add_argument("--keep", type=Path, help="where failed runs' stderr is kept")
    args = parser.parse_args(argv)
    # A shell ignores SIGINT in what it runs in the background, and an ignored signal stays
    # ignored in children (Python then installs no handler): the commands must take Ctrl-C as in
    # a terminal. A handled signal is reset to the default in a child, so handle it here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    keep = args.keep or Path(tempfile.gettempdir()) / f"stress-exit-kept-{os.getpid()}"
    ends: Counter[str] = Counter()
    aborts = 0
    with tempfile.TemporaryDirectory(prefix="stress-exit-") as folder:
        scratch = Path(folder)
        bad, ready = prepare(scratch)
        cases = itertools.islice(itertools.cycle(CASES), args.runs)
        with ThreadPoolExecutor(args.jobs) as pool:
            outcomes = pool.map(lambda case: run_case(case, ready, bad, scratch), cases)
            for number, outcome in enumerate(outcomes, 1):
                ends[f"{'Ctrl-C, ' * outcome.interrupted}exit {outcome.status}"] += 1
                if outcome.problem:
                    aborts += 1
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / f"run-{number}.stderr").write_text(outcome.stderr)
                    print(f"run {number} ({outcome.case.name}): {outcome.problem}", flush=True)
    print(f"{aborts} aborts in {args.runs} runs, {args.jobs} at a time, {len(CASES)} cases")
    print("how they ended: " + "; ".join(f"{end}: {n}" for end, n in sorted(ends.items())))
    if aborts:
        print(f"the stderr of each failed run is in {keep}")
    return 1 if aborts else 0


if __name__ == "__main__":
    sys.exit(main())
