"""Motion control measured on generated clips: ACC-F and MAE-F against requested levels.

The paper (arXiv 2504.01014, section 4) computes the motion level of each generated shot and
compares it with the level the shot was asked for:
  ACC-F = fraction of clips whose measured level equals the requested level,
  MAE-F = mean of |measured level - requested level| over the clips.
The measurement is the pipeline's own (stages/motion.py) with the same settings, so a generated
clip is judged by exactly the rule that labelled the training clips. `animegamer motion-eval`
(pipeline/commands/motion_eval.py) and the trainer's `eval` both call it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np


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
    import av  # here: the command checks its paths before this import (0.2 s)

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
