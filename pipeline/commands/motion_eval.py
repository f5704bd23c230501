"""`animegamer motion-eval`: ACC-F and MAE-F of generated clips against their requested levels.

The paper (arXiv 2504.01014, section 4) measures motion control by computing the motion level
of each generated shot and comparing it with the level the shot was asked for:
  ACC-F = fraction of clips whose measured level equals the requested level,
  MAE-F = mean of |measured level - requested level| over the clips.
The measurement is the pipeline's own (stages/motion.py) with the same configuration options,
so a generated clip is judged by exactly the rule that labelled the training clips.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import av
import numpy as np

from core.cli import WorkFailed, input_errors, print_error, work_errors

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
    from pipeline.config import ConfigError, load_config
    from stages.motion import MotionError, MotionScope
    from stages.motion_levels import LevelsError

    with input_errors(ConfigError, MotionError, LevelsError, FileNotFoundError, ValueError):
        if args.fps <= 0:
            raise ValueError(f"--fps {args.fps:g}: the sampling rate must be positive")
        requested = read_requested_levels(args.levels)
        paths = match_clips(args.clips, requested)
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


def read_requested_levels(path: Path) -> dict[str, int]:
    """{clip name without .mp4: requested level 1..5} from a JSON object or a clip,level CSV."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: requested-levels file not found")
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object {{clip: level}}")
        pairs = list(data.items())
    else:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or not {"clip", "level"} <= set(reader.fieldnames):
                raise ValueError(
                    f"{path}: expected a CSV header with columns clip,level, "
                    f"got {reader.fieldnames}"
                )
            pairs = [(row["clip"], row["level"]) for row in reader]
    return {_clip_name(name): _checked_level(level, name, path) for name, level in pairs}


def _clip_name(name: str) -> str:
    name = Path(str(name).strip()).name
    return name[:-4] if name.lower().endswith(".mp4") else name


def _checked_level(value, name: str, path: Path) -> int:
    try:
        level = int(str(value).strip())
    except ValueError:
        level = None
    if level is None or not 1 <= level <= 5:
        raise ValueError(f"{path}: clip {name!r} asks for level {value!r}; levels are 1..5")
    return level


def match_clips(folder: Path, requested: dict[str, int]) -> dict[str, Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder of clips")
    found = {p.stem: p for p in sorted(folder.glob("*.mp4"))}
    missing = sorted(set(requested) - set(found))
    if missing:
        raise FileNotFoundError(
            f"{folder}: no mp4 for {len(missing)} requested clip(s): {', '.join(missing[:10])}"
        )
    unrequested = sorted(set(found) - set(requested))
    if unrequested:
        print(
            f"note: {len(unrequested)} clip(s) have no requested level and are skipped: "
            f"{', '.join(unrequested[:10])}"
        )
    if not requested:
        raise ValueError("the requested-levels file lists no clip")
    return {name: found[name] for name in sorted(requested)}


def read_clip_frames(path: Path, fps: float) -> np.ndarray:
    """All frames of an mp4 as RGB, resampled to `fps` when the file runs faster.

    A clip slower than `fps` is refused: its frame-to-frame motion spans more time than the
    levels are defined over, so its level would read too high."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ValueError(f"{path}: the file has no video stream")
            stream = container.streams.video[0]
            rate = float(stream.average_rate or fps)
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    except av.error.FFmpegError as exc:
        raise ValueError(f"{path}: not a readable video ({exc})") from None
    if rate < fps - 0.01:
        raise ValueError(
            f"{path}: runs at {rate:g} fps, slower than the {fps:g} fps the motion "
            f"levels are measured at"
        )
    if len(frames) < 2:
        raise ValueError(f"{path}: {len(frames)} decodable frame(s); motion needs at least 2")
    step = rate / fps
    if abs(step - 1.0) > 0.01:
        picks = np.unique(np.round(np.arange(0, len(frames), step)).astype(int))
        frames = [frames[i] for i in picks if i < len(frames)]
    return np.stack(frames)


def measure_clip(stage, path: Path, requested: int, fps: float) -> dict:
    measured = stage.measure(read_clip_frames(path, fps))
    level = stage.levels.level(measured.scope)
    return {
        "clip": path.name,
        "requested": requested,
        "measured": level,
        "scope": round(measured.scope, 4),
        "held_pairs": measured.held_pairs,
    }


def summarise(rows: list[dict], stage) -> dict:
    requested = np.array([r["requested"] for r in rows])
    measured = np.array([r["measured"] for r in rows])
    confusion = [
        [int(np.sum((requested == a) & (measured == b))) for b in range(1, 6)] for a in range(1, 6)
    ]
    return {
        "acc_f": float(np.mean(requested == measured)),
        "mae_f": float(np.mean(np.abs(requested - measured))),
        "clips": len(rows),
        "motion_backend": stage.backend_descriptor,
        "motion_levels_version": stage.levels.version,
        "confusion_requested_by_measured": confusion,
        "per_clip": rows,
    }


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
