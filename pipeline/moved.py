"""The old import paths of the modules that moved into rooms (issue 37), kept working for users'
notebooks and scripts: `import pipeline.explore` gives the very module `pipeline.inspection.explore`
(one module object under two names, so state and isinstance checks agree), imported on first use."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

# old name under `pipeline.` -> the room it moved to
MOVED_TO_ROOM = {
    "config": "data",
    "ip": "data",
    "manifest": "data",
    "review": "data",
    "corpus": "data",
    "quality": "passes",
    "duplicates": "passes",
    "bitscan": "passes",
    "bitscan_kernel": "passes",
    "caption_films": "passes",
    "runner": "running",
    "scheduler": "running",
    "film_tasks": "running",
    "segments": "running",
    "finalize": "running",
    "folder_passes": "running",
    "explore": "inspection",
    "report": "inspection",
    "report_corpus": "inspection",
    "report_data": "inspection",
    "report_html": "inspection",
    "report_options": "inspection",
    "review_server": "inspection",
}


def new_path(old: str) -> str | None:
    """`pipeline.explore` -> `pipeline.inspection.explore`; None for a name that did not move."""
    package, _, name = old.partition(".")
    room = MOVED_TO_ROOM.get(name) if package == "pipeline" else None
    return f"pipeline.{room}.{name}" if room else None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # the import system keeps the module's own __name__ and __spec__ (they are already set),
        # so the module stays what it is, under one more name in sys.modules
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class _OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        target_name = new_path(fullname)
        if target_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name))


def install_old_paths() -> None:
    """Put the finder on sys.meta_path once (reloading the package must not add a second)."""
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(_OldPathFinder())
