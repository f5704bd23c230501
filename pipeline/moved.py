"""The old import paths of the modules that moved into rooms (issue 37), kept working for users'
notebooks and scripts: `import pipeline.explore` gives the very module `pipeline.inspection.explore`
(one module object under two names, so state and isinstance checks agree), imported on first use."""

from __future__ import annotations

from core.moved import keep_old_paths

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


def install_old_paths() -> None:
    """Make every old path import its room's module (core/moved.py, the rule the trainer's old
    paths follow too)."""
    keep_old_paths(
        {f"pipeline.{name}": f"pipeline.{room}.{name}" for name, room in MOVED_TO_ROOM.items()}
    )
