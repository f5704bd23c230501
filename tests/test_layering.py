"""The top-level packages form layers: each imports only the layers below it, so there is no
import cycle between packages (function-level imports count too: they are cycles deferred)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "prompts", "stages", "pipeline", "trainer", "bench")
# What each package may import. `pipeline.cli` names trainer's commands as strings (importlib),
# which is not an import edge.
ALLOWED = {
    "core": set(),
    "prompts": set(),
    "stages": {"core", "prompts"},
    "pipeline": {"core", "prompts", "stages"},
    # the game text rule (prompts.game), the levels files (stages.motion_levels) and eval's reuse of
    # motion-eval's measurement (pipeline) sit below the trainer; none of them imports it
    "trainer": {"core", "prompts", "stages", "pipeline"},
    # bench.gpu times the trainer's steps with the prompts' words in its tokenizers
    "bench": {"core", "prompts", "stages", "pipeline", "trainer"},
}


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    """The file's syntax tree, read once for every test of this module (each walks every file of
    the project: 2.8 CPU-s when each parsed them again, issue 30)."""
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def every_node(path: Path) -> tuple[ast.AST, ...]:
    """`ast.walk` of the file's tree, walked once."""
    return tuple(ast.walk(syntax_tree(path)))


def imported_packages(path: Path) -> set[str]:
    """Project packages named by any import in the file, at any depth."""
    found = set()
    for node in every_node(path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(PACKAGES)
    return found


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in PACKAGES}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            graph[package] |= imported_packages(path) - {package}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of packages (first == last), or None."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return trail[trail.index(target) :] + [target]
            if target not in state and (cycle := visit(target, trail + [target])):
                return cycle
        state[node] = "done"
        return None

    for start in graph:
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_every_package_imports_only_the_layers_below_it():
    graph = package_graph()
    breaches = {pkg: sorted(targets - ALLOWED[pkg]) for pkg, targets in graph.items()}
    assert {pkg: bad for pkg, bad in breaches.items() if bad} == {}


def test_there_is_no_import_cycle_between_packages():
    assert find_cycle(package_graph()) is None


def test_the_cycle_finder_sees_a_cycle():
    # The check above must be able to fail: the graph the issue started from had this cycle.
    graph = {"core": set(), "stages": {"pipeline"}, "pipeline": {"stages", "core"}}
    assert find_cycle(graph) in (
        ["stages", "pipeline", "stages"],
        ["pipeline", "stages", "pipeline"],
    )


def test_the_import_reader_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from pipeline.running.runner import run_film\n")
    assert imported_packages(module) == {"pipeline"}


def module_name(path: Path) -> str:
    """`pipeline/executors/ray.py` -> `pipeline.executors.ray`; a package's `__init__.py` -> the
    package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_when_run(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file imports at any depth (function-level imports are
    cycles deferred), except in `if TYPE_CHECKING:` blocks, which never run. `from a import b`
    names module `a.b` where there is one, else `a`."""
    never_run = {
        id(inner)
        for node in every_node(path)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found: set[str] = set()
    for node in every_node(path):
        if id(node) in never_run:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def test_there_is_no_import_cycle_between_modules():
    """Inside a package too: stages/captioning/engines.py imported stage.py at its top, and
    stage.py imported engines.py inside its functions (a cycle deferred, not gone)."""
    modules = project_modules()
    names = set(modules)
    graph = {name: imports_when_run(path, names) - {name} for name, path in modules.items()}
    assert find_cycle(graph) is None


def test_the_module_reader_counts_what_runs(tmp_path):
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import pipeline.running.runner\n"
        "from pipeline import executors, cli\n"
        "if TYPE_CHECKING:\n    from stages.base import ClipStage\n"
        "def f():\n    from core.record import Clip\n"
    )
    modules = {"pipeline", "pipeline.running.runner", "pipeline.executors", "pipeline.cli", "core"}
    modules |= {"stages.base", "core.record"}
    found = imports_when_run(tmp_path / "m.py", modules)
    assert found == {"pipeline.running.runner", "pipeline.executors", "pipeline.cli", "core.record"}


def imported_modules(path: Path) -> set[str]:
    """Every module named by an import in the file, at any depth."""
    found = set()
    for node in every_node(path):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_only_the_cli_imports_a_command_module():
    """A command module is the CLI's shell around code that lives in a library module; code
    that needs that code imports the library module (trainer eval: pipeline.motion_eval)."""
    importers = sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "commands" not in path.parts
        and any(m.startswith("pipeline.commands") for m in imported_modules(path))
    )
    assert importers == []


