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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.film import SHARDS_DIR, FilmFolder, FilmSummary, QualityCounts
from core.io import write_json_atomic
from core.record import caption_status_for
from core.schema import CLIP_SCHEMA
from core.shards import (
    check_schema_version,
    replace_column,
    rewrite_row_groups,
    shard_paths,
)
from core.vocabulary import DUPLICATE, SIMILAR
from pipeline.data.manifest import write_manifest
from pipeline.passes.duplicates import (
    CLIP_COLUMNS,
    INDEX_SCHEMA,
    PairIds,
    Pairs,
    QualityIndex,
    choose_kept,
    film_stamp,
    near_pairs,
    stored_pairs,
)
from stages.base import registered_scores
from stages.quality import REASON_COLUMNS, RejectConfig, own_reasons, with_duplicate

THRESHOLDS_FILE = "quality.json"
# The label quality.json carries: the module's path when the label was first written, kept as it
# was when the module moved into pipeline/passes/ so that the file stays byte-identical.
WRITTEN_BY = "animegamer (pipeline/quality.py)"
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
DECISION_COLUMNS = ["usable", "reject_reasons", "duplicate_of", "caption_status"]
# the other measurements the reasons read (stages/quality/reject.py lists them once), where a
# shard has them: clips cut before the overlay, combing or blending stage existed have none (no
# measurement, no reason); the scores' columns too
OPTIONAL_COLUMNS = [name for name in REASON_COLUMNS if name not in PASS_COLUMNS]


@dataclass
class PassResult:
    films: int
    clips: int
    rewritten_films: int
    by_reason: dict[str, int]
    usable: int
    read_films: int = 0  # films whose shards were read (the others came from the folder's index)


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


def film_thresholds(summary: FilmSummary | None) -> RejectConfig:
    """The thresholds that decided a film's clips (its summary.json's `quality`), else the
    defaults: what the report and the review page show each value against."""
    saved = summary.quality.thresholds if summary and summary.quality else {}
    known = {f.name for f in fields(RejectConfig)}
    return RejectConfig(**{k: v for k, v in saved.items() if k in known})


def save_thresholds(location: Path, thresholds: RejectConfig) -> Path:
    return write_json_atomic(
        {"thresholds": asdict(thresholds), "written_by": WRITTEN_BY},
        Path(location) / THRESHOLDS_FILE,
    )


def apply_quality(location: Path, thresholds: RejectConfig, progress: bool = False) -> PassResult:
    """Decide every clip under `location` (a dataset or film folder) and rewrite what changed.

    Films unchanged since the folder's index was written (pipeline/passes/duplicates.py) come from the
    index, and only new or changed films are searched against the rest. With the index's own
    thresholds only films with a new or changed clip, or a changed duplicate, are read; new
    thresholds read every film. Films are read one at a time; the index is written last.
    `progress`: a long semantic search draws its bar (pipeline/passes/similar.py)."""
    location = Path(location)
    root = location.parent if (location / SHARDS_DIR).is_dir() else location
    films = FilmFolder.discover(location)
    index = QualityIndex.load(root, thresholds)
    key = {film: _key(film, root) for film in films}
    stamps = {key[film]: film_stamp(film) for film in films}
    reused = sorted(k for k, stamp in stamps.items() if stamp and index.stamp(k) == stamp)
    read = [f for f in films if key[f] not in reused or not index.same_thresholds(thresholds)]
    clips = pa.concat_tables(
        [index.clips_of(sorted(set(stamps) - {key[f] for f in read}))]
        + [_index_part(film, key[film], thresholds) for film in read]
    )
    fit = clips.column("fit").to_numpy(zero_copy_only=False)
    pairs, radius = _near_pairs(index, clips, fit, reused, thresholds)
    duplicate_of = choose_kept(clips, fit, pairs, thresholds)
    similar = _similar_copies(
        root, films, key, stamps, clips, fit, duplicate_of, thresholds, progress
    )
    duplicate_of = [d or s for d, s in zip(duplicate_of, similar)]
    changed = _changed_folders(clips, duplicate_of)
    to_decide = [f for f in films if f in read or key[f] in changed]
    ids = clips.column("clip_id").to_pylist()
    found = {
        i: (d, SIMILAR if s else DUPLICATE) for i, d, s in zip(ids, duplicate_of, similar) if d
    }
    outcomes = [_decide_film(film, key[film], found, thresholds) for film in to_decide]
    final = pa.concat_tables(
        [clips.filter(_not_in(clips, [key[f] for f in to_decide]))] + [t for t, _ in outcomes]
    )
    index.save(root, final, PairIds.of(pairs, clips), thresholds, stamps, radius)
    counts = pc.value_counts(pc.list_flatten(final.column("reject_reasons"))).to_pylist()
    return PassResult(
        films=len(films),
        clips=len(final),
        rewritten_films=sum(rewritten for _, rewritten in outcomes),
        by_reason={c["values"]: c["counts"] for c in sorted(counts, key=lambda c: c["values"])},
        usable=int(pc.sum(final.column("usable")).as_py() or 0),
        read_films=len(set(read) | set(to_decide)),
    )


