"""The film folder as one typed object (core/film.py): its file names, and summary.json and the
segments' DONE.json read and written as typed records without changing the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.film import (
    Drop,
    FilmFolder,
    FilmSummary,
    FolderError,
    QualityCounts,
    SegmentSpan,
    SegmentStats,
)


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
    stats = SegmentStats(segment=SegmentSpan(index=2), parts=["part-00000.parquet"], skipped=True)
    folder.write_segment_stats(2, stats)
    written = json.loads(folder.done_marker(2).read_text())
    assert "skipped" not in written and written["parts"] == ["part-00000.parquet"]
    assert folder.done_marker(2) == tmp_path / "work" / "segment-00002" / "DONE.json"
    again = folder.read_segment_stats(2)
    assert again is not None and again.parts == stats.parts and again.skipped is False


# A DONE.json as the runner wrote it when the segment and the drops were plain dicts.
DONE_JSON = {
    "black_frames": 0,
    "clips_failed": 0,
    "clips_written": 1,
    "corrupt_packets": 0,
    "drop_list": [
        {
            "detail": "",
            "end_frame": 96,
            "end_time": 4.0,
            "reason": "scene_tail",
            "start_frame": 48,
            "start_time": 2.0,
        }
    ],
    "fingerprint": "abc",
    "frames": 96,
    "ip": "generic",
    "late_cuts": 0,
    "parts": ["part-00000.parquet"],
    "scenes": [[0, 96]],
    "segment": {"index": 1, "is_last": True, "start": 0, "stop": 96},
    "stage_seconds": {"clips": 0.1},
    "unmatched_frames": 0,
}


def test_a_segment_marker_reads_as_records_and_writes_back_byte_for_byte(tmp_path):
    folder = FilmFolder(tmp_path)
    folder.done_marker(1).parent.mkdir(parents=True)
    text = json.dumps(DONE_JSON, indent=2, sort_keys=True) + "\n"
    folder.done_marker(1).write_text(text)
    stats = folder.read_segment_stats(1)
    assert stats is not None
    assert stats.segment == SegmentSpan(index=1, start=0, stop=96, is_last=True)
    assert stats.drop_list == [
        Drop(reason="scene_tail", start_frame=48, end_frame=96, start_time=2.0, end_time=4.0)
    ]
    folder.write_segment_stats(1, stats)
    assert folder.done_marker(1).read_text() == text


def test_the_quality_and_caption_sections_are_records(bikes_dataset: Path):
    summary = FilmFolder(bikes_dataset).read_summary()
    assert summary is not None and isinstance(summary.quality, QualityCounts)
    assert summary.quality.usable + summary.quality.rejected == summary.clips_written
    data = {"caption": {"model": None, "by_status": {"pending": 3}, "hint": "later"}}
    caption = FilmSummary.from_dict(data).caption
    assert caption is not None and caption.by_status == {"pending": 3} and caption.hint == "later"
    assert FilmSummary.from_dict(data).to_dict() == data  # keys it did not have stay out