def defines_something(path: Path) -> bool:
    """Whether a module defines a function or a class: a package's `__init__.py` that does holds
    code (a contract, a loader), where one that does not is the package's docstring."""
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in syntax_tree(path).body)


def test_the_architecture_page_names_every_module():
    """docs/architecture.md's module tables stay true to the tree: every module is named (a row
    may name several modules of one folder: `trainer/train_encoder.py`, `train_mllm.py`), and so
    is every package `__init__.py` that holds code."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = set()
    for row in page.splitlines():
        cells = row.split("|")
        if len(cells) < 3:
            continue
        paths = [p.strip("` ") for p in cells[1].split(",")]
        folder = str(Path(paths[0]).parent) if "/" in paths[0] else ""
        named |= {p if "/" in p else f"{folder}/{p}" for p in paths}
    modules = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" or defines_something(path)
    }
    assert sorted(modules - named) == []


# ---------------------------------------------------------------- declared dependencies

# Declared packages whose import name differs from the distribution's.
IMPORT_NAMES = {
    "opencv-python": "cv2",
    "pyyaml": "yaml",
    "pillow": "PIL",
}
# Declared and used, but never named by an `import` of this project: each with where it is used.
USED_WITHOUT_IMPORT = {
    "sentencepiece": "transformers reads the CogVideoX T5 tokenizer's spiece.model with it",
    "accelerate": "diffusers and transformers load real checkpoints with low memory through it",
    "rapidocr-onnxruntime": "found with importlib (stages/burned_in/text_detector.py): its ONNX text detector",
    "pytest-timeout": "the `timeout` setting of [tool.pytest.ini_options]",
    "pytest-xdist": "the `-n` option scripts/test.sh gives pytest (make test, make test-fast)",
    "ipykernel": "the kernel tests/test_notebook.py runs the notebook in",
    "moto": "run as `python -m moto.server` by tests/s3server.py",
    "py-spy": "run as a program by bench/run.py --profile",
    "lmdeploy": "the optional GPU engine (stages/captioning/engines.py imports it when chosen)",
}


def declared_dependencies() -> list[str]:
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [
        spec for extra in project["optional-dependencies"].values() for spec in extra
    ]
    return sorted({re.split(r"[\[<>=!~ ]", spec, maxsplit=1)[0].lower() for spec in specs})


def test_every_declared_dependency_is_used():
    imported = {
        module.split(".")[0]
        for package in (*PACKAGES, "tests")
        for path in (ROOT / package).rglob("*.py")
        for module in imported_modules(path)
    }
    unused = [
        name
        for name in declared_dependencies()
        if IMPORT_NAMES.get(name, name.replace("-", "_")) not in imported
        and name not in USED_WITHOUT_IMPORT
    ]
    assert unused == []


# ---------------------------------------------------------------- the trainer's rooms

# What each room of trainer/ may import of trainer/ (besides itself): the table of
# docs/architecture.md, which `test_the_architecture_page_states_the_trainer_rooms` keeps equal.
TRAINER_ROOMS = {
    "phases": {"models", "shared"},
    "evaluation": {"shared"},
    "delivery": {"models", "shared"},
    "models": {"shared"},
    "shared": set(),
}


def trainer_room(module: str) -> str | None:
    """`trainer.phases.loop` -> `phases`; `trainer` itself and modules outside it -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "trainer" and len(parts) > 1 else None


