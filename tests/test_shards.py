"""Shards: schema and record agree, round trips are exact, files rotate, and every reader opens them."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import make_clip

from core.record import Clip, persisted_fields
from core.schema import CLIP_SCHEMA, MANIFEST_SCHEMA, SCHEMA_VERSION
from core.shards import ShardConfig, ShardWriter, read_clips, read_table

REQUIRED_COLUMNS = [
    "clip_id",
    "film_id",
    "ip",
    "scene_index",
    "clip_index",
    "start_frame",
    "end_frame",
    "start_time",
    "end_time",
    "frame_indices",
    "crop_x",
    "crop_y",
    "crop_w",
    "crop_h",
    "height",
    "width",
    "num_frames",
    "fps",
    "video",
    "first_frame",
    "motion_scope",
    "motion_level",
    "status",
    "error",
]


def _clip(i: int, video_bytes: int = 1000) -> Clip:
    return make_clip(
        i,
        clip_id=f"{i:032x}",
        film_id="f" * 32,
        film_name="film",
        scene_index=i // 2,
        end_frame=48 * i + 48,
        end_time=2.0 * i + 2,
        video=bytes([i % 256]) * video_bytes,
        first_frame=b"\xff\xd8jpeg",
        characters=["Sintel"] if i % 2 else None,
    )


def test_schema_and_record_declare_the_same_columns():
    assert CLIP_SCHEMA.names == persisted_fields()
    assert set(REQUIRED_COLUMNS) <= set(CLIP_SCHEMA.names)
    assert "video" not in MANIFEST_SCHEMA.names and "first_frame" not in MANIFEST_SCHEMA.names
    assert CLIP_SCHEMA.metadata[b"animegamer.schema_version"] == SCHEMA_VERSION.encode()


def test_round_trip_is_exact(tmp_path):
    clips = [_clip(i) for i in range(5)]
    with ShardWriter(tmp_path / "shards", "clips") as writer:
        writer.write_all(clips)
    back = list(read_clips(tmp_path))
    assert [c.to_row() for c in back] == [c.to_row() for c in clips]


def test_files_rotate_by_size_and_stay_readable(tmp_path):
    config = ShardConfig(max_bytes=30_000, rows_per_group=2)
    with ShardWriter(tmp_path / "shards", "clips", config) as writer:
        writer.write_all(_clip(i, video_bytes=10_000) for i in range(10))
    assert [p.name for p in writer.paths] == [f"clips-{i:05d}.parquet" for i in range(4)]
    assert [pq.ParquetFile(p).metadata.num_rows for p in writer.paths] == [3, 3, 3, 1]
    assert read_table(tmp_path).column("clip_index").to_pylist() == list(range(10))
    assert not list((tmp_path / "shards").glob("*.tmp"))


def test_a_failed_write_leaves_no_partial_file(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path / "shards", "clips", ShardConfig(rows_per_group=1)) as writer:
            writer.write(_clip(0))
            raise RuntimeError("worker died")
    assert list((tmp_path / "shards").iterdir()) == []


def test_unknown_columns_are_rejected(tmp_path):
    row = _clip(0).to_row() | {"surprise": 1}
    with pytest.raises(ValueError, match="surprise"):
        with ShardWriter(tmp_path / "shards", "clips", ShardConfig(rows_per_group=1)) as writer:
            writer.write(row)


@pytest.mark.slow
def test_real_shards_open_in_every_common_reader(bikes_dataset):
    import datasets
    import duckdb
    import pandas as pd
    import polars as pl

    shards = sorted((bikes_dataset / "shards").glob("*.parquet"))
    expected = pq.read_table(shards).column("clip_id").to_pylist()
    assert len(expected) == 3

    assert pd.read_parquet(shards[0]).clip_id.tolist() == expected
    assert pl.read_parquet(shards[0])["clip_id"].to_list() == expected
    pattern = str(bikes_dataset / "shards" / "*.parquet")
    rows = duckdb.sql(
        f"select clip_id, len(frame_indices) n from '{pattern}' order by clip_index"
    ).fetchall()
    assert rows == [(c, 16) for c in expected]
    loaded = datasets.load_dataset(
        "parquet",
        data_files=[str(p) for p in shards],
        split="train",
        cache_dir=str(bikes_dataset.parent / "hf-cache"),
    )
    assert loaded["clip_id"] == expected and len(loaded[0]["video"]) > 1000

    manifest = pd.read_parquet(bikes_dataset / "manifest.parquet")
    assert manifest.clip_id.tolist() == expected
    assert "video" not in manifest.columns
