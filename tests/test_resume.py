"""Reruns after a crash: completed work is skipped and the output equals an uninterrupted run's."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest
from conftest import CLI, ROOT, make_video

from core.shards import read_clips
from pipeline.cli import main


def _args(film, out, *extra, executor="local"):
    """The arguments of `animegamer dataset` for `film` in 2-second segments."""
    args = ["dataset", str(film), "--out", str(out), "--quiet"]
    args += ["--set", "run.segment_seconds=2", *extra]
    return args + (["--executor", executor] if executor != "auto" else [])


def _cli(film, out, *extra, executor="local"):
    return [*CLI, *_args(film, out, *extra, executor=executor)]


def _rows(film_dir):
    return [c.to_row() for c in read_clips(film_dir)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """A 20-second film of four scenes (ten segments) at 256x144, and the film folder its
    uninterrupted run makes: the reference of both kill -9 tests, cut once (in this process:
    what is compared is its output, not how it ran)."""
    folder = tmp_path_factory.mktemp("resume")
    film = make_video(
        folder / "long.mp4", size=(144, 256), cuts=(70, 200, 330), num_frames=480, seed=7
    )
    assert main(_args(film, folder / "reference")) == 0
    return film, next((folder / "reference").glob("long-*"))


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["local", "auto"])
def test_kill_9_then_rerun_gives_the_uninterrupted_output(
    tmp_path, capsys, uninterrupted, executor
):
    """The whole run's process group killed, as a crash or a closed terminal does (under 'auto',
    the pool's workers with it); the rerun's output is the uninterrupted run's, whichever ran."""
    film, reference_dir = uninterrupted
    out = tmp_path / "crashed"
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    victim = subprocess.Popen(
        _cli(film, out, executor=executor),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not list(out.glob("*/work/segment-*/DONE.json")):  # kill once a segment is done
        assert victim.poll() is None, "the run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    film_dir = next(out.glob("long-*"))
    assert not (film_dir / "summary.json").exists()

    rerun = subprocess.run(
        _cli(film, out, executor=executor), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "segments already done" in rerun.stdout
    expected, got = _rows(reference_dir), _rows(film_dir)
    assert len(got) == len(expected) > 0
    assert len({r["clip_id"] for r in got}) == len(got)  # no duplicates
    for want, have in zip(expected, got):  # same ids, order, values and media bytes
        assert [k for k in want if want[k] != have[k]] == []
    for name in ("manifest.parquet", "drops.parquet"):
        assert (film_dir / name).read_bytes() == (reference_dir / name).read_bytes()
    assert not (film_dir / "work").exists()

    capsys.readouterr()
    assert main(_args(film, out)) == 0  # in this process: only the folder's state is in question
    assert "already complete" in capsys.readouterr().out
    summary = json.loads((film_dir / "summary.json").read_text())
    assert summary["complete"] and summary["clips_written"] == len(expected)


INTERRUPTED_LINE = re.compile(
    r"interrupted; run the same command again to resume \((\d+) of (\d+) segments done\)"
)


def _film_to_interrupt(tmp_path):
    """Sixty two-second segments at a small size: when the first segment commits, the others
    still take seconds, so on a loaded machine the SIGINT cannot arrive after the run ended."""
    return make_video(
        tmp_path / "long.mp4", size=(144, 256), cuts=(70, 200, 330), num_frames=2880, seed=7
    )


def _interrupt_once_a_segment_is_done(
    command: list[str], out
) -> tuple[subprocess.CompletedProcess, int]:
    """Run `command` in its own process group and send the whole group SIGINT (what Ctrl-C in a
    terminal does: Ray's processes get it too) once a segment has committed its DONE marker; the
    finished run and its process group."""
    victim = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not list(out.glob("*/work/segment-*/DONE.json")):
        assert victim.poll() is None, "the run finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(victim.pid, signal.SIGINT)
    stdout, stderr = victim.communicate(timeout=120)
    return subprocess.CompletedProcess(command, victim.returncode, stdout, stderr), victim.pid


def _left_in_group(group: int, seconds: float = 10) -> list[psutil.Process]:
    """The processes of the process group `group` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for process in psutil.process_iter():
            try:
                if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(process)
            except (ProcessLookupError, psutil.Error):
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _check_interrupted(run: subprocess.CompletedProcess, out) -> None:
    """Exit 130 and one line on stderr, whose count of done segments is what a rerun reuses."""
    assert run.returncode == 130, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines and INTERRUPTED_LINE.fullmatch(lines[-1]), run.stderr
    done, planned = map(int, INTERRUPTED_LINE.fullmatch(lines[-1]).groups())
    assert 1 <= done < planned
    assert done <= len(list(out.glob("*/work/segment-*/DONE.json")))
    for noise in ("Traceback", "KeyboardInterrupt", "task_manager", "Token authentication"):
        assert noise not in run.stderr


@pytest.mark.slow
def test_ctrl_c_says_how_far_the_run_got_in_one_line(tmp_path):
    film = _film_to_interrupt(tmp_path)
    out = tmp_path / "out"
    run, _ = _interrupt_once_a_segment_is_done(_cli(film, out), out)
    _check_interrupted(run, out)
    assert run.stderr.strip().count("\n") == 0  # the line is all there is


@pytest.mark.slow
@pytest.mark.serial  # Ray's processes on every core
def test_ctrl_c_under_ray_is_one_line_without_ray_noise(tmp_path):
    """Ray's workers and raylet get the SIGINT as well; none of their complaints, nor Ray's
    start-up warning about token authentication, reaches the user."""
    film = _film_to_interrupt(tmp_path)
    out = tmp_path / "out"
    command = _cli(film, out, "--set", "run.num_cpus=1", executor="ray")
    run, _ = _interrupt_once_a_segment_is_done(command, out)
    _check_interrupted(run, out)


@pytest.mark.slow
def test_ctrl_c_under_the_default_process_pool_is_one_line(tmp_path):
    """The pool's workers get the SIGINT as well and leave it to the driver: one line, exit 130,
    and no worker left cutting once the command has returned."""
    film = _film_to_interrupt(tmp_path)
    out = tmp_path / "out"
    run, group = _interrupt_once_a_segment_is_done(_cli(film, out, executor="auto"), out)
    _check_interrupted(run, out)
    assert run.stderr.strip().count("\n") == 0
    assert _left_in_group(group) == []


@pytest.mark.slow
def test_force_cuts_a_finished_film_again(tmp_path, capsys):
    """`--force` re-cuts a film that a complete run committed (by default it is skipped), to the
    same clips. (The command runs in this process: what it does with the flag is in question.)"""
    film = make_video(tmp_path / "short.mp4", size=(144, 256), num_frames=72, seed=3)
    out = tmp_path / "out"
    assert main(_args(film, out)) == 0
    film_dir = next(out.glob("short-*"))
    before = _rows(film_dir)
    summary = film_dir / "summary.json"
    written = summary.stat().st_mtime_ns
    capsys.readouterr()
    assert main(_args(film, out, "--force")) == 0
    again = capsys.readouterr().out
    assert "already complete" not in again and ": done:" in again
    assert summary.stat().st_mtime_ns != written
    assert _rows(film_dir) == before
