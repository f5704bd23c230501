"""The trainer's module paths before its rooms (issue 37) keep working for users, notebooks and
scripts: the old path is the moved module itself, and `python -m OLD` runs it."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import trainer

ROOT = Path(__file__).resolve().parents[1]


def test_every_old_path_names_a_module_of_a_room():
    for old, new in trainer.OLD_PATHS.items():
        spec = importlib.util.find_spec(new)
        assert spec is not None and spec.origin, new
        assert Path(spec.origin).is_relative_to(ROOT / "trainer"), (new, spec.origin)
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), f"{old} is still a file"


def test_an_old_path_is_the_moved_module_itself():
    from trainer.shared import config as new

    old = importlib.import_module("trainer.config")  # the old path (no import statement names it)
    assert old is new and sys.modules["trainer.config"] is new
    assert old.MllmConfig is new.MllmConfig  # one class, not a copy
    # the module keeps its own name and spec, so pickles and tracebacks name the new path
    assert (new.__name__, new.__spec__.name) == ("trainer.shared.config", "trainer.shared.config")
    assert new.__spec__.origin == str(ROOT / "trainer" / "shared" / "config.py")


def test_python_dash_m_runs_an_old_path():
    """`python -m trainer.cli` is what torchrun and the docs start (docs/training.md)."""
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli", "--phase", "encoder", "--settings"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "encoder_warmup_steps = " in done.stdout
