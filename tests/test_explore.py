"""The notebook API (pipeline/inspection/explore.py) against the real pipeline's film folder for bikes.mp4.

The film folder (`film_dir`) and the helpers shared with the report's tests are in conftest.py.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import decode_directly, rewrite_film, shard_rows
from PIL import Image

from core.shards import ShardConfig, ShardWriter
from pipeline.inspection.explore import DatasetError, open_dataset
from stages.base import clip_schema

# ---------------------------------------------------------------- tests of the notebook API


def test_frames_are_identical_to_decoding_the_shard_video_bytes(film_dir):
    dataset = open_dataset(film_dir)
    stored = shard_rows(film_dir, ["clip_id", "video", "num_frames", "height", "width"])
    assert len(stored) >= 2
    for row in stored:
        frames = dataset.frames(row["clip_id"])
        expected = decode_directly(row["video"])
        assert frames.dtype == np.uint8
        assert frames.shape == (row["num_frames"], row["height"], row["width"], 3)
        assert np.array_equal(frames, expected)
        assert dataset.video_bytes(row["clip_id"]) == row["video"]


def test_clips_are_found_in_any_row_group_of_any_shard(film_dir, tmp_path):
    # A real run writes 256 MB shards of 32-row groups; re-shard the film into one row per group
    # and a new shard every two clips, and every clip must still come back intact.
    copy = Path(shutil.copytree(film_dir, tmp_path / "bikes"))
    rows = [
        r
        for shard in sorted((copy / "shards").glob("*.parquet"))
        for r in pq.read_table(shard).to_pylist()
    ]
    shutil.rmtree(copy / "shards")
    two_clips = sum(len(r["video"]) + len(r["first_frame"]) + 512 for r in rows[:2])
    with ShardWriter(
        copy / "shards",
        "clips",
        ShardConfig(max_bytes=two_clips, rows_per_group=1),
        clip_schema(),  # the pipeline's rows carry the registered stages' columns too
    ) as writer:
        writer.write_all(rows)
    assert len(writer.paths) >= 2 and pq.ParquetFile(writer.paths[0]).num_row_groups == 2
    dataset = open_dataset(copy)
    for row in rows:
        assert np.array_equal(dataset.frames(row["clip_id"]), decode_directly(row["video"]))


def test_manifest_lists_every_shard_clip_in_order_without_media(film_dir):
    manifest = open_dataset(film_dir).manifest
    stored = shard_rows(film_dir, ["clip_id", "clip_index", "start_frame"])
    assert list(manifest["clip_id"]) == [r["clip_id"] for r in stored]
    assert list(manifest["clip_index"]) == sorted(manifest["clip_index"])
    assert "video" not in manifest.columns and "first_frame" not in manifest.columns
    # a motion level is an integer or <NA>, never a float such as 3.0
    assert str(manifest["motion_level"].dtype) == "Int8"


def test_manifest_is_rebuilt_from_shards_when_the_manifest_file_is_missing(film_dir, tmp_path):
    copy = Path(shutil.copytree(film_dir, tmp_path / "bikes"))
    (copy / "manifest.parquet").unlink()
    assert list(open_dataset(copy).manifest["clip_id"]) == list(
        open_dataset(film_dir).manifest["clip_id"]
    )


def test_first_frame_is_the_stored_image_and_matches_the_video(film_dir):
    dataset = open_dataset(film_dir)
    row = shard_rows(film_dir, ["clip_id", "first_frame"])[0]
    image = dataset.first_frame(row["clip_id"])
    stored = Image.open(io.BytesIO(row["first_frame"])).convert("RGB")
    assert np.array_equal(image, np.asarray(stored))
    # Both are lossy encodings of the same picture: close, whatever the codecs' rounding.
    difference = np.abs(image.astype(int) - dataset.frames(row["clip_id"])[0].astype(int))
    assert difference.mean() < 6


def test_preview_is_an_animation_of_every_frame_that_renders_in_jupyter(film_dir):
    dataset = open_dataset(film_dir)
    clip_id = dataset.manifest["clip_id"].iloc[0]
    preview = dataset.preview(clip_id, width=240)
    with Image.open(io.BytesIO(preview.data)) as animation:
        assert animation.n_frames == len(dataset.frames(clip_id))
        assert animation.width == 240
    assert preview.mime in ("image/webp", "image/gif")
    assert preview._repr_html_().count(f"data:{preview.mime};base64,") == 1
    assert clip_id[:8] in preview.caption


def test_dataset_folder_with_several_films(film_dir, tmp_path):
    for name in ("film-a", "film-b"):
        shutil.copytree(film_dir, tmp_path / name)
    (tmp_path / "notes").mkdir()  # a stray folder is not a film
    dataset = open_dataset(tmp_path)
    assert [film.slug for film in dataset.films] == ["film-a", "film-b"]
    assert len(dataset.manifest) == 2 * len(open_dataset(film_dir).manifest)
    assert set(dataset.summaries) == {"film-a", "film-b"}
    with pytest.raises(DatasetError, match="2 films"):
        dataset.summary


def test_clear_errors_name_the_folder_and_the_problem(film_dir, tmp_path):
    with pytest.raises(DatasetError, match=f"{tmp_path}: no film folders found"):
        open_dataset(tmp_path)
    with pytest.raises(DatasetError, match="no such folder"):
        open_dataset(tmp_path / "missing")
    (tmp_path / "empty" / "shards").mkdir(parents=True)
    with pytest.raises(DatasetError, match=f"{tmp_path / 'empty'}: no clips found"):
        open_dataset(tmp_path / "empty").manifest
    with pytest.raises(KeyError, match="not-a-clip"):
        open_dataset(film_dir).frames("not-a-clip")
    broken = Path(shutil.copytree(film_dir, tmp_path / "broken"))
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(DatasetError, match="summary.json: not valid JSON"):
        open_dataset(broken).summary


def test_a_failed_clip_without_video_says_why(film_dir, tmp_path):
    def fail_first(row):
        if row["clip_index"] == 0:
            row.update(video=None, first_frame=None, status="error", error="clips: decode failed")
        return row

    film = rewrite_film(film_dir, tmp_path / "bikes", change_row=fail_first)
    dataset = open_dataset(film)
    failed = dataset.manifest["clip_id"].iloc[0]
    with pytest.raises(ValueError, match="has no video bytes.*decode failed"):
        dataset.frames(failed)
    assert (
        len(dataset.frames(dataset.manifest["clip_id"].iloc[1]))
        == dataset.manifest["num_frames"].iloc[1]
    )


def test_a_film_cut_before_a_column_existed_still_gives_its_manifest(film_dir, tmp_path):
    """Shards written before `combing` and `blended` were measured (schema 2.x, the same major
    version) lack those columns: the manifest is still rebuilt from them, with the columns
    null (not measured), as a review decision or a new quality threshold rebuilds it."""
    copy = Path(shutil.copytree(film_dir, tmp_path / "older"))
    for shard in (copy / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        pq.write_table(table.drop_columns(["combing", "blended"]), shard)
    (copy / "manifest.parquet").unlink()
    manifest = open_dataset(copy).manifest
    assert list(manifest["clip_id"]) == list(open_dataset(film_dir).manifest["clip_id"])
    assert manifest["combing"].isna().all() and manifest["blended"].isna().all()
    assert list(manifest["usable"]) == list(open_dataset(film_dir).manifest["usable"])
