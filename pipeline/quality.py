"""The dataset-level quality pass: decisions for every clip of an output folder, duplicates included.

It reads only stored values (the quality_* columns, status, motion_scope) of every film under the
folder, finds near-duplicates among the clips fit on their own, decides every clip with the one
rule (`stages.quality.decide`), and rewrites `usable`, `reject_reasons` and `duplicate_of` in the
shards of the films whose decisions changed (row group by row group, each file replaced atomically), then rebuilds
their manifest and the `quality` section of their summary.json.

It is the only place where clips are decided: the quality stage only measures, finalize only
gathers. The pass runs after every `animegamer dataset` run (and `run_film`) over the output folder, so a film added
later is compared with what is there, and by `animegamer quality-calibrate` with new thresholds.
The folder's thresholds live in OUT/quality.json (written on the first run; calibrate changes
them), so every film of a folder is decided by the same thresholds.

Which copy is kept: clips are taken in the order (film name, film id, start frame); a clip that
matches an earlier kept clip is a duplicate of the first such clip. So the copy in the film whose
name sorts first is kept, and within a film the earliest: the same films give the same
`duplicate_of` whatever order they were processed in.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.film import SHARDS_DIR, FilmFolder
from core.io import write_json_atomic
from core.record import CAPTION_PENDING, SKIPPED_UNUSABLE
from core.shards import (
    check_schema_version,
    replace_column,
    rewrite_row_groups,
    shard_paths,
)
from pipeline.manifest import write_manifest
from stages.quality import RejectConfig, decide, hamming

THRESHOLDS_FILE = "quality.json"
PASS_COLUMNS = [
    "clip_id",
    "film_id",
    "film_name",
    "scene_index",
    "start_frame",
    "status",
    "motion_scope",
    "quality_luma_mean",
    "quality_luma_peak",
    "quality_text_area",
    "quality_hashes",
    "usable",
    "reject_reasons",
    "duplicate_of",
    "caption_status",
]


@dataclass
class PassResult:
    films: int
    clips: int
    rewritten_films: int
    by_reason: dict[str, int]
    usable: int


def film_folders(location: Path) -> list[Path]:
    """Film folders (holding shards/) at or directly under `location`, sorted."""
    location = Path(location)
    if (location / SHARDS_DIR).is_dir():
        return [location]
    return sorted(p for p in location.iterdir() if (p / SHARDS_DIR).is_dir())


def load_thresholds(location: Path, default: RejectConfig) -> tuple[RejectConfig, bool]:
    """The folder's thresholds (OUT/quality.json) and True, or `default` and False if none."""
    path = Path(location) / THRESHOLDS_FILE
    if not path.is_file():
        return default, False
    try:
        data = json.loads(path.read_text())["thresholds"]
        known = {f.name for f in fields(RejectConfig)}
        return RejectConfig(**{k: v for k, v in data.items() if k in known}), True
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a quality thresholds file ({exc})") from None


def save_thresholds(location: Path, thresholds: RejectConfig) -> Path:
    return write_json_atomic(
        {"thresholds": asdict(thresholds), "written_by": "animegamer (pipeline/quality.py)"},
        Path(location) / THRESHOLDS_FILE,
    )


def apply_quality(location: Path, thresholds: RejectConfig) -> PassResult:
    """Decide every clip under `location` (a dataset or film folder) and rewrite what changed."""
    films = film_folders(location)
    rows = {film: read_pass_rows(film) for film in films}
    everything = [row for film in films for row in rows[film]]
    fit = [row for row in everything if decide({**row, "duplicate_of": None}, thresholds)[0]]
    duplicates = find_duplicates(fit, thresholds)
    decided = {}
    for row in everything:
        duplicate_of = duplicates.get(row["clip_id"])
        usable, reasons = decide({**row, "duplicate_of": duplicate_of}, thresholds)
        decided[row["clip_id"]] = (usable, reasons, duplicate_of)
    wanted = {row["clip_id"]: _wanted(row, decided[row["clip_id"]]) for row in everything}
    rewritten = 0
    for film in films:
        if any(_stored(row) != wanted[row["clip_id"]] for row in rows[film]):
            _rewrite_film(film, wanted)
            rewritten += 1
        _update_summary(film, [decided[r["clip_id"]] for r in rows[film]], thresholds)
    counts = Counter(reason for usable, reasons, _ in decided.values() for reason in reasons)
    return PassResult(
        films=len(films),
        clips=len(everything),
        rewritten_films=rewritten,
        by_reason=dict(sorted(counts.items())),
        usable=sum(usable for usable, _, _ in decided.values()),
    )


