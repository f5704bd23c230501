"""Manual review decisions win downstream: in the trainer, in captioning, and through a rerun, a
recaption and a recalibration of the pipeline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from reviewing import (
    get_clips,
    manifest_rows,
    post_review,
    start_server,
    stop_server,
)

from core.film import FilmFolder
from core.shards import replace_column
from pipeline.data.review import read_reviews
from trainer.shared.data import ClipCatalog, clip_samples, game_sequences

# ---------------------------------------------------------------- decisions win downstream


def test_the_trainer_reads_decisions_and_corrections(review_film, review_server):
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    catalog = ClipCatalog([review_film])
    assert len(clip_samples(catalog)) == len(ids)
    post_review(review_server, {"clip_id": ids[1], "decision": "reject"})
    fields = {"motion_description": "walks past"}
    post_review(review_server, {"clip_id": ids[2], "decision": "accept", "fields": fields})
    catalog = ClipCatalog([review_film], include_unusable=True)  # a person's rejection wins even so
    by_id = {row["clip_id"]: i for i, row in enumerate(catalog.rows)}
    assert ids[1] not in by_id and catalog.rejected_in_review == 1
    assert [catalog.rows[s[0]]["clip_id"] for s in clip_samples(catalog)] == [ids[0], ids[2]]
    row = catalog.rows[by_id[ids[2]]]
    assert row["motion_description"] == "walks past"
    assert (
        row["instruction"] == "Character: Sintel; Motion: quickly walks past; Background: street."
    )
    # the rejected clip's gap ends the game sequence it was in: none spans it
    sequences = game_sequences(catalog.rows, max_turns=3)
    assert sequences and all(len(seq) == 1 for seq in sequences)


def test_an_accepted_clip_is_usable_whatever_the_automatic_flags_said(review_film, review_server):
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    for shard in (review_film / "shards").glob(
        "*.parquet"
    ):  # flags as the quality stage writes them
        table = pq.read_table(shard)
        table = replace_column(table, "usable", [False] * len(table))
        pq.write_table(replace_column(table, "reject_reasons", [["text"]] * len(table)), shard)
    post_review(review_server, {"clip_id": ids[0], "decision": "accept"})
    clips = {c["clip_id"]: c for c in get_clips(review_server)["clips"]}
    auto = clips[ids[0]]["auto"]
    assert clips[ids[0]]["usable"] is True
    assert (auto["usable"], auto["reject_reasons"]) == (False, ["text"])
    assert {m["reason"]: m["decided"] for m in auto["measures"]}["text"] is True
    assert clips[ids[1]]["usable"] is False and clips[ids[1]]["reject_reasons"] == ["text"]
    catalog = ClipCatalog([review_film])
    assert [catalog.rows[s[0]]["clip_id"] for s in clip_samples(catalog)] == [ids[0]]


def test_captioning_follows_the_review_and_leaves_the_automatic_flags_in_the_shards(
    review_film, review_server
):
    from captioning import ScriptedEngine, answer_well

    from core.record import CAPTION_OK, SKIPPED_UNUSABLE
    from pipeline.data.ip import load_ip
    from pipeline.passes.caption_films import caption_film
    from stages.captioning.stage import CaptionConfig

    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    automatic = {ids[0]: False, ids[1]: False, ids[2]: True}
    for shard in (review_film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        flags = [automatic[i] for i in table.column("clip_id").to_pylist()]
        table = replace_column(table, "usable", flags)
        reasons = [[] if usable else ["text"] for usable in flags]
        pq.write_table(replace_column(table, "reject_reasons", reasons), shard)
    post_review(review_server, {"clip_id": ids[0], "decision": "accept"})
    post_review(review_server, {"clip_id": ids[2], "decision": "reject"})

    config = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96)
    caption_film(review_film, config, load_ip("sintel"), engine=ScriptedEngine(answer_well))
    shard = {r["clip_id"]: r for r in pq.read_table(review_film / "shards").to_pylist()}
    assert [shard[i]["caption_status"] for i in ids] == [
        CAPTION_OK,
        SKIPPED_UNUSABLE,
        SKIPPED_UNUSABLE,
    ]
    assert {i: shard[i]["usable"] for i in ids} == automatic  # the shards keep the automatic flags
    manifest = manifest_rows(review_film)
    assert [manifest[i]["usable"] for i in ids] == [True, False, False]


def test_an_accept_makes_an_uncaptioned_rejected_clip_pending(review_film, review_server):
    """An accepted clip that the quality stage had rejected will be captioned: the manifest and
    the page say `pending`, as re-thresholding does; a rejected uncaptioned clip says skipped."""
    from core.record import CAPTION_PENDING, SKIPPED_UNUSABLE

    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    statuses = {ids[0]: SKIPPED_UNUSABLE, ids[1]: CAPTION_PENDING, ids[2]: CAPTION_PENDING}
    for shard in (review_film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        clip_ids = table.column("clip_id").to_pylist()
        table = replace_column(table, "usable", [i != ids[0] for i in clip_ids])
        table = replace_column(table, "caption_status", [statuses[i] for i in clip_ids])
        pq.write_table(table, shard)
    status, answer = post_review(review_server, {"clip_id": ids[0], "decision": "accept"})
    assert (status, answer["clip"]["caption_status"]) == (200, CAPTION_PENDING)
    assert post_review(review_server, {"clip_id": ids[1], "decision": "reject"})[0] == 200
    manifest = manifest_rows(review_film)
    assert [manifest[i]["caption_status"] for i in ids] == [
        CAPTION_PENDING,
        SKIPPED_UNUSABLE,
        CAPTION_PENDING,
    ]


@pytest.mark.slow
def test_a_rerun_a_recaption_and_a_recalibration_keep_every_decision(bikes_dataset, tmp_path):
    """The real pipeline's film folder: decisions and corrections survive the three rewrites."""
    from captioning import ScriptedEngine, answer_well
    from conftest import BIKES, local_config

    from core.shards import shard_paths
    from pipeline.commands.motion_calibrate import rewrite_films
    from pipeline.data.ip import load_ip
    from pipeline.passes.caption_films import caption_film
    from pipeline.running.runner import run_film
    from stages.captioning.stage import CaptionConfig
    from stages.motion_levels import MotionLevels

    out = tmp_path / "data"
    review_film = Path(shutil.copytree(bikes_dataset, out / bikes_dataset.name))
    review_server = start_server(review_film)
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    post_review(review_server, {"clip_id": ids[0], "decision": "reject", "note": "blurred"})
    post_review(
        review_server,
        {
            "clip_id": ids[1],
            "decision": "accept",
            "fields": {"subject": "cyclist", "environment": "road"},
        },
    )
    stop_server(review_server)
    before = read_reviews(FilmFolder(review_film))

    def check(after_what: str) -> None:
        assert read_reviews(FilmFolder(review_film)) == before, after_what
        manifest = manifest_rows(review_film)
        assert set(manifest) == set(ids), after_what
        assert manifest[ids[0]]["review_decision"] == "reject", after_what
        assert manifest[ids[0]]["usable"] is False, after_what
        assert (manifest[ids[1]]["subject"], manifest[ids[1]]["environment"]) == (
            "cyclist",
            "road",
        ), after_what

    ip = load_ip("sintel")
    config = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96)
    caption_film(review_film, config, ip, engine=ScriptedEngine(answer_well))
    check("re-caption")
    shard = {r["clip_id"]: r for r in pq.read_table(review_film / "shards").to_pylist()}
    assert shard[ids[1]]["caption_status"] == "ok" and shard[ids[1]]["subject"] != "cyclist"
    manifest = manifest_rows(review_film)
    assert manifest[ids[1]]["instruction"].endswith("Background: road.")  # rebuilt from corrections

    # edges between the three clips' scopes: every clip changes level
    scopes = sorted(r["motion_scope"] for r in pq.read_table(review_film / "shards").to_pylist())
    edges = (scopes[0] / 2, (scopes[0] + scopes[1]) / 2, (scopes[1] + scopes[2]) / 2, scopes[2] * 2)
    rewrite_films(shard_paths(review_film), MotionLevels(version="test-relevel", edges=edges))
    assert {r["motion_levels_version"] for r in manifest_rows(review_film).values()} == {
        "test-relevel"
    }
    check("motion re-calibration")

    (
        review_film / "summary.json"
    ).unlink()  # as if the run had been cut short: the film is cut again
    result = run_film(BIKES, out, local_config(), load_ip(None))
    assert result.ok and result.film_dir == review_film
    check("rerun of the pipeline")


