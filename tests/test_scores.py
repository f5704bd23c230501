"""Scores (issue 36; stages/scoring/scores.py): declared once with their stage, they reach the shards,
the reject thresholds, the review page's filters, the notebook API and the report, here on the
sample film as the real pipeline cuts it (camera motion and clarity on by default)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from core.settings import ConfigError, Settings
from pipeline.cli import main as cli_main
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.report import build_report
from pipeline.inspection.review_app import ReviewApp
from pipeline.passes.quality import apply_quality
from stages.base import register_clip_stage, registered_scores, unregister_clip_stage
from stages.quality import RejectConfig, clip_reasons, quality_measures
from stages.scoring.camera import LABELS
from stages.scoring.scores import Score, matches, score_filter, score_limits

SCORE_REASONS = {"camera", "blurry"}


@pytest.fixture
def sintel_copy(sintel_dataset, tmp_path) -> Path:
    """A dataset folder holding a copy of the sample film's folder (tests change it)."""
    out = tmp_path / "ds"
    shutil.copytree(sintel_dataset, out / Path(sintel_dataset).name)
    return out


def test_the_bundled_scores_are_declared_with_their_stages():
    scores = {score.column: score for score in registered_scores()}
    assert {"camera_motion", "clarity", "aesthetic_score", "caption_match"} <= set(scores)
    assert scores["camera_motion"].labels == LABELS and scores["clarity"].is_number
    assert (scores["camera_motion"].reject_reason, scores["clarity"].reject_reason) == (
        "camera",
        "blurry",
    )


def test_a_score_of_a_column_the_stage_does_not_fill_is_refused():
    with pytest.raises(ValueError, match="scores columns it does not fill"):
        register_clip_stage(
            "scored", settings=Settings, order=60, scores=(Score("nowhere", "nowhere"),)
        )(lambda settings: None)
    unregister_clip_stage("scored")


def test_every_clip_of_the_sample_has_its_scores_and_defaults_reject_by_none(sintel_dataset):
    manifest = open_dataset(sintel_dataset).manifest
    assert manifest["camera_motion"].isin(LABELS).all()
    assert manifest["clarity"].between(0, 1).all()
    assert not any(SCORE_REASONS & set(reasons) for reasons in manifest["reject_reasons"])
    assert score_limits(registered_scores(), {}) == {}  # no score declares a default limit


def test_a_threshold_rejects_by_a_score_and_says_why(sintel_copy):
    manifest = open_dataset(sintel_copy).manifest
    limit = float(manifest["clarity"].median())
    label = manifest["camera_motion"].iloc[0]
    thresholds = RejectConfig(scores={"clarity": limit, "camera_motion": [label]})
    apply_quality(sintel_copy, thresholds)
    after = open_dataset(sintel_copy).manifest
    for (_, row), (_, was) in zip(after.iterrows(), manifest.iterrows()):
        reasons = set(row["reject_reasons"])
        assert ("blurry" in reasons) == (row["clarity"] < limit)
        assert ("camera" in reasons) == (row["camera_motion"] == label)
        assert set(was["reject_reasons"]) <= reasons  # the quality reasons stay
        assert row["usable"] == (not reasons)
    row = after.iloc[0].to_dict()
    measures = {reason: text for reason, text, _ in quality_measures(row, thresholds)}
    assert measures["camera"] == f"camera motion {label} (camera: one of {label})"
    assert f"(blurry: below {limit:g})" in measures["blurry"]
    assert "camera" in clip_reasons(row, thresholds)
    apply_quality(sintel_copy, RejectConfig())  # the defaults again: the same decisions
    again = open_dataset(sintel_copy).manifest
    assert list(map(list, again["reject_reasons"])) == list(map(list, manifest["reject_reasons"]))


def test_quality_calibrate_takes_score_thresholds_and_refuses_bad_ones(sintel_copy, capsys):
    assert (
        cli_main(
            [
                "quality-calibrate",
                str(sintel_copy),
                "--dry-run",
                "--set",
                "reject.scores={clarity: 2}",
            ]
        )
        == 0
    )
    clips = len(open_dataset(sintel_copy).manifest)
    assert f"  blurry: {clips}" in capsys.readouterr().out
    for bad, said in (
        ("{clarity: high}", "clarity='high': give a number"),
        ("{camera_motion: [sideways]}", "give a list of labels among"),
        ("{sharpness: 1}", "no score named sharpness (scores: aesthetic_score, camera_motion,"),
    ):
        assert (
            cli_main(["quality-calibrate", str(sintel_copy), "--set", f"reject.scores={bad}"]) == 2
        )
        error = capsys.readouterr().err
        assert said in error and error.count("\n") == 1, error


def test_one_filter_rule_for_the_notebook_and_the_review_page(sintel_copy):
    dataset = open_dataset(sintel_copy)
    manifest = dataset.manifest
    label = manifest["camera_motion"].iloc[0]
    low, high = np.percentile(manifest["clarity"], [25, 75])
    wanted = manifest[(manifest["camera_motion"] == label) & manifest["clarity"].between(low, high)]
    found = dataset.where(camera_motion=label, clarity_min=low, clarity_max=high)
    assert list(found["clip_id"]) == list(wanted["clip_id"])
    app = ReviewApp(sintel_copy)
    query = {"camera_motion": label, "clarity_min": str(low), "clarity_max": str(high)}
    page = app.clips(query)
    assert [c["clip_id"] for c in page["clips"]] == list(wanted["clip_id"])
    assert ["clarity", f"{page['clips'][0]['clarity']:.3g}"] in page["clips"][0]["scores"]
    facets = page["facets"]
    assert facets["camera_motion"] == sorted(set(manifest["camera_motion"]))
    clarity = next(f for f in facets["scores"] if f["column"] == "clarity")
    assert clarity["min"] == pytest.approx(manifest["clarity"].min())
    with pytest.raises(KeyError, match="no score filter"):
        dataset.where(sharpness_min=1)
    with pytest.raises(ValueError, match="camera_motion must be one of"):
        app.clips({"camera_motion": "sideways"})


def test_a_clip_without_a_score_passes_only_the_none_filter():
    values = pa.array(["pan_left", None])
    assert matches("is", "none", values).tolist() == [False, True]
    assert matches("is", "pan_left", values).tolist() == [True, False]
    assert matches("min", 0.5, pa.array([0.7, None])).tolist() == [True, False]
    scores = registered_scores()
    assert score_filter(scores, {"film": "x"}) == []
    with pytest.raises(ValueError, match="clarity_min must be a number"):
        score_filter(scores, {"clarity_min": "sharp"})
    with pytest.raises(ConfigError):
        RejectConfig(scores={"clarity": [0.5]}).validate()


def test_the_report_shows_each_score_per_film_and_across_films(sintel_dataset):
    page = build_report(open_dataset(sintel_dataset))
    manifest = open_dataset(sintel_dataset).manifest
    assert f"median {manifest['clarity'].median():.3g}" in page
    assert "<td>Camera motion</td>" in page
    assert 'alt="distributions of camera motion, clarity"' in page
