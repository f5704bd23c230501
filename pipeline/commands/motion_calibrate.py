"""`animegamer motion-calibrate`: new level edges from the stored motion scopes, no flow recomputed.

Reads `motion_scope` from the shards under one or more dataset (or film) folders, puts the edges
at quantiles of those scopes (equal population by default), writes them as a new versioned JSON
file, then rewrites `motion_level` and `motion_levels_version` in every shard, every film's
manifest.parquet and the `motion_levels` entry of its summary.json. Each file is replaced
atomically; the rewrite is a pure function of the stored scope and the edges file, so a run
that was interrupted is completed by running it again with `--apply` on the written file.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.cli import input_errors, work_errors
from core.film import MANIFEST_FILE, FilmFolder, FilmSummary
from core.record import CAPTION_PENDING
from core.shards import check_schema_version, rewrite_row_groups, shard_paths
from pipeline.data.manifest import write_manifest
from stages.motion_levels import (
    EQUAL_POPULATION,
    NUM_LEVELS,
    LevelsError,
    MotionLevels,
    calibrate_levels,
    load_levels,
    write_levels,
)

HELP = (
    "Recalibrate the five motion levels from the clips' stored motion scopes (no flow is "
    "recomputed) and rewrite the levels in the shards and manifests."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "datasets",
        nargs="+",
        help="dataset or film folders (OUT or OUT/<film>) whose shards are read and rewritten; "
        "local or fsspec URLs (s3://...: rewritten in a local copy, published back)",
    )
    parser.add_argument(
        "--quantiles",
        default=",".join(f"{q:g}" for q in EQUAL_POPULATION),
        help="four increasing quantiles of the scopes that become the edges "
        "(default: equal population, 0.2,0.4,0.6,0.8)",
    )
    parser.add_argument(
        "--apply",
        metavar="EDGES",
        help="skip calibration: rewrite the levels with this edges file (or bundled name)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="where to write the new edges file "
        "(default: <first folder>/motion_levels/<version>.json)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the edges and the level counts, write nothing"
    )


def run(args: argparse.Namespace) -> int:
    from core import storage
    from core.film import SUMMARY_FILE

    with storage.working_copies(args.datasets, SUMMARY_FILE) as local:
        return _run(argparse.Namespace(**{**vars(args), "datasets": local}))


def _run(args: argparse.Namespace) -> int:
    with input_errors(LevelsError, FileNotFoundError, ValueError):
        shards, manifests = find_tables(args.datasets)
        scopes, backends = read_scopes(shards)
        levels = (
            load_levels(args.apply)
            if args.apply
            else calibrate_levels(
                scopes,
                parse_quantiles(args.quantiles),
                note=", ".join(str(d) for d in args.datasets),
            )
        )
    print_report(levels, scopes, backends, len(shards), len(manifests))
    if args.dry_run:
        return 0
    with work_errors(OSError, ValueError):
        if not args.apply:
            path = args.output or args.datasets[0] / "motion_levels" / f"{levels.version}.json"
            write_levels(levels, path)
            print(f"wrote {path}\n  use it for new films with: --set motion.level_edges={path}")
        stale = rewrite_films(shards, levels)
    print(
        f"rewrote levels in {len(shards)} shard(s) of {len(stale)} film(s) "
        f"to version {levels.version}"
    )
    if sum(stale.values()):
        print(
            f"{sum(stale.values())} captioned clip(s) changed level: their captions were written "
            f"for the old level and are pending again; recaption with make caption FILM=..."
        )
    return 0


def rewrite_films(shards: list[Path], levels: MotionLevels) -> dict[Path, int]:
    """Relevel every shard, then rebuild each film's manifest and summary from its shards.
    Returns, per film folder, how many captioned clips changed level."""
    stale: dict[Path, int] = {}
    for path in shards:
        film_dir = path.parent.parent
        stale[film_dir] = stale.get(film_dir, 0) + rewrite_shard(path, levels)
    for film_dir, count in stale.items():
        folder = FilmFolder(film_dir)
        if folder.manifest.is_file():
            write_manifest(folder)
        update_summary(folder, levels, count)
    return stale


def parse_quantiles(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(q) for q in text.split(","))
    except ValueError:
        raise LevelsError(f"--quantiles {text!r}: expected numbers separated by commas") from None


def find_tables(folders: list[Path]) -> tuple[list[Path], list[Path]]:
    shards, manifests = [], []
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: not a dataset or film folder")
        shards += [p for p in shard_paths(folder) if p not in shards]
        manifests += [p for p in sorted(folder.rglob(MANIFEST_FILE)) if p not in manifests]
    if not shards:
        where = ", ".join(map(str, folders))
        raise FileNotFoundError(f"no clip shards (*/shards/*.parquet) under {where}")
    return shards, manifests


def read_scopes(shards: list[Path]) -> tuple[np.ndarray, Counter[str]]:
    scopes: list[np.ndarray] = []
    backends: Counter[str] = Counter()
    for path in shards:
        check_schema_version(pq.read_schema(path), path)
        table = pq.read_table(path, columns=["motion_scope", "motion_backend"])
        values = table.column("motion_scope").to_numpy(zero_copy_only=False)
        measured = ~np.isnan(values.astype(float))
        scopes.append(values[measured].astype(float))
        backends.update(
            b for b, m in zip(table.column("motion_backend").to_pylist(), measured) if m
        )
    return np.concatenate(scopes), backends


def print_report(
    levels: MotionLevels, scopes: np.ndarray, backends: Counter, num_shards: int, num_manifests: int
) -> None:
    counts = Counter(levels.levels(scopes).tolist())
    print(
        f"{len(scopes)} clips with a motion scope in {num_shards} shard(s), "
        f"{num_manifests} manifest(s)"
    )
    if len(backends) > 1:
        print(
            "warning: the scopes come from different flow backends or rules, which are not "
            "strictly comparable: " + "; ".join(f"{b} ({n})" for b, n in backends.items())
        )
    print(f"levels {levels.version}: edges {list(levels.edges)}")
    for level in range(1, NUM_LEVELS + 1):
        share = counts.get(level, 0) / max(len(scopes), 1)
        print(f"  level {level}: {counts.get(level, 0):6d} clips ({share:6.1%})")


def relevel(table: pa.Table, levels: MotionLevels) -> tuple[pa.Table, int]:
    """The table with motion_level and motion_levels_version recomputed from motion_scope, and
    how many captioned clips changed level. Their captions (the state prompt is given the level,
    and the adverb is chosen for it) no longer fit: they become pending, for recaptioning."""
    scope = table.column("motion_scope").to_numpy(zero_copy_only=False).astype(float)
    measured = ~np.isnan(scope)
    level = np.zeros(len(scope), dtype=np.int8)
    level[measured] = levels.levels(scope[measured])
    old_level = table.column("motion_level").to_pylist()
    status = table.column("caption_status").to_pylist()
    stale = [
        m and s == "ok" and old != int(new)
        for m, s, old, new in zip(measured, status, old_level, level)
    ]
    old_version = table.column("motion_levels_version").to_pylist()
    version = [levels.version if m else v for m, v in zip(measured, old_version)]
    table = _replace(table, "motion_level", pa.array(level, pa.int8(), mask=~measured))
    table = _replace(
        table,
        "caption_status",
        pa.array([CAPTION_PENDING if x else s for x, s in zip(stale, status)], pa.string()),
    )
    return _replace(table, "motion_levels_version", pa.array(version, pa.string())), sum(stale)


def _replace(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(index), values)


def rewrite_shard(path: Path, levels: MotionLevels) -> int:
    """Relevel one shard (see rewrite_row_groups: row group by row group, replaced atomically);
    returns how many captioned clips changed level."""
    stale = 0

    def transform(table: pa.Table) -> pa.Table:
        nonlocal stale
        table, changed = relevel(table, levels)
        stale += changed
        return table

    rewrite_row_groups(path, transform)
    return stale


def update_summary(folder: FilmFolder, levels: MotionLevels, stale_captions: int) -> None:
    """Keep summary.json's `motion_levels` (read by the report) in step with the shards."""

    def relevelled(summary: FilmSummary) -> FilmSummary:
        summary = summary.updated(motion_levels=levels.to_dict())
        return summary.updated(captions="incomplete") if stale_captions else summary

    folder.update_summary(relevelled, create=False)
