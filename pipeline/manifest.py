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

from pipeline.review import Review, apply_review, read_reviews
from pipeline.schema import CLIP_SCHEMA, MANIFEST_SCHEMA, rows_to_table
from pipeline.shards import read_table, write_table_atomic

MANIFEST_FILE = "manifest.parquet"
SHARDS_DIR = "shards"
# The manifest's columns that come from the shards; the others come from the review.
SHARD_COLUMNS = [name for name in MANIFEST_SCHEMA.names if name in CLIP_SCHEMA.names]


def build_manifest(film_dir: str | Path) -> pa.Table:
    """The manifest table of a film folder, read from its shards (media columns are never read)."""
    film_dir = Path(film_dir)
    rows = read_table(film_dir / SHARDS_DIR, columns=SHARD_COLUMNS).to_pylist()
    return reviewed_manifest(rows, read_reviews(film_dir))


def reviewed_manifest(rows: list[dict], reviews: dict[str, Review]) -> pa.Table:
    """Manifest rows from shard rows (SHARD_COLUMNS) and the film's review decisions."""
    return rows_to_table(
        [apply_review(row, reviews.get(row["clip_id"])) for row in rows], MANIFEST_SCHEMA
    )


def write_manifest(film_dir: str | Path) -> Path:
    """(Re)build a film folder's manifest.parquet from its shards and its review decisions."""
    return write_table_atomic(build_manifest(film_dir), Path(film_dir) / MANIFEST_FILE)
