"""The film folder as one typed object (core/film.py): its file names, and summary.json and the
segments' DONE.json read and written as typed records without changing the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.film import FilmFolder, FilmSummary, FolderError, SegmentStats


def test_a_real_summary_reads_back_to_the_same_json(bikes_dataset: Path):
    folder = FilmFolder(bikes_dataset)
    on_disk = json.loads(folder.summary_file.read_text())
    summary = folder.read_summary()
    assert summary is not None
    assert summary.to_dict() == on_disk
    assert summary.complete and summary.clips_written == on_disk["clips_written"]
    assert summary.film.film_id == on_disk["film"]["film_id"]
    assert summary.crop is not None and summary.crop.box == tuple(
        on_disk["crop"][k] for k in "xywh"
    )
    assert {p.name for p in folder.path.iterdir()} >= {
        folder.shards.name,
        folder.manifest.name,
        folder.drops.name,
        folder.summary_file.name,
    }
    assert not folder.work.exists()  # removed once every segment was done


def test_unknown_keys_are_kept_and_missing_keys_are_not_added():
    data = {"clips_written": 3, "film": {"film_id": "abc", "later": 1}, "newer_key": [1, 2]}
    summary = FilmSummary.from_dict(data)
    assert summary.to_dict() == data
    assert summary.film.fps is None and summary.crop is None and summary.scenes is None


def test_a_value_of_the_wrong_shape_is_carried_through_not_typed():
    data = {"film": "sintel_trailer-e8060c73", "crop": {"x": 1, "y": 2}}
    summary = FilmSummary.from_dict(data)
    assert summary.film.film_name is None  # read as not recorded
    assert summary.crop is not None and summary.crop.box is None  # w and h missing
    assert summary.to_dict() == data


def test_an_update_writes_the_changed_keys_and_keeps_the_rest(tmp_path):
    folder = FilmFolder(tmp_path / "film")
    folder.summary_file.parent.mkdir()
    folder.summary_file.write_text(json.dumps({"ip": "generic", "extra": {"a": 1}}))
    folder.update_summary(lambda s: s.updated(captions="complete"))
    assert json.loads(folder.summary_file.read_text()) == {
        "ip": "generic",
        "extra": {"a": 1},
        "captions": "complete",
    }


def test_an_update_without_a_summary_creates_one_only_when_asked(tmp_path):
    folder = FilmFolder(tmp_path / "film")
    assert folder.update_summary(lambda s: s.updated(captions="x"), create=False) is None
    assert not folder.summary_file.exists()
    folder.update_summary(lambda s: s.updated(captions="x"))
    assert json.loads(folder.summary_file.read_text()) == {"captions": "x"}


def test_unreadable_summary_is_an_error_naming_the_file(tmp_path):
    folder = FilmFolder(tmp_path)
    folder.summary_file.write_text("{not json")
    with pytest.raises(FolderError, match=r"summary\.json: not valid JSON"):
        folder.read_summary()


def test_segment_stats_round_trip_without_the_in_memory_flag(tmp_path):
    folder = FilmFolder(tmp_path)
    stats = SegmentStats(segment={"index": 2}, parts=["part-00000.parquet"], skipped=True)
    folder.write_segment_stats(2, stats)
    written = json.loads(folder.done_marker(2).read_text())
    assert "skipped" not in written and written["parts"] == ["part-00000.parquet"]
    assert folder.done_marker(2) == tmp_path / "work" / "segment-00002" / "DONE.json"
    again = folder.read_segment_stats(2)
    assert again is not None and again.parts == stats.parts and again.skipped is False
