"""`animegamer camera-audit`: sheets to label clips' camera motion by eye, and the camera stage's
agreement with those labels (the sheets and the counting are pipeline/inspection/camera_audit.py's;
this module is the command around them)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = """Check the camera stage's label on your own films by eye. First write labelling sheets
(the first and last frames under a grid, their red/cyan overlay, every frame; no label of the
stage's on them) and a labels file to fill in; then count how often the stage agrees.

  animegamer camera-audit data/ --sheets sheets/          # 100 usable clips, chosen at random
  animegamer camera-audit data/ --labels sheets/labels.tsv # the stage against your labels"""

SAMPLE_SEED = 0  # the clips a --sheets run picks are the same on every run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", help="a film folder (OUT/<film>) or a dataset folder (OUT) with camera labels"
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--sheets", type=Path, help="write a sheet a clip and labels.tsv here")
    what.add_argument(
        "--labels", type=Path, help="your labels (clip_id<TAB>label a line): count the agreement"
    )
    parser.add_argument(
        "--limit", type=int, default=100, help="clips to write sheets for (default %(default)s)"
    )
    parser.add_argument(
        "--all-clips",
        action="store_true",
        help="choose among every clip, not only the usable ones",
    )


def run(args: argparse.Namespace) -> int:
    from core.cli import input_errors
    from pipeline.inspection.explore import DatasetError, open_dataset

    with input_errors(DatasetError, FileNotFoundError, ValueError):
        if args.limit < 1:
            raise ValueError(f"--limit {args.limit}: give 1 or more clips")
        dataset = open_dataset(args.path)
        rows = dataset.manifest if args.all_clips else dataset.usable
        if rows.empty:
            raise ValueError(f"{args.path}: no usable clip (--all-clips chooses among every clip)")
        if "camera_motion" not in rows or rows["camera_motion"].isna().all():
            raise ValueError(f"{args.path}: no clip has a camera label (the camera stage was off)")
        if args.labels:
            return _count(rows, args.labels)
    return _write_sheets(dataset, rows, args.sheets, args.limit)


def _write_sheets(dataset, rows, folder: Path, limit: int) -> int:
    import cv2

    from core.cli import work_errors
    from core.io import write_text_atomic
    from pipeline.inspection.camera_audit import TEMPLATE_HEADER, camera_sheet

    chosen = rows.sample(min(limit, len(rows)), random_state=SAMPLE_SEED).sort_index()
    with work_errors(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        for clip_id in chosen["clip_id"]:
            sheet = camera_sheet(dataset.frames(clip_id))
            cv2.imwrite(str(folder / f"{clip_id}.png"), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
        template = [TEMPLATE_HEADER, *(f"{clip_id}\t\t\t" for clip_id in chosen["clip_id"])]
        write_text_atomic("\n".join(template) + "\n", folder / "labels.tsv")
    print(
        f"wrote {len(chosen)} sheets of {len(rows)} clips to {folder}; label each clip in "
        f"{folder / 'labels.tsv'} (before looking at the stage's labels), then run with "
        f"--labels {folder / 'labels.tsv'}"
    )
    return 0


def _count(rows, path: Path) -> int:
    from pipeline.inspection.camera_audit import agreement, read_labels

    result = agreement(dict(zip(rows["clip_id"], rows["camera_motion"])), read_labels(path))
    if not result.compared:
        raise ValueError(f"{path}: no labelled clip of the folder's clips to compare")
    print(
        f"camera label against yours: {result.agreed} of {result.compared} clips "
        f"({result.agreed / result.compared:.0%}); where you say the camera moves, "
        f"{result.moving_agreed} of {result.moving}"
        + (f" ({result.moving_agreed / result.moving:.0%})" if result.moving else "")
        + f"; {result.excluded} excluded by you"
    )
    if result.unknown:
        print(f"not among the folder's clips ({len(result.unknown)}): {', '.join(result.unknown)}")
    for clip_id, yours, stage in result.disagreements:
        print(f"  {clip_id}: yours {yours}, the stage's {stage}")
    return 0
