"""`animegamer caption`: fill the caption columns of film folders the pipeline already wrote."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from core.cli import WORK_FAILED, input_errors, print_error
from core.film import FilmFolder
from core.settings import add_settings_arguments
from pipeline.commands.film_paths import add_dataset_dir_argument, folder_for
from pipeline.data.config import ConfigError, describe_fields, load_config
from pipeline.data.ip import GENERIC, ManifestError, load_ip
from pipeline.passes.caption_films import (
    caption_film,
    caption_films,
    caption_later_hint,
    protagonists_of,
)

__all__ = ["HELP", "add_arguments", "caption_film", "caption_films", "run"]

HELP = (
    "Caption clips with InternVL (character matching and game-state prompts) and rewrite the "
    "film's shards, manifest.parquet and summary.json with the caption columns filled."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "film_dirs",
        nargs="+",
        metavar="film_dir",
        help="a film folder (OUT/<film>/ holding shards/), a dataset folder holding several, "
        "or a film file that was cut into OUT (see --dataset-dir); local or an fsspec URL (s3://...: its committed "
        "films are captioned in a local copy and published back, summary.json last)",
    )
    add_dataset_dir_argument(parser)
    parser.add_argument(
        "--model",
        help="InternVL checkpoint folder, hub name (needs a network), "
        "or served model name (engine openai)",
    )
    parser.add_argument(
        "--engine",
        choices=("transformers", "lmdeploy", "openai"),
        help="shorthand for --set caption.engine=...",
    )
    parser.add_argument("--endpoint", help="OpenAI-compatible base URL (engine openai)")
    parser.add_argument(
        "--ip",
        help="IP name (manifests/<ip>.yaml) or manifest path; default: the "
        "clips' own IP. 'generic': no character matching",
    )
    add_settings_arguments(parser)
    parser.epilog = "caption settings (--set caption.FIELD=VALUE):\n" + "\n".join(
        f"  {name} = {default!r}\n      {text}"
        for name, default, text in describe_fields()
        if name.startswith("caption.")
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from core import storage
    from core.film import SUMMARY_FILE

    with storage.working_copies(args.film_dirs, SUMMARY_FILE) as local:
        return _run(argparse.Namespace(**{**vars(args), "film_dirs": local}))


def _run(args: argparse.Namespace) -> int:
    with input_errors(ConfigError, ManifestError, FileNotFoundError):
        config = load_config(args.config, _shorthand_overrides(args))
        if args.ip:
            load_ip(args.ip)  # a bad --ip is refused before any model is loaded
        films = [
            film
            for path in args.film_dirs
            for film in film_folders(folder_for(path, args.dataset_dir))
        ]
    failed = 0
    for ip_name, group in _by_ip(films, args.ip):
        try:
            ip = load_ip(ip_name)
            summaries = caption_films(group, config, ip if protagonists_of(ip) else None)
        except (ManifestError, FileNotFoundError, ValueError, RuntimeError) as exc:
            print_error("caption", f"{', '.join(map(str, group))}: {exc}")
            failed += len(group)
            continue
        for film_dir, summary in zip(group, summaries):
            print(
                f"{film_dir}: {json.dumps(summary.by_status)} "
                f"({summary.from_cache} from cache, {summary.seconds} s)"
            )
            if summary.hint:
                print(caption_later_hint(film_dir))
    return WORK_FAILED if failed else 0


def _by_ip(films: list[Path], ip: str | None) -> list[tuple[str, list[Path]]]:
    """Films grouped by IP, so that each group shares one loaded model and reference sheet."""
    groups: dict[str, list[Path]] = {}
    for film_dir in films:
        groups.setdefault(ip or _clips_ip(film_dir), []).append(film_dir)
    return list(groups.items())


def film_folders(path: Path) -> list[Path]:
    """The film folder itself, or the film folders under a dataset folder (any depth)."""
    inside = FilmFolder.discover(path)
    if not inside:
        raise FileNotFoundError(
            f"{path}: neither a film folder (with shards/) nor a folder of them"
        )
    return inside


def _shorthand_overrides(args: argparse.Namespace) -> list[str]:
    overrides = list(args.overrides)
    for name in ("model", "engine", "endpoint"):
        value = getattr(args, name)
        if value:
            overrides.append(f"caption.{name}={json.dumps(value)}")  # quoted: YAML keeps a string
    return overrides


def _clips_ip(film_dir: Path) -> str:
    """The IP the clips were cut for (their `ip` column), if its manifest is known."""
    from core.shards import read_table
    from pipeline.data.ip import MANIFEST_DIR

    names = set(read_table(FilmFolder(film_dir).shards, columns=["ip"]).column("ip").to_pylist())
    names.discard(GENERIC)
    if len(names) == 1 and (MANIFEST_DIR / f"{next(iter(names))}.yaml").is_file():
        return next(iter(names))
    return GENERIC
