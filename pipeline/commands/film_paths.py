"""The folders that commands reading a dataset (report, caption) accept: a dataset folder, a film
folder, or the film file itself, whose folder is found under the dataset folder it was cut into."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli import UsageError

DEFAULT_DATASET_DIR = Path("data")  # `animegamer dataset --out`'s default


def add_dataset_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset-dir",
        type=Path,
        default=DEFAULT_DATASET_DIR,
        metavar="OUT",
        help="where a film file given as PATH was cut into (`animegamer dataset --out`; "
        "default: %(default)s)",
    )


def folder_for(path: Path, dataset_dir: Path) -> Path:
    """`path` itself when it is a folder; for a film file, its film folder under `dataset_dir`."""
    if path.is_dir():
        return path
    if not path.exists():
        raise UsageError(f"{path}: no such film, film folder or dataset folder")
    return film_folder_of(path, dataset_dir)


def film_folder_of(film: Path, dataset_dir: Path) -> Path:
    """The folder `animegamer dataset --out dataset_dir` writes for this film file (named by the
    film's name and content hash, so a renamed or re-encoded file is not mistaken for it)."""
    from stages.probe import content_id, film_slug

    folder = dataset_dir / film_slug(film.stem, content_id(film))
    if not folder.is_dir():
        raise UsageError(
            f"{film}: no film folder for it under {dataset_dir} (looked for {folder.name}); "
            f"cut it first with animegamer dataset, or give --dataset-dir (make: OUT=)"
        )
    return folder
