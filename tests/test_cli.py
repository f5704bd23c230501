"""The front door: every `animegamer` command's errors (one line on stderr; exit 2 for usage or
input errors, 1 for failed work), the Makefile's path variables, and the paths commands accept.

Everything runs as a user runs it, in a subprocess: the console script's module, or `make`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIKES, ROOT, animegamer, make_video

# A film named as films are: a space, an apostrophe and parentheses.
AWKWARD_NAME = "Kiki's Delivery Service (1989).mp4"


def assert_one_line_error(run: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    """Exit `status`, and stderr ends in exactly one error line holding `words`, no traceback."""
    assert run.returncode == status, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, run.stderr
    assert run.stderr.rstrip("\n").splitlines()[-1] == errors[0]
    for word in words:
        assert word in errors[0], (word, errors[0])


def slow(*values: object) -> object:
    """A case left to the full suite: its command imports torch or pandas (over 5 s here), or
    it repeats a kind of error that a faster case already covers."""
    return pytest.param(*values, marks=pytest.mark.slow)


@pytest.fixture(scope="module")
def awkward_film(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("films with (awkward) names")
    film = folder / AWKWARD_NAME
    shutil.copy(BIKES, film)
    return film


# ---------------------------------------------------------------- usage and input errors: exit 2


def test_no_command_and_an_unknown_option_are_usage_errors():
    run = animegamer()
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert_one_line_error(animegamer("dataset", "--no-such-option"), 2, "--no-such-option")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["dataset", "--out", "{tmp}", "--set", "clips.crf=fast"], ["clips.crf", "fast"]),
        slow(
            ["dataset", "--out", "{tmp}", "--config", "/nonexistent/settings.yaml"],
            ["settings.yaml"],
        ),
        (["caption", "/nonexistent/film"], ["/nonexistent/film"]),
        slow(["caption", "{tmp}", "--ip", "no-such-ip"], ["no-such-ip"]),
        slow(["report", "/nonexistent/film"], ["/nonexistent/film"]),
        slow(["report", "{tmp}"], ["no film folders"]),
        slow(["report", "{tmp}", "--preview-width", "4"], ["--preview-width 4"]),
        (["motion-calibrate", "/nonexistent/data"], ["/nonexistent/data"]),
        slow(["motion-calibrate", "{tmp}", "--quantiles", "0.5,0.2,0.6,0.8"], ["{tmp}"]),
        (["motion-eval", "{tmp}", "--levels", "/nonexistent/levels.json"], ["levels.json"]),
        slow(["motion-eval", "{tmp}"], ["--levels"]),
        slow(["train", "--phase", "encoder"], ["no shards given"]),
        slow(
            ["train", "--phase", "mllm", "--set", "no_such_setting=1", "--shards", "x"], ["no_such"]
        ),
        slow(
            ["play", "--mllm", "m", "--out", "o", "--instructions", "/nonexistent/game.txt"],
            ["game"],
        ),
        slow(
            ["export", "/nonexistent/data", "--format", "webdataset", "--out", "{tmp}/x"],
            ["/nonexistent/data"],
        ),
        slow(["export", "{tmp}", "--format", "cogvideox", "--out", "{tmp}/x"], ["{tmp}"]),
        slow(["eval", "/nonexistent/shots"], ["/nonexistent/shots"]),
        slow(["eval", "{tmp}", "--set", "no_such_setting=1"], ["no_such_setting"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_each_command_reports_bad_input_on_one_line_with_exit_2(args, words, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    words = [w.replace("{tmp}", str(tmp_path)) for w in words]
    assert_one_line_error(animegamer(*args), 2, *words)


@pytest.mark.slow
def test_play_names_a_mllm_folder_without_a_checkpoint(tmp_path):
    game = tmp_path / "game.txt"
    game.write_text("Character: Qiqi; Motion: quickly flying; Background: day sky.\n")
    empty = tmp_path / "empty run"
    empty.mkdir()
    run = animegamer("play", "--mllm", empty, "--instructions", game, "--out", tmp_path / "o")
    assert_one_line_error(run, 2, str(empty), "no trainer checkpoint")


def test_an_output_folder_that_cannot_be_made_is_one_line_before_any_film_is_cut(tmp_path):
    run = animegamer("dataset", BIKES, "--out", "/proc/nowhere", "--executor", "local", "--quiet")
    assert_one_line_error(run, 2, "/proc/nowhere", "output folder")
    assert run.stdout == ""  # no film was cut: cutting prints a line per film


@pytest.mark.slow
def test_a_film_file_that_was_never_cut_is_named(tmp_path):
    run = animegamer("report", BIKES, "--dataset-dir", tmp_path)
    assert_one_line_error(run, 2, str(BIKES), "no film folder for it", str(tmp_path))


# ---------------------------------------------------------------- failed work: exit 1


def test_a_film_that_fails_is_one_line_on_stderr_and_exit_1(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    run = animegamer("dataset", bad, "--out", tmp_path / "out", "--executor", "local", "--quiet")
    assert_one_line_error(run, 1, str(bad), "not a readable video")


def test_motion_eval_with_no_measurable_clip_is_failed_work(tmp_path):
    (tmp_path / "a.mp4").write_text("not a video")
    levels = tmp_path / "levels.json"
    levels.write_text(json.dumps({"a": 3}))
    run = animegamer("motion-eval", tmp_path, "--levels", levels)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert any("skipped" in line and "a.mp4" in line for line in lines)
    assert lines[-1].endswith("error: no clip could be measured")


# ---------------------------------------------------------------- make, with awkward paths


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`make` in the repository, with this interpreter and without (re)building the venv, in an
    environment without what a `make` around this test run hands down: `make test ARGS=-x` puts
    ARGS=-x in MAKEFLAGS and in the environment, and the inner make would take it as its own."""
    makefile_variables = set(re.findall(r"\$\(([A-Z][A-Z_]*)\)", (ROOT / "Makefile").read_text()))
    inherited = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GNUMAKEFLAGS"}
    clean = {k: v for k, v in os.environ.items() if k not in inherited | makefile_variables}
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "venv", f"PY={sys.executable}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, **(env or {})},
    )


