"""`animegamer dataset`: films in, clip shards out."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from core.cli import WORK_FAILED, UsageError, input_errors, print_error, work_errors
from pipeline.config import ConfigError, describe_fields, load_config
from pipeline.ip import GENERIC, ManifestError, load_ip
from stages.base import build_clip_stages

SAMPLE_FILM = Path(__file__).resolve().parents[2] / "samples" / "sintel_trailer.mp4"
VIDEO_SUFFIXES = {".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v", ".ts", ".mpg", ".mpeg", ".flv"}

HELP = "Cut films into 2-second, 16-frame, 480x720 clips and write Parquet shards."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "films",
        nargs="*",
        type=Path,
        help="video files or folders of videos (default: the IP manifest's films, "
        f"else the bundled sample {SAMPLE_FILM.name})",
    )
    parser.add_argument(
        "--ip",
        default=GENERIC,
        help="IP name (manifests/<ip>.yaml) or manifest path (default: generic, no characters)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("data"), help="output folder (default: data)"
    )
    parser.add_argument(
        "--config", type=Path, help="YAML file of settings, {section: {field: value}}"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument("--model", help="caption model: shorthand for --set caption.model=...")
    parser.add_argument(
        "--executor", choices=("ray", "local"), help="shorthand for --set run.executor=..."
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.epilog = "settings (--set SECTION.FIELD=VALUE):\n" + "\n".join(
        f"  {name} = {default!r}\n      {text}" if text else f"  {name} = {default!r}"
        for name, default, text in describe_fields()
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from pipeline.runner import run_films

    with input_errors(ConfigError, ManifestError, FileNotFoundError, ValueError):
        ip = load_ip(args.ip)
        overrides = list(args.overrides)
        if args.model:
            overrides.append(f"caption.model={args.model}")
        if args.executor:
            overrides.append(f"run.executor={args.executor}")
        if args.quiet:
            overrides.append("run.progress=false")
        config = load_config(args.config, overrides)
        build_clip_stages(config)  # builds and checks the stages' settings, loading nothing
        films: list[str | Path] = (
            expand_films(args.films) if args.films else [e.path for e in ip.films] or [SAMPLE_FILM]
        )
    prepare_output_folder(args.out)
    with work_errors(RuntimeError, FileNotFoundError):  # the caption engine, after the cutting
        results = run_films(films, args.out, config, ip)
    for result in results:
        if result.ok:
            print(result.message)
        else:
            print_error("dataset", result.message)
    _caption_hint(results, config, args.out)
    return 0 if all(r.ok for r in results) else WORK_FAILED


def prepare_output_folder(out: Path) -> None:
    """Create the output folder and prove it writable, before any film is cut."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise UsageError(
            f"{out}: the output folder cannot be created or written ({reason})"
        ) from None


def expand_films(paths: list[Path]) -> list[str | Path]:
    """Files as given; folders contribute the videos directly inside them, sorted."""
    films: list[str | Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
            if not inside:
                raise FileNotFoundError(
                    f"{path}: folder holds no video files ({', '.join(sorted(VIDEO_SUFFIXES))})"
                )
            films += inside
        else:
            films.append(path)  # a missing file is reported per film, with the others still run
    return films


def _caption_hint(results, config, out: Path) -> None:
    if config.caption.model or not any(r.ok for r in results):
        return
    print(
        "captions: pending (no caption model configured). Caption later with\n"
        f"  make caption FILM=<film folder under {out}> MODEL=<local InternVL path>\n"
        "  or: animegamer caption <film folder> --model <local InternVL path>"
    )
