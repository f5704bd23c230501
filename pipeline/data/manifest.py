"""A film folder's manifest.parquet: its clips' rows without the media bytes, as reviewed.

Built from the shards (the pipeline's own output) with the film's review decisions applied
(pipeline/data/review.py), so the manifest is what a notebook, the report and any downstream tool
should use: corrected caption fields, `usable` and `reject_reasons` once a person's decision is
counted, and `review_decision`. Every writer of shards rebuilds it through `write_manifest`, and
the review page rebuilds it on every decision, so it never lags behind either.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.film import FilmFolder
from core.io import write_table_atomic
from core.schema import CLIP_SCHEMA, MANIFEST_SCHEMA
from core.shards import read_table, shard_paths
from pipeline.data.review import (
    ACCEPT,
    EDITABLE_FIELDS,
    QUALITY_COLUMNS,
    REJECT,
    Review,
    apply_review,
    effective_quality,
    read_reviews,
)

# The manifest's columns that come from the shards; the others come from the review.
SHARD_COLUMNS = [name for name in MANIFEST_SCHEMA.names if name in CLIP_SCHEMA.names]


def build_manifest(folder: FilmFolder) -> pa.Table:
    """The manifest table of a film folder, read from its shards (media columns are never read)."""
    return reviewed_manifest(shard_table(folder), read_reviews(folder))


def shard_table(folder: FilmFolder) -> pa.Table:
    """The film's clip rows without media: SHARD_COLUMNS, the quality flags where a shard has
    them, and the columns registered stages added (stages/base.py clip_schema). A column a
    shard written before it existed lacks (a film cut before `combing` or `blended` was
    measured: the same major schema version) is null there: not measured."""
    tables = []
    for path in shard_paths(folder.shards):
        present = pq.read_schema(path).names
        kept = [c for c in SHARD_COLUMNS if c in present]
        flags = [c for c in QUALITY_COLUMNS if c in present and c not in SHARD_COLUMNS]
        added = [c for c in present if c not in CLIP_SCHEMA.names]  # registered stages' columns
        table = read_table(path, columns=kept + flags + added)
        for name in SHARD_COLUMNS:
            if name not in present:
                kind = MANIFEST_SCHEMA.field(name).type
                table = table.append_column(name, pa.nulls(table.num_rows, kind))
        tables.append(table.select(SHARD_COLUMNS + flags + added))
    if not tables:
        return MANIFEST_SCHEMA.empty_table().select(SHARD_COLUMNS)
    return pa.concat_tables(tables, promote_options="default")


def reviewed_manifest(table: pa.Table, reviews: dict[str, Review]) -> pa.Table:
    """The manifest of a film from its shard table (`shard_table`) and its review decisions.

    Column-wise, so that the review page can rebuild the manifest of a 3,600-clip film on every
    decision: only the reviewed rows go through `apply_review`, and the usability of the others
    is `effective_quality` of their automatic flags alone."""
    ids = table.column("clip_id").to_pylist()
    columns = {name: _column(table, name) for name in _REVIEWED}
    quality = [
        effective_quality(usable, reasons, None)
        for usable, reasons in zip(columns["usable"], columns["reject_reasons"])
    ]
    columns["usable"] = [usable for usable, _ in quality]
    columns["reject_reasons"] = [reasons for _, reasons in quality]
    reviewed = [i for i, clip_id in enumerate(ids) if clip_id in reviews]
    for index, row in zip(reviewed, table.take(pa.array(reviewed, pa.int64())).to_pylist()):
        seen = apply_review(row, reviews[row["clip_id"]])
        for name in _REVIEWED:
            columns[name][index] = seen[name]
    schema = _with_added_columns(table.schema)
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else table.column(f.name)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _with_added_columns(shards: pa.Schema) -> pa.Schema:
    """MANIFEST_SCHEMA, followed by the shards' columns that registered stages added."""
    added = [f for f in shards if f.name not in CLIP_SCHEMA.names and f.name not in _REVIEWED]
    if not added:
        return MANIFEST_SCHEMA
    return pa.schema(list(MANIFEST_SCHEMA) + added, metadata=MANIFEST_SCHEMA.metadata)


# The columns a review decision can change (apply_review)
_REVIEWED = (
    *EDITABLE_FIELDS,
    "num_characters",
    "instruction",
    "usable",
    "reject_reasons",
    "review_decision",
    "caption_status",
)


def _column(table: pa.Table, name: str) -> list:
    if name in table.column_names:
        return table.column(name).to_pylist()
    return [None] * len(table)


def write_manifest(folder: FilmFolder) -> Path:
    """(Re)build a film folder's manifest.parquet from its shards and its review decisions."""
    return write_table_atomic(build_manifest(folder), folder.manifest)


@dataclass
class ReviewedCounts:
    """A film's clips as its manifest counts them, review decisions included: what the console,
    dataset.json and the report all say."""

    clips: int = 0
    usable: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)  # a clip with two counts under both
    accepted: int = 0  # review decisions
    rejected_by_review: int = 0

    @property
    def rejected(self) -> int:
        return self.clips - self.usable

    def __add__(self, other: ReviewedCounts) -> ReviewedCounts:
        return ReviewedCounts(
            self.clips + other.clips,
            self.usable + other.usable,
            self.by_reason + other.by_reason,
            self.accepted + other.accepted,
            self.rejected_by_review + other.rejected_by_review,
        )

    def line(self) -> str:
        """`quality: 5 usable, 9 rejected (black 1, review 2, text 4); review: 1 accepted, 2
        rejected` (the review part only where someone decided)."""
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.by_reason.items())) or "none"
        text = f"quality: {self.usable} usable, {self.rejected} rejected ({reasons})"
        if self.accepted or self.rejected_by_review:
            text += f"; review: {self.accepted} accepted, {self.rejected_by_review} rejected"
        return text


def reviewed_counts(folder: FilmFolder) -> ReviewedCounts:
    """Usable clips, reasons and decisions as the film's manifest.parquet holds them."""
    if not folder.manifest.is_file():
        return ReviewedCounts()
    table = pq.read_table(folder.manifest, columns=["usable", "reject_reasons", "review_decision"])
    usable = table.column("usable").to_pylist()
    reasons = table.column("reject_reasons").to_pylist()
    decisions = table.column("review_decision").to_pylist()
    return ReviewedCounts(
        clips=len(usable),
        usable=sum(bool(u) for u in usable),
        by_reason=Counter(r for ok, clip in zip(usable, reasons) if not ok for r in clip or ()),
        accepted=decisions.count(ACCEPT),
        rejected_by_review=decisions.count(REJECT),
    )
