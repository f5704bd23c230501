"""What the review page shows, read from a folder's shards (`Snapshot`): one Arrow table of every
clip's shown columns, rebuilt when a shard changes (`shard_signature`), and the review state the
listing filters with (`Listing`). The application (review_app.py) asks it; HTTP never sees it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.film import SHARDS_DIR, FilmFolder
from core.record import CAPTION_OK
from core.shards import read_table, shard_paths
from pipeline.data.review import EDITABLE_FIELDS, QUALITY_COLUMNS, Review
from pipeline.inspection.explore import Dataset, Film
from pipeline.passes.quality import film_thresholds
from stages.base import registered_scores
from stages.quality import RejectConfig

SHOWN_COLUMNS = (
    "clip_id film_name clip_index scene_index start_time end_time start_frame end_frame "
    "num_frames fps width height status error motion_scope motion_level caption_status "
    "instruction num_characters"
).split() + [*EDITABLE_FIELDS, *QUALITY_COLUMNS]
SHOWN_COLUMNS += [score.column for score in registered_scores()]  # stages/scoring/scores.py
# the measured values behind the automatic flags: shown beside their thresholds, not sent raw
MEASURED = ("quality_luma_mean", "quality_luma_peak", "quality_text_area")
SHOWN_COLUMNS += MEASURED


@dataclass
class Snapshot:
    """The dataset as its shards were when last read; rebuilt when a shard changes. One Arrow
    table holds what the page shows of every clip (no Python object per clip), so that a million
    clips fit in memory and a request filters columns and turns only its page into JSON."""

    signature: tuple
    dataset: Dataset
    table: pa.Table  # every clip's shown columns and its film's slug ("film"): film, clip order
    starts: np.ndarray  # the first row of each film, in the order of `slugs`, then the end
    slugs: list[str]
    thresholds: dict[str, RejectConfig]  # film slug -> the thresholds that decided its clips
    captioned: dict[str, bool]  # film slug -> any clip captioned (else the page locks fields)

    def __post_init__(self) -> None:
        self._index = {slug: index for index, slug in enumerate(self.slugs)}

    def film(self, slug: str) -> Film:
        """A film by slug (Dataset.film looks through every film: a cost per film per call)."""
        return self.dataset.films[self._index[slug]]

    def rows_of(self, slug: str) -> tuple[int, int]:
        index = self._index[slug]
        return int(self.starts[index]), int(self.starts[index + 1])

    def film_at(self, row: int) -> str:
        return self.slugs[int(np.searchsorted(self.starts, row, side="right")) - 1]

    def locate(self, clip_id: str) -> int | None:
        """The row of a clip id, None when it is not under the folder."""
        row = pc.index(self.table.column("clip_id"), clip_id).as_py()
        return None if row < 0 else row

    def row(self, index: int) -> dict:
        return self.table.slice(index, 1).to_pylist()[0]

    def clip_ids(self, slug: str) -> list[str]:
        first, end = self.rows_of(slug)
        return self.table.column("clip_id").slice(first, end - first).to_pylist()


@dataclass
class Listing:
    """The review state GET /api/clips filters with, for one state of the shards and review
    files: the decisions, the rows they change (`apply_review`, as the page sees them), counts
    and facets. Rows nobody reviewed are filtered on their columns as stored."""

    key: tuple
    reviews: dict[str, dict[str, Review]]  # film slug -> its decisions
    reviewed: dict[int, dict]  # row -> the reviewed clip, for the rows with a decision
    counts: dict[str, dict]
    facets: dict


def review_stamps(snapshot: Snapshot) -> tuple:
    """Each film's review.parquet as (size, mtime): a decision, here or elsewhere, changes it."""
    stamps = []
    for slug, film in zip(snapshot.slugs, snapshot.dataset.films):
        path = FilmFolder(film.path).review
        stat = path.stat() if path.is_file() else None
        stamps.append((slug, stat and (stat.st_size, stat.st_mtime_ns)))
    return tuple(stamps)


def shard_signature(root: Path, dataset: Dataset) -> tuple:
    """The folder's shard files as they are now (each shard's time and size), and the times
    of the folders above the films, which change when a film folder is added or removed.
    One directory listing per film: globbing every shard below the root took 14 ms a
    request at 143 films."""
    folders = {root}
    stamps: list[tuple] = []
    for film in dataset.films:
        path = Path(film.path)
        folders |= {p for p in path.parents if root in p.parents}
        try:
            with os.scandir(path / SHARDS_DIR) as entries:
                shards = [e for e in entries if e.name.endswith(".parquet")]
                stamps += sorted((e.path, e.stat().st_mtime_ns, e.stat().st_size) for e in shards)
        except FileNotFoundError:
            stamps.append((str(path), None, None))
    for folder in sorted(folders):
        try:
            stamps.append((str(folder), folder.stat().st_mtime_ns, None))
        except FileNotFoundError:
            stamps.append((str(folder), None, None))
    return tuple(stamps)


def read_snapshot(root: Path, dataset: Dataset) -> Snapshot:
    """The shown columns of every film under `root`, read now."""
    signature = shard_signature(root, dataset)
    parts = [shown_table(film) for film in dataset.films]
    slugs = [film.slug for film in dataset.films]
    sizes = [part.num_rows for part in parts]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    table = (  # one chunk per column: a page's `take` from 1,430 chunks took 30 ms
        pa.concat_tables(parts, promote_options="permissive").combine_chunks()
        if parts
        else pa.table({"clip_id": pa.array([], pa.string()), "film": pa.array([], pa.string())})
    )
    thresholds = {film.slug: film_thresholds(film.summary) for film in dataset.films}
    ok = (
        pc.equal(column_or_nulls(table, "caption_status"), CAPTION_OK)
        .fill_null(False)
        .to_numpy(zero_copy_only=False)
    )
    captioned = {
        slug: bool(ok[first:end].any()) for slug, first, end in zip(slugs, starts, starts[1:])
    }
    return Snapshot(signature, dataset, table, starts, slugs, thresholds, captioned)


def shown_table(film: Film) -> pa.Table:
    """What the page shows of a film's clips (the shown columns its shards have), in clip order,
    with the film's slug."""
    parts = []
    for path in shard_paths(film.folder.shards):
        present = set(pq.read_schema(path).names)
        parts.append(read_table(path, columns=[c for c in SHOWN_COLUMNS if c in present]))
    if not parts:
        return pa.table({"clip_id": pa.array([], pa.string()), "film": pa.array([], pa.string())})
    table = pa.concat_tables(parts, promote_options="permissive")
    if "clip_index" in table.column_names:
        table = table.sort_by("clip_index")
    return table.append_column("film", pa.array([film.slug] * table.num_rows, pa.string()))


def column_or_nulls(table: pa.Table, name: str) -> pa.ChunkedArray:
    """A column, or nulls where no shard has it (older shards, uncaptioned films)."""
    if name in table.column_names:
        return table.column(name)
    return pa.chunked_array([pa.nulls(table.num_rows)])


def contains(lists: pa.ChunkedArray, value: str) -> np.ndarray:
    """Per row: its list holds `value`."""
    found = np.zeros(len(lists), bool)
    if pa.types.is_null(lists.type) or not len(lists):
        return found
    lists = lists.combine_chunks()
    parents = pc.list_parent_indices(lists).to_numpy()
    hits = pc.equal(pc.list_flatten(lists), value).fill_null(False).to_numpy(zero_copy_only=False)
    found[parents[hits]] = True
    return found