@pytest.mark.parametrize(
    ("target", "variables", "expected"),
    [
        (
            "dataset",
            {"FILM": "{film}", "IP": "{dir}/ip's.yaml", "OUT": "{dir}", "MODEL": "{dir}/m (1)"},
            ["dataset", "{film}", "--ip", "{dir}/ip's.yaml", "--out", "{dir}"],
        ),
        ("caption", {"FILM": "{film}", "OUT": "{dir}"}, ["caption", "{film}", "--dataset-dir"]),
        ("report", {"FILM": "{film}", "OUT": "{dir}", "REPORT": "{dir}/r (1).html"}, ["report"]),
        ("motion-calibrate", {"SHARDS": "{dir}"}, ["motion-calibrate", "{dir}"]),
        ("motion-eval", {"CLIPS": "{dir}", "LEVELS": "{dir}/l's.json"}, ["--levels"]),
        ("train", {"PHASE": "mllm", "SHARDS": "{dir}", "CONFIG": '{dir}/"c".yaml'}, ["--shards"]),
    ],
)
def test_every_path_variable_of_make_is_one_argument(target, variables, expected, tmp_path):
    """`make -n` prints each command as the shell will run it: split it as the shell does."""
    weird = tmp_path / "a dir (with) 'quotes' and \"more\""
    film = str(weird / AWKWARD_NAME)
    values = {
        k: v.replace("{film}", film).replace("{dir}", str(weird)) for k, v in variables.items()
    }
    run = make("-n", target, *(f"{k}={v}" for k, v in values.items()))
    assert run.returncode == 0, run.stderr
    argv = shlex.split(run.stdout.strip().splitlines()[-1])
    assert argv[:3] == [sys.executable, "-m", "pipeline.cli"]
    for value in values.values():
        assert value in argv, (value, argv)
    expected = [e.replace("{film}", film).replace("{dir}", str(weird)) for e in expected]
    assert all(e in argv for e in expected), argv


@pytest.mark.slow
def test_make_dataset_then_report_and_caption_on_a_film_with_an_awkward_name(awkward_film):
    out = awkward_film.parent / "out (1)"
    film_args = [f"FILM={awkward_film}", f"OUT={out}"]
    run = make("dataset", *film_args, "ARGS=--executor local --quiet")
    assert run.returncode == 0, run.stderr
    assert "Kiki's Delivery Service (1989): done:" in run.stdout
    (film_dir,) = out.glob("Kiki_s_Delivery_Service_1989-*")
    assert (film_dir / "manifest.parquet").is_file()

    # the film file itself names its folder under OUT, for report and caption alike
    report = awkward_film.parent / "the report (kiki's).html"
    run = make("report", *film_args, f"REPORT={report}", "ARGS=--previews 0")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == str(report)
    assert film_dir.name in report.read_text()
    run = make("caption", *film_args)
    assert run.returncode == 0, run.stderr
    assert f"{film_dir}: " in run.stdout and "pending" in run.stdout


@pytest.mark.slow
def test_a_run_prints_no_library_chatter(tmp_path):
    """The lines a run prints are the project's own: the duplicate search's faiss import used to
    add "Successfully loaded faiss." to every run's output."""
    film = make_video(tmp_path / "film.mp4", size=(144, 256), cuts=(40,), num_frames=120)
    run = animegamer("dataset", film, "--out", tmp_path / "out", "--executor", "local")
    assert run.returncode == 0, run.stderr
    assert "film: done:" in run.stdout
    assert "faiss" not in (run.stdout + run.stderr).lower()


def test_output_to_a_reader_that_has_gone_stops_quietly_with_141(tmp_path):
    """`animegamer dataset --dry-run | head`: the reader closes the pipe before the plan is
    printed; the command stops with the shell's SIGPIPE status and no traceback (it printed one
    from the middle of the plan)."""
    films = tmp_path / "films"
    films.mkdir()
    shutil.copy(BIKES, films / BIKES.name)
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(films), "--dry-run"]
    command += ["--out", str(tmp_path / "out")]
    script = f"{shlex.join(command)} | head -c 0; echo $((PIPESTATUS[0]))"
    run = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert run.stdout.strip() == "141", run
    assert "Traceback" not in run.stderr and "Error" not in run.stderr, run.stderr
