"""`animegamer motion-eval`: ACC-F and MAE-F of generated clips against their requested levels
(the measurement is pipeline/motion_eval.py's; this module is the command around it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli import WorkFailed, input_errors, print_error, work_errors
from pipeline.motion_eval import match_clips, measure_clip, read_requested_levels, summarise

HELP = (
    "Measure the motion level of generated clips (a folder of mp4) and report ACC-F and "
    "MAE-F against the level each clip was asked for."
)

CLIP_FPS = 8.0  # the dataset's clip rate: motion per frame step is measured at this rate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("clips", type=Path, help="folder of generated .mp4 clips")
    parser.add_argument(
        "--levels",
        type=Path,
        required=True,
        help="requested level per clip: a JSON object {clip: level} or a CSV "
        "with columns clip,level (clip = file name, with or without .mp4)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write the results (per clip too) to this JSON file"
    )
    parser.add_argument("--config", help="pipeline YAML config (its motion section is used)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="motion.FIELD=VALUE",
        help="override a motion setting, e.g. --set motion.backend=memflow",
    )
    parser.add_argument(
        "--fps",
        type=float,
        default=CLIP_FPS,
        help="rate the clips are sampled at before measuring (default 8, the dataset's)",
    )


def run(args: argparse.Namespace) -> int:
    with input_errors(FileNotFoundError, ValueError):
        if args.fps <= 0:
            raise ValueError(f"--fps {args.fps:g}: the sampling rate must be positive")
        requested = read_requested_levels(args.levels)
        paths = match_clips(args.clips, requested)
    # The settings and the motion stage (with them every stage's imports: half a second) only
    # once the levels and the clips are found: a wrong path is one line at once.
    from pipeline.data.config import ConfigError, load_config
    from stages.motion import MotionError, MotionScope
    from stages.motion_levels import LevelsError

    with input_errors(ConfigError, MotionError, LevelsError, FileNotFoundError, ValueError):
        stage = MotionScope(load_config(args.config, args.set).motion)
        stage.setup()
    rows, failed = [], []
    for name, path in paths.items():  # one unreadable clip is reported, never the end of the run
        try:
            rows.append(measure_clip(stage, path, requested[name], args.fps))
        except (MotionError, ValueError) as exc:
            failed.append({"clip": path.name, "error": str(exc)})
            print_error("motion-eval", f"skipped {exc}")
    if not rows:
        raise WorkFailed("no clip could be measured")
    result = summarise(rows, stage) | {"failed": failed}
    print_result(result)
    if args.json:
        from core.io import write_json_atomic

        with work_errors(OSError):
            write_json_atomic(result, args.json)
        print(f"wrote {args.json}")
    return 0


def print_result(result: dict) -> None:
    skipped = f" ({len(result['failed'])} unreadable, left out)" if result.get("failed") else ""
    print(
        f"{result['clips']} clips{skipped}, levels {result['motion_levels_version']}, "
        f"backend {result['motion_backend']}"
    )
    print(f"ACC-F {result['acc_f']:.3f}   MAE-F {result['mae_f']:.3f}")
    print("requested \\ measured   1    2    3    4    5")
    for level, row in enumerate(result["confusion_requested_by_measured"], start=1):
        print(f"  level {level}            " + " ".join(f"{n:4d}" for n in row))
