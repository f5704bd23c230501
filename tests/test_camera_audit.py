"""`animegamer camera-audit`: labelling sheets of a cut film's clips, and the camera stage's
agreement with labels made by eye (pipeline/inspection/camera_audit.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.inspection.camera_audit import EXCLUDE, camera_sheet
from pipeline.inspection.explore import open_dataset


def test_a_sheet_shows_first_and_last_under_a_grid_their_overlay_and_every_frame():
    frames = np.zeros((16, 480, 720, 3), np.uint8)
    frames[0, 100:200, 100:200] = 200  # a square that slides 300 px right by the last frame
    frames[-1, 100:200, 400:500] = 200
    sheet = camera_sheet(frames)
    assert sheet.shape == (480 * 2 + 2 * 120, 1440, 3)  # 16 thumbnails of 180 px, 8 a row
    assert (sheet[0, 5] == (255, 255, 0)).all()  # the grid's first line
    first_vs_last = sheet[480:960, :720]
    assert tuple(first_vs_last[150, 150]) == (200, 0, 0)  # where it was: red
    assert tuple(first_vs_last[150, 450]) == (0, 200, 200)  # where it went: cyan


def test_sheets_then_labels_give_the_stage_s_agreement(sintel_dataset, tmp_path, capsys):
    sheets = tmp_path / "sheets"
    assert main(["camera-audit", str(sintel_dataset), "--sheets", str(sheets)]) == 0
    usable = open_dataset(sintel_dataset).usable
    written = sorted(p.stem for p in sheets.glob("*.png"))
    assert written == sorted(usable["clip_id"])
    assert cv2.imread(str(sheets / f"{written[0]}.png")).shape == (1200, 1440, 3)
    template = (sheets / "labels.tsv").read_text().splitlines()
    rows = [line for line in template if not line.startswith("#")]
    assert template[0].startswith("# clip_id") and "Labelling conventions" in template[1]
    assert sorted(row.split("\t")[0] for row in rows) == written
    assert "static" not in "".join(rows)  # no label of the stage's: labelled blind
    # label every clip as the stage did, but one the other way and one excluded
    stage = dict(zip(usable["clip_id"], usable["camera_motion"]))
    ids = sorted(stage)
    mine = {i: stage[i] for i in ids} | {ids[0]: "tilt_down", ids[1]: EXCLUDE}
    labels = tmp_path / "mine.tsv"
    labels.write_text("# mine\n" + "".join(f"{i}\t{label}\tsure\n" for i, label in mine.items()))
    capsys.readouterr()
    assert main(["camera-audit", str(sintel_dataset), "--labels", str(labels)]) == 0
    out = capsys.readouterr().out
    compared = len(ids) - 1
    assert f"{compared - 1} of {compared} clips" in out and "1 excluded by you" in out
    assert f"{ids[0]}: yours tilt_down, the stage's {stage[ids[0]]}" in out


def test_a_label_the_stage_does_not_know_is_one_line_naming_the_file(
    sintel_dataset, tmp_path, capsys
):
    labels = tmp_path / "mine.tsv"
    labels.write_text("# clip_id\tlabel\nabc\tpan_up\n")
    assert main(["camera-audit", str(sintel_dataset), "--labels", str(labels)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"{labels}:2: 'pan_up' is not a camera label" in error


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_under_one_is_refused(sintel_dataset, tmp_path, limit, capsys):
    args = ["camera-audit", str(sintel_dataset), "--sheets", str(tmp_path), "--limit", limit]
    assert main(args) == 2
    assert "--limit" in capsys.readouterr().err


def test_a_folder_without_camera_labels_is_one_line(tmp_path, capsys):
    """bikes.mp4 cut with the camera stage off: no clip has a label to check."""
    from conftest import BIKES, local_config

    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_film

    config = local_config(camera__enabled="false")
    unlabelled = run_film(BIKES, tmp_path / "a", config, load_ip(None))
    args = ["camera-audit", str(unlabelled.film_dir), "--sheets", str(tmp_path / "s")]
    assert main(args) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "no clip has a camera label" in error