def _near_pairs(
    index: QualityIndex,
    clips: pa.Table,
    fit: np.ndarray,
    reused: list[str],
    thresholds: RejectConfig,
) -> tuple[Pairs, float]:
    """The near-duplicate pairs among `clips` and the distance they are complete to.

    Only clips fit on their own take part, so only they are searched. The index holds every
    pair among the clips it marks searched (fit when it was written): those still fit, of
    unchanged films (`reused`), are old; every other fit clip is searched against all fit
    clips."""
    old = fit & ~_not_in(clips, reused) & index.searched(clips)
    pairs = stored_pairs(index.rows_of(reused), clips).among(old)
    radius = index.search_distance(thresholds, reusing=bool(old.any()))
    return pairs + near_pairs(clips, ~old, thresholds, taking_part=fit, distance=radius), radius


def _changed_folders(clips: pa.Table, duplicate_of: list) -> set[str]:
    """The film folders (index keys) with a clip whose duplicate_of is not what it was."""
    before = clips.column("duplicate_of").to_pylist()
    return {
        folder
        for folder, was, now in zip(clips.column("folder").to_pylist(), before, duplicate_of)
        if was != now
    }


def _similar_copies(root, films, key, stamps, clips, fit, taken, thresholds, progress) -> list:
    """duplicate_of by the semantic pass (pipeline/similar.py) per row of `clips`: None
    everywhere while `reject.similar_min_cosine` is off."""
    if thresholds.similar_min_cosine is None:
        return [None] * len(clips)
    from pipeline.passes.similar import find_similar, similar_copies

    films_by_key = {key[f]: f for f in films}
    pairs = find_similar(root, films_by_key, stamps, thresholds.similar_min_cosine, progress)
    return similar_copies(clips, fit, taken, pairs, thresholds.duplicate_within_film)


def _not_in(clips: pa.Table, folders: list[str]) -> np.ndarray:
    inside = pc.is_in(clips.column("folder"), value_set=pa.array(folders, pa.string()))
    return ~inside.to_numpy(zero_copy_only=False)


def _key(film: Path, root: Path) -> str:
    """A film's name in the index: its path under the dataset folder (films may be nested)."""
    return film.relative_to(root).as_posix() if film != root else film.name


def _index_part(film: Path, key: str, thresholds: RejectConfig) -> pa.Table:
    """A film's rows for the index, from its shards: whether each clip is fit on its own under
    `thresholds`, and the decision its shards hold now."""
    table = read_pass_table(film)
    fit = [not reasons for reasons in own_reasons(table, thresholds)]
    return _index_rows(key, table, fit)


