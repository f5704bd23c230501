"""`animegamer dataset`: films in, clip shards out."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from core import storage
from core.cli import (
    WORK_FAILED,
    UsageError,
    epilog_when_helping,
    input_errors,
    print_error,
    work_errors,
)
from core.settings import add_settings_arguments
from pipeline.cli import shorthand_overrides
from pipeline.data.ip import GENERIC, IP, ManifestError, load_ip
from pipeline.executors import EXECUTORS

# The settings (pipeline.data.config, which imports every stage: PyAV, OpenCV, pyarrow) and the stages
# are imported where they are used, not with this module: the CLI
# imports it to parse the command line, and an argument the command refuses is then one line in
# a tenth of a second (it took 0.8 CPU-s, and the fork server started beside it 1.1 more).

SAMPLE_FILM = Path(__file__).resolve().parents[2] / "samples" / "sintel_trailer.mp4"
IP_FILE = "ip.txt"
# what a folder's videos are named: the common containers, DVD (.vob) and Blu-ray or camcorder
# (.m2ts, .mts) files, TV captures (.ts, .m2t) and older fansub containers (.rmvb, .ogm, .divx).
# A folder's other files are left out and counted on the console (`left_out_line`); animated
# GIFs are among them: palette pictures (256 colours, often dithered), cut only when named.
VIDEO_SUFFIXES = {".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v", ".ts", ".mpg", ".mpeg", ".flv"}
VIDEO_SUFFIXES |= {".vob", ".m2ts", ".mts", ".m2t", ".m2v", ".wmv", ".asf", ".rm", ".rmvb"}
VIDEO_SUFFIXES |= {".ogv", ".ogm", ".3gp", ".divx", ".f4v", ".mxf"}

HELP = "Cut films into 2-second, 16-frame, 480x720 clips and write Parquet shards."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "films",
        nargs="*",
        help="video files or folders of videos, local or fsspec URLs such as s3://bucket/films "
        "(default: the IP manifest's films, else the bundled sample "
        f"{SAMPLE_FILM.name})",
    )
    parser.add_argument(
        "--ip",
        default=GENERIC,
        help="IP name (manifests/<ip>.yaml) or manifest path (default: generic, no characters)",
    )
    parser.add_argument(
        "--out",
        default="data",
        help="output folder, local or an fsspec URL such as s3://bucket/dataset (default: data)",
    )
    add_settings_arguments(parser)
    parser.add_argument("--model", help="caption model: shorthand for --set caption.model=...")
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        help="where the work runs (default auto: Ray on the cluster RAY_ADDRESS names, else "
        "worker processes on this machine); shorthand for --set run.executor=...",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--force",
        action="store_true",
        help="cut finished films again (by default a film a complete run committed is skipped); "
        "review decisions are kept",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="list the films, their IPs, durations and planned segments; cut nothing",
    )
    epilog_when_helping(parser, _settings_epilog)


def _settings_epilog() -> str:
    from pipeline.data.config import describe_fields

    return "settings (--set SECTION.FIELD=VALUE):\n" + "\n".join(
        f"  {name} = {default!r}\n      {text}" if text else f"  {name} = {default!r}"
        for name, default, text in describe_fields()
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from pipeline.data.config import ConfigError, load_config
    from pipeline.running.runner import run_films
    from stages.base import build_clip_stages

    with input_errors(ConfigError, ManifestError, FileNotFoundError, ValueError):
        ip = load_ip(args.ip)
        overrides = shorthand_overrides(args.overrides, args.model, args.executor, args.quiet)
        config = load_config(args.config, overrides)
        build_clip_stages(config)  # builds and checks the stages' settings, loading nothing
        left_out: Counter[str] = Counter()
        films: list[str | Path] = (
            expand_films(args.films, left_out)
            if args.films
            else [e.path for e in ip.films] or [SAMPLE_FILM]
        )
        roots = [f if storage.is_remote(f) else str(Path(f)) for f in args.films]
        ips = folder_ips(films, roots, ip)
    if left_out:
        print(left_out_line(left_out))
    if args.dry_run:
        from pipeline.running.runner import plan_films

        return print_plan(plan_films(films, args.out, config, ip, ips))
    prepare_output_folder(args.out)
    with work_errors(RuntimeError, FileNotFoundError):  # the caption engine, after the cutting
        results = run_films(films, args.out, config, ip, ip_for=ips, force=args.force)
    for result in results:
        if result.ok:
            print(result.message)
        else:
            print_error("dataset", result.message)
    _caption_hint(results, config, args.out)
    return 0 if all(r.ok for r in results) else WORK_FAILED


def prepare_output_folder(out: str | Path) -> None:
    """Create the output folder and prove it writable, before any film is cut (object storage
    has no folders: its writes are checked by the first upload)."""
    if storage.is_remote(out):
        return
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise UsageError(
            f"{out}: the output folder cannot be created or written ({reason})"
        ) from None


def expand_films(paths: list[str], left_out: Counter[str] | None = None) -> list[str | Path]:
    """Files as given; folders contribute the videos at any depth below them, sorted (a series
    per sub-folder). Local paths or fsspec URLs. A folder's other files are counted by suffix
    into `left_out`."""
    films: list[str | Path] = []
    for path in paths:
        location = path if storage.is_remote(path) else Path(path)
        if not storage.is_folder(location):
            films.append(location)  # a missing file is reported per film, the others still run
            continue
        inside = []
        for f in storage.files_under(location):
            suffix = Path(storage.name(f)).suffix.lower()
            if suffix in VIDEO_SUFFIXES:
                inside.append(f)
            elif left_out is not None and storage.name(f) != IP_FILE:
                left_out[suffix or "(none)"] += 1
        if not inside:
            raise FileNotFoundError(
                f"{path}: folder holds no video files ({', '.join(sorted(VIDEO_SUFFIXES))})"
            )
        films += inside
    return films


def left_out_line(left_out: Counter[str]) -> str:
    """The console line that counts the folders' files not taken as videos, by suffix."""
    ranked = sorted(left_out.items(), key=lambda item: (-item[1], item[0]))
    kinds = ", ".join(f"{suffix} {count}" for suffix, count in ranked)
    return (
        f"left out: {left_out.total()} files the folders hold that are not named as videos "
        f"({kinds}); name one to cut it anyway"
    )