def test_the_runs_console_counts_follow_the_review(bikes_dataset, tmp_path, caplog):
    """A rerun's `quality:` line and total count usable clips as the manifest does, decisions
    included, and say how many were accepted and rejected by hand."""
    from conftest import BIKES, local_config

    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_films

    out = tmp_path / "data"
    review_film = Path(shutil.copytree(bikes_dataset, out / bikes_dataset.name))
    review_server = start_server(review_film)
    clips = get_clips(review_server)["clips"]
    rejected = [c["clip_id"] for c in clips if c["usable"]][:2]
    for clip_id in rejected:
        post_review(review_server, {"clip_id": clip_id, "decision": "reject"})
    accepted = next(c["clip_id"] for c in clips if c["clip_id"] not in rejected)
    post_review(review_server, {"clip_id": accepted, "decision": "accept"})
    stop_server(review_server)
    usable = sum(row["usable"] for row in manifest_rows(review_film).values())
    assert usable == len(clips) - 2

    with caplog.at_level("INFO", logger="pipeline.running.folder_passes"):
        [result] = run_films([BIKES], out, local_config(), load_ip(None))
    assert "already complete" in result.message  # nothing cut again: the decisions stand
    assert f"quality: {usable} usable, 2 rejected (review 2)" in result.message
    assert result.message.endswith("; review: 1 accepted, 2 rejected")
    assert f"quality: {usable} of {len(clips)} clips usable in 1 film(s)" in caplog.text
