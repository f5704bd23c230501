"""Processes that import the pipeline (the pool's workers, Ray's) import this checkout: its root
first on their PYTHONPATH, whatever else is installed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def this_checkout_first(extra: dict[str, str] | None = None) -> Iterator[None]:
    """This project's root first on PYTHONPATH (and the `extra` variables set) while processes
    that import the pipeline are started, so they import the same code as this process, whatever
    else is installed; restored afterwards."""
    settings = {"PYTHONPATH": checkout_first(os.environ.get("PYTHONPATH")), **(extra or {})}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def checkout_first(pythonpath: str | None) -> str:
    """`pythonpath` with this project's root first (once)."""
    paths = [project_root(), *(pythonpath.split(os.pathsep) if pythonpath else [])]
    return os.pathsep.join(dict.fromkeys(paths))


def project_root() -> str:
    return str(Path(__file__).resolve().parents[2])
