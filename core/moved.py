"""Old import paths of moved modules, kept working: `import trainer.data` gives the module that now
lives at `trainer.shared.data`, the same object (so a class is defined once and a test's
monkeypatch reaches every user), imported only when the old path is asked for; `python -m OLD`
runs the moved module's code as `__main__`.

A package whose modules moved calls `keep_old_paths({old: new, ...})` in its `__init__.py`
(`pipeline/moved.py`, `trainer/__init__.py`). Code of this project imports the new paths; the old
ones are for users, notebooks and scripts.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of moved modules, and loads each as its new module."""

    def __init__(self, moves: dict[str, str]):
        self.moves = dict(moves)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.moves:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.moves[spec.name])
        spec.loader_state = module.__spec__  # the import system replaces it: put back below
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran under its new name); it keeps its own spec."""
        if module.__spec__ is not None and module.__spec__.loader_state is not None:
            module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname: str) -> CodeType | None:
        """The moved module's code, which `python -m OLD` (runpy) runs as `__main__`."""
        spec = importlib.util.find_spec(self.moves[fullname])
        loader = spec.loader if spec else None
        return loader.get_code(self.moves[fullname]) if loader else None  # type: ignore[attr-defined]


def keep_old_paths(moves: dict[str, str]) -> None:
    """Make every old module path of `moves` (old -> new) import its new module."""
    # first: a finder after the path finder could answer an old name from elsewhere (an editable
    # install's finder maps the package to its checkout, where the old file may still be)
    if not any(isinstance(f, MovedModules) and f.moves == moves for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules(moves))