def find_duplicates(rows: list[dict], thresholds: RejectConfig) -> dict[str, str]:
    """clip_id -> clip_id of the kept copy, for every clip that is a near-duplicate.

    Clips are visited in (film name, film id, start frame) order; each is compared with the clips
    kept so far (vectorised Hamming distances over their frame hashes) and is a duplicate of the
    first kept clip within `duplicate_max_distance`. Clips of one scene of one film are never
    compared, nor clips of one film at all when duplicate_within_film is off. Clips hashed with
    another number of frames (other settings) are compared only among themselves."""
    rows = sorted(
        (r for r in rows if r.get("quality_hashes")),
        key=lambda r: (r["film_name"], r["film_id"], r["start_frame"], r["clip_id"]),
    )
    kept: dict[int, _Kept] = {}  # hash count -> the clips kept so far
    result: dict[str, str] = {}
    for row in rows:
        hashes = np.asarray(row["quality_hashes"], dtype=np.int64)
        group = kept.setdefault(len(hashes), _Kept(len(hashes)))
        match = group.first_match(hashes, row, thresholds)
        if match is None:
            group.add(hashes, row)
        else:
            result[row["clip_id"]] = match["clip_id"]
    return result


class _Kept:
    """The hashes of the clips kept so far, in a buffer that grows by doubling."""

    def __init__(self, width: int):
        self.hashes = np.zeros((64, width), np.int64)
        self.rows: list[dict] = []

    def add(self, hashes: np.ndarray, row: dict) -> None:
        if len(self.rows) == len(self.hashes):
            self.hashes = np.concatenate([self.hashes, np.zeros_like(self.hashes)])
        self.hashes[len(self.rows)] = hashes
        self.rows.append(row)

    def first_match(self, hashes: np.ndarray, row: dict, thresholds: RejectConfig) -> dict | None:
        if not self.rows:
            return None
        distance = hamming(self.hashes[: len(self.rows)], hashes[None, :]).mean(axis=1)
        for position in np.flatnonzero(distance <= thresholds.duplicate_max_distance):
            other = self.rows[position]
            same_film = other["film_id"] == row["film_id"]
            if same_film and (
                not thresholds.duplicate_within_film or other["scene_index"] == row["scene_index"]
            ):
                continue
            return other
        return None


def read_pass_rows(film: Path) -> list[dict]:
    rows = []
    for path in shard_paths(film / SHARDS_DIR):
        check_schema_version(pq.read_schema(path), path)
        rows += pq.read_table(path, columns=PASS_COLUMNS).to_pylist()
    return rows


def _stored(row: dict) -> tuple:
    reasons = list(row["reject_reasons"] or [])
    return row["usable"], reasons, row["duplicate_of"], row["caption_status"]


def _wanted(row: dict, decided: tuple) -> tuple:
    """(usable, reasons, duplicate_of, caption_status): an uncaptioned clip that is not usable
    says captioning will skip it; one that became usable is pending again."""
    usable, reasons, duplicate_of = decided
    status = row["caption_status"]
    if not usable and status == CAPTION_PENDING:
        status = SKIPPED_UNUSABLE
    elif usable and status == SKIPPED_UNUSABLE:
        status = CAPTION_PENDING
    return usable, reasons, duplicate_of, status


def _rewrite_film(film: Path, wanted: dict[str, tuple]) -> None:
    def transform(table: pa.Table) -> pa.Table:
        ids = table.column("clip_id").to_pylist()
        names = ("usable", "reject_reasons", "duplicate_of", "caption_status")
        for position, name in enumerate(names):
            table = replace_column(table, name, [wanted[i][position] for i in ids])
        return table

    for path in shard_paths(film / SHARDS_DIR):
        rewrite_row_groups(path, transform)
    folder = FilmFolder(film)
    if folder.manifest.is_file():
        write_manifest(folder)


def quality_summary(decided: list[tuple], thresholds: RejectConfig) -> dict:
    """The `quality` section of a film's summary.json: clips per reason (a clip with two reasons
    counts under both), usable and rejected totals, and the thresholds that decided."""
    by_reason = Counter(reason for _, reasons, _ in decided for reason in reasons)
    usable = sum(ok for ok, _, _ in decided)
    return {
        "usable": usable,
        "rejected": len(decided) - usable,
        "by_reason": dict(sorted(by_reason.items())),
        "duplicates": sum(dup is not None for _, _, dup in decided),
        "thresholds": asdict(thresholds),
    }


def _update_summary(film: Path, decided: list[tuple], thresholds: RejectConfig) -> None:
    counts = quality_summary(decided, thresholds) | {"duplicates_checked": True}
    FilmFolder(film).update_summary(lambda summary: summary.updated(quality=counts), create=False)