def trainer_room_imports(path: Path) -> set[str]:
    """The rooms of trainer/ the file imports, at any depth: `from trainer.models import build`
    and `from trainer import models` both name `models`."""
    found = set()
    for node in every_node(path):
        if isinstance(node, ast.Import):
            found |= {trainer_room(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "trainer":
                found |= {alias.name for alias in node.names}
            else:
                found.add(trainer_room(node.module))
    return {room for room in found if room in TRAINER_ROOMS}


def trainer_room_breaches() -> dict[str, list[str]]:
    breaches = {}
    for path in sorted((ROOT / "trainer").rglob("*.py")):
        room = trainer_room(module_name(path))
        allowed = TRAINER_ROOMS.get(room, set()) | {room} if room else set()
        if bad := sorted(trainer_room_imports(path) - allowed):
            breaches[str(path.relative_to(ROOT))] = bad
    return breaches


def test_every_trainer_room_imports_only_the_rooms_below_it():
    assert trainer_room_breaches() == {}


def test_every_trainer_module_lives_in_a_room():
    """No module beside the rooms but the package's own `__init__.py` (its old paths)."""
    loose = [p.name for p in (ROOT / "trainer").glob("*.py") if p.name != "__init__.py"]
    folders = {p.name for p in (ROOT / "trainer").iterdir() if (p / "__init__.py").is_file()}
    assert (loose, folders) == ([], set(TRAINER_ROOMS))


def test_the_trainer_rooms_form_no_cycle():
    assert find_cycle({room: set(allowed) for room, allowed in TRAINER_ROOMS.items()}) is None


def test_the_room_reader_sees_an_arrow_back_up(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from trainer.shared import data\nfrom trainer import models\n"
        "def f():\n    from trainer.phases.cli import main_for_phase\n"
    )
    assert trainer_room_imports(module) == {"shared", "models", "phases"}
    # in shared/, both of the others are arrows back up
    assert trainer_room_imports(module) - TRAINER_ROOMS["shared"] - {"shared"} == {
        "models",
        "phases",
    }


def test_the_architecture_page_states_the_trainer_rooms():
    page = (ROOT / "docs" / "architecture.md").read_text()
    stated = {}
    for row in page.splitlines():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`trainer/") and cells[0].endswith("/`"):
            room = cells[0].strip("`/").split("/")[1]
            stated[room] = {c.strip("` ") for c in cells[2].split(",")} - {"nothing"}
    assert stated == TRAINER_ROOMS


def test_the_project_imports_no_old_trainer_path():
    """`trainer.data` and the other paths before the rooms are for users and scripts
    (trainer/__init__.py OLD_PATHS); the project's own code names the new ones."""
    import trainer

    users = [
        (str(path.relative_to(ROOT)), name)
        for package in (*PACKAGES, "tests")
        for path in (ROOT / package).rglob("*.py")
        for name in imported_modules(path)
        if name in trainer.OLD_PATHS
        or any(f"{name}.{alias}" in trainer.OLD_PATHS for alias in imported_names(path, name))
    ]
    assert users == []


def imported_names(path: Path, module: str) -> set[str]:
    """The names `from module import ...` takes in the file."""
    return {
        alias.name
        for node in every_node(path)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == module
        for alias in node.names
    }


# ---------------------------------------------------------------- public names between modules


def underscore_imports(path: Path, modules: set[str]) -> list[str]:
    """Where the file takes another project module's underscore name: `from x import _y`, or
    `x._y` on a module it imported (`import x.y as z`, `from x import y`). Dunder names are
    Python's own, not private."""
    private = re.compile(r"_(?!_)")
    own = module_name(path) if path.is_relative_to(ROOT) else ""
    aliases: dict[str, str] = {}
    found = []
    for node in every_node(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif node.module in modules and node.module != own and private.match(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    for node in every_node(path):
        if not (isinstance(node, ast.Attribute) and private.match(node.attr)):
            continue
        chain, base = [], node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases:
            target = ".".join([aliases[base.id], *reversed(chain)])
            if target in modules and target != own:
                found.append(f"{node.lineno}: {target}.{node.attr}")
    return found


def test_no_module_imports_another_modules_underscore_name():
    """A name with a leading underscore is its module's own; one that another module needs is
    public. Tests included: a test of a helper imports it by a public name."""
    modules = set(project_modules())
    offenders = {
        str(path.relative_to(ROOT)): found
        for package in (*PACKAGES, "tests")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (found := underscore_imports(path, modules))
    }
    assert offenders == {}


def test_the_underscore_reader_sees_both_forms(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import trainer.shared.data as data\nfrom trainer.phases import loop\n"
        "from stages.scenes import _hidden, SceneCuts\n"
        "def f():\n    return data._video, loop._start_step, loop.__name__, SceneCuts._blank\n"
    )
    modules = {"trainer.shared.data", "trainer.phases.loop", "stages.scenes"}
    assert underscore_imports(module, modules) == [
        "3: from stages.scenes import _hidden",
        "5: trainer.shared.data._video",
        "5: trainer.phases.loop._start_step",
    ]


# ---------------------------------------------------------------- modules that hold one idea

MAX_LINES = 650
# Modules allowed past MAX_LINES because they hold one idea that does not split well, each with
# why (docs/architecture.md says the same). None today.
ONE_IDEA_MODULES: dict[str, str] = {}


def test_no_module_is_over_650_lines():
    """Past about 600 lines a module usually holds several ideas (issue 37): split it by idea."""
    long = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert {name: n for name, n in long.items() if name not in ONE_IDEA_MODULES} == {}


# ---------------------------------------------------------------- pipeline's rooms

# pipeline/ is in rooms (issue 37). What each room's modules may import of the others; the
# package's own top (`pipeline/__init__.py`, `moved.py`: the old import paths) is open to all, and
# the front (`cli.py`, `commands/`, `motion_eval.py`) may import every room while no room imports
# it. docs/architecture.md draws this table; the test below keeps the drawing true.
PIPELINE_ROOMS: dict[str, set[str]] = {
    "executors": set(),
    "data": {"executors"},  # the configuration names the executors' choices
    "passes": {"data", "executors"},
    "running": {"data", "passes", "executors"},
    "inspection": {"data", "passes"},  # the report and review page show the quality pass
}
PIPELINE_BASE = {"pipeline", "pipeline.moved"}


def pipeline_room(module: str) -> str:
    """`pipeline.running.runner` -> `running`; the package and `pipeline.moved` -> `base`; every
    other module of pipeline/ (the CLI, the commands, motion_eval) -> `front`."""
    if module in PIPELINE_BASE:
        return "base"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PIPELINE_ROOMS else "front"


def arrows_back_up(edges: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The module-to-module imports inside pipeline/ that its rooms' table forbids."""
    bad = []
    for source, target in sorted(edges):
        here, there = pipeline_room(source), pipeline_room(target)
        if here == "front" or there == "base" or here == there:
            continue
        if there == "front" or there not in PIPELINE_ROOMS.get(here, set()):
            bad.append((source, target))
    return bad


def pipeline_edges() -> set[tuple[str, str]]:
    modules = project_modules()
    names = set(modules)
    return {
        (name, target)
        for name, path in modules.items()
        if name.startswith("pipeline")
        for target in imports_when_run(path, names)
        if target.startswith("pipeline") and target != name
    }


def test_each_pipeline_room_imports_only_the_rooms_below_it():
    assert arrows_back_up(pipeline_edges()) == []


def test_the_room_check_sees_an_arrow_back_up():
    # The arrow issue 37 warned of (the manifest left with the inspection modules, and the quality
    # pass importing it from above), a room importing the front, and two arrows that are allowed.
    edges = {
        ("pipeline.passes.quality", "pipeline.inspection.manifest"),
        ("pipeline.running.film_tasks", "pipeline.data.ip"),
        ("pipeline.data.config", "pipeline.cli"),
        ("pipeline.commands.dataset", "pipeline.running.runner"),
    }
    assert arrows_back_up(edges) == [
        ("pipeline.data.config", "pipeline.cli"),
        ("pipeline.passes.quality", "pipeline.inspection.manifest"),
    ]


def test_every_pipeline_module_sits_in_a_room_or_at_the_front():
    """No module lands loose in pipeline/ beside the rooms: the front is the CLI, its commands
    and motion_eval (the trainer's eval reuses it), nothing else."""
    loose = sorted(
        path.name
        for path in (ROOT / "pipeline").glob("*.py")
        if path.name not in {"__init__.py", "moved.py", "cli.py", "motion_eval.py"}
    )
    assert loose == []


def test_the_architecture_picture_draws_the_rooms_table():
    """The diagram in docs/architecture.md (a mermaid graph, `A --> B`: A may import B) has
    exactly the table's arrows."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("```mermaid", 1)[1].split("```", 1)[0]
    drawn = set(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block, re.M))
    table = {(room, below) for room, belows in PIPELINE_ROOMS.items() for below in belows}
    table |= {("front", room) for room in PIPELINE_ROOMS}
    assert drawn == table


def test_the_old_import_paths_still_work():
    """Users' notebooks and scripts import `pipeline.explore`, `pipeline.runner`, ...: each old
    path gives the very module of its room."""
    import importlib

    from pipeline.moved import MOVED_TO_ROOM, new_path

    for name in MOVED_TO_ROOM:
        old = importlib.import_module(f"pipeline.{name}")
        assert old is importlib.import_module(new_path(f"pipeline.{name}"))
    from pipeline.explore import open_dataset  # the notebook line of the flat layout

    from pipeline.inspection.explore import open_dataset as in_its_room

    assert open_dataset is in_its_room
    assert new_path("pipeline.cli") is None and new_path("stages.quality") is None
    # stages/ in rooms too: the two stage modules that were public before theirs
    import stages.in_world_text
    import stages.overlays

    import stages.burned_in.in_world_text
    import stages.burned_in.overlays

    assert stages.overlays is stages.burned_in.overlays
    assert stages.in_world_text is stages.burned_in.in_world_text


def test_no_folder_holds_more_than_about_fifteen_modules():
    """Issue 37: a folder past about 15 modules side by side wants rooms. 17 is the line: core/
    holds 17 small ones, each one idea (records, schema, video, frames, storage, ...)."""
    crowded = {
        str(folder.relative_to(ROOT)): count
        for package in PACKAGES
        for folder in [ROOT / package, *(ROOT / package).rglob("*/")]
        if folder.is_dir() and (count := len(list(folder.glob("*.py")))) > 17
    }
    assert crowded == {}