def _decide_film(film: Path, key: str, found: dict[str, tuple[str, str]], thresholds: RejectConfig):
    """Decide a film's clips with the duplicates `found` (clip_id -> the kept clip's id and the
    reason, `duplicate` or `similar`), rewrite its
    shards if a decision changed, and update its summary. Its index rows, and whether its shards
    were rewritten."""
    table = read_pass_table(film)
    ids = table.column("clip_id").to_pylist()
    own = own_reasons(table, thresholds)
    decided = []
    for clip_id, reasons in zip(ids, own):
        kept, reason = found.get(clip_id, (None, DUPLICATE))
        decided.append((*with_duplicate(reasons, kept, reason), kept))
    stored = list(zip(*(table.column(name).to_pylist() for name in DECISION_COLUMNS)))
    wanted = {clip_id: _wanted(d, was[3]) for clip_id, d, was in zip(ids, decided, stored)}
    rewrite = any(
        (usable, list(reasons or []), duplicate_of, status) != wanted[clip_id]
        for clip_id, (usable, reasons, duplicate_of, status) in zip(ids, stored)
    )
    if rewrite:
        _rewrite_film(film, wanted)
    _update_summary(film, decided, thresholds)
    decisions = dict(zip(("usable", "reject_reasons", "duplicate_of"), zip(*decided)))
    for name, values in decisions.items():
        table = replace_column(table, name, list(values))
    return _index_rows(key, table, [not reasons for reasons in own]), rewrite


def _index_rows(key: str, table: pa.Table, fit: list[bool]) -> pa.Table:
    schema = pa.schema([INDEX_SCHEMA.field(n) for n in CLIP_COLUMNS])
    given = {
        "folder": pa.array([key] * table.num_rows, pa.string()),
        "fit": pa.array(fit, pa.bool_()),
        "searched": pa.array([False] * table.num_rows),  # the index says, when it is saved
    }
    columns = [
        given[f.name] if f.name in given else table.column(f.name).cast(f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def read_pass_table(film: Path) -> pa.Table:
    """The columns the pass reads, of every shard of a film, as one table."""
    tables = []
    for path in shard_paths(film / SHARDS_DIR):
        schema = pq.read_schema(path)
        check_schema_version(schema, path)
        scores = [score.column for score in registered_scores()]
        optional = [name for name in OPTIONAL_COLUMNS + scores if name in schema.names]
        tables.append(pq.read_table(path, columns=PASS_COLUMNS + optional))
    if not tables:
        return pa.schema([CLIP_SCHEMA.field(name) for name in PASS_COLUMNS]).empty_table()
    return pa.concat_tables(tables, promote_options="permissive")


def _wanted(decided: tuple, caption_status: str | None) -> tuple:
    """(usable, reasons, duplicate_of, caption_status): an uncaptioned clip that is not usable
    says captioning will skip it; one that became usable is pending again."""
    usable, reasons, duplicate_of = decided
    return usable, reasons, duplicate_of, caption_status_for(usable, caption_status)


def _rewrite_film(film: Path, wanted: dict[str, tuple]) -> None:
    def transform(table: pa.Table) -> pa.Table:
        ids = table.column("clip_id").to_pylist()
        for position, name in enumerate(DECISION_COLUMNS):
            table = replace_column(table, name, [wanted[i][position] for i in ids])
        return table

    for path in shard_paths(film / SHARDS_DIR):
        rewrite_row_groups(path, transform)
    folder = FilmFolder(film)
    if folder.manifest.is_file():
        write_manifest(folder)


def quality_summary(decided: list[tuple], thresholds: RejectConfig) -> QualityCounts:
    """The `quality` section of a film's summary.json: clips per reason (a clip with two reasons
    counts under both), usable and rejected totals, and the thresholds that decided."""
    by_reason = Counter(reason for _, reasons, _ in decided for reason in reasons)
    usable = sum(ok for ok, _, _ in decided)
    return QualityCounts(
        usable=usable,
        rejected=len(decided) - usable,
        by_reason=dict(sorted(by_reason.items())),
        duplicates=sum(dup is not None for _, _, dup in decided),
        duplicates_checked=True,  # the folder pass compared every clip
        thresholds=asdict(thresholds),
    )


def _update_summary(film: Path, decided: list[tuple], thresholds: RejectConfig) -> None:
    counts = quality_summary(decided, thresholds)
    FilmFolder(film).update_summary(lambda summary: summary.updated(quality=counts), create=False)
