"""A film folder's manifest.parquet: its clips' rows without the media bytes, as reviewed.

Built from the shards (the pipeline's own output) with the film's review decisions applied
(pipeline/review.py), so the manifest is what a notebook, the report and any downstream tool
should use: corrected caption fields, `usable` and `reject_reasons` once a person's decision is
counted, and `review_decision`. Every writer of shards rebuilds it through `write_manifest`, and
the review page rebuilds it on every decision, so it never lags behind either.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.review import QUALITY_COLUMNS, Review, apply_review, read_reviews
from pipeline.schema import CLIP_SCHEMA, MANIFEST_SCHEMA, rows_to_table
from pipeline.shards import read_table, shard_paths, write_table_atomic

MANIFEST_FILE = "manifest.parquet"
SHARDS_DIR = "shards"
# The manifest's columns that come from the shards; the others come from the review.
SHARD_COLUMNS = [name for name in MANIFEST_SCHEMA.names if name in CLIP_SCHEMA.names]


def build_manifest(film_dir: str | Path) -> pa.Table:
    """The manifest table of a film folder, read from its shards (media columns are never read)."""
    return reviewed_manifest(shard_rows(film_dir), read_reviews(film_dir))


def shard_rows(film_dir: str | Path) -> list[dict]:
    """The film's clip rows without media: SHARD_COLUMNS, and the quality flags where a shard
    has them."""
    rows = []
    for path in shard_paths(Path(film_dir) / SHARDS_DIR):
        present = pq.read_schema(path).names
        flags = [c for c in QUALITY_COLUMNS if c in present and c not in SHARD_COLUMNS]
        rows += read_table(path, columns=SHARD_COLUMNS + flags).to_pylist()
    return rows


def reviewed_manifest(rows: list[dict], reviews: dict[str, Review]) -> pa.Table:
    """Manifest rows from shard rows (SHARD_COLUMNS) and the film's review decisions."""
    return rows_to_table(
        [apply_review(row, reviews.get(row["clip_id"])) for row in rows], MANIFEST_SCHEMA
    )


def write_manifest(film_dir: str | Path) -> Path:
    """(Re)build a film folder's manifest.parquet from its shards and its review decisions."""
    return write_table_atomic(build_manifest(film_dir), Path(film_dir) / MANIFEST_FILE)