def folder_ips(films: Sequence[str | Path], roots: list[str], default: IP) -> dict[str, IP]:
    """The IP of each film: the nearest IP_FILE in its folder or a folder above it, up to the
    folder named on the command line; `default` (--ip) where there is none."""
    loaded: dict[str, IP] = {}
    chosen = {}
    for film in films:
        for folder in _folders_up(film, roots):
            text = storage.read_text(storage.join(folder, IP_FILE))
            if text is not None:
                key = str(storage.join(folder, IP_FILE))
                if key not in loaded:
                    loaded[key] = _ip_named(text.strip(), folder, key)
                chosen[str(film)] = loaded[key]
                break
        else:
            chosen[str(film)] = default
    return chosen


def _folders_up(film: str | Path, roots: list[str]) -> list[str | Path]:
    """The film's folder, then each parent up to (and including) the root it was found under."""
    text = str(film)
    root = next((r.rstrip("/") for r in roots if text.startswith(r.rstrip("/") + "/")), None)
    if root is None:
        return []
    parts = text[len(root) + 1 :].split("/")[:-1]
    folders = ["/".join([root, *parts[:depth]]) for depth in range(len(parts), -1, -1)]
    return [f if storage.is_remote(f) else Path(f) for f in folders]


def _ip_named(text: str, folder: str | Path, source: str) -> IP:
    """An IP file names an IP (manifests/<name>.yaml) or a manifest path relative to it."""
    if not text:
        raise ManifestError(f"{source}: empty; write the IP's name or its manifest's path")
    if text.endswith((".yaml", ".yml")) and not storage.is_remote(folder):
        return load_ip(Path(folder) / text)
    return load_ip(text)


def print_plan(plans: list) -> int:
    """One line per film of a dry run; exit 1 when a film could not be probed."""
    total_seconds = total_segments = 0.0
    for plan in plans:
        if plan.error:
            print(f"error: {plan.error}")
            continue
        total_seconds += plan.duration
        total_segments += len(plan.segments)
        spans = ", ".join(f"[{a}, {b})" for a, b in plan.segments)
        print(
            f"{plan.path}: ip {plan.ip}, {plan.duration:.1f} s, {plan.frames} frames, "
            f"{len(plan.segments)} segment(s) of frames {spans} -> {plan.film_dir}"
            f"{' (complete: would be skipped)' if plan.complete else ''}"
        )
    films = sum(not p.error for p in plans)
    print(
        f"dry run: {films} film(s), {total_seconds / 3600:.2f} h of film, "
        f"{int(total_segments)} segment(s); nothing was cut"
    )
    return 0 if all(not p.error for p in plans) else 1


def _caption_hint(results, config, out: Path) -> None:
    if not any(r.ok for r in results):
        return
    if not config.clip_scores.model:  # after the run, beside the captions' hint: not on stderr
        from stages.scoring.clip_scores import CLIP_SCORES_OFF

        print(CLIP_SCORES_OFF)
    if config.caption.model:
        return
    print(
        "captions: pending (no caption model configured). Caption later with\n"
        f"  make caption FILM=<film folder under {out}> MODEL=<local InternVL path>\n"
        "  or: animegamer caption <film folder> --model <local InternVL path>"
    )
