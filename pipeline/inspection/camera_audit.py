"""Checking the camera label by eye on one's own films (`animegamer camera-audit`;
docs/scores.md, "Checking the camera label on your own films").

The camera stage's agreement with labels made by eye was measured on a few hundred windows of
real anime (docs/scores.md), and those labels agree with each other on two thirds of them. A
franchise's own footage can read better or worse, so its users can measure it themselves, the
way the held-out sets were made: one sheet a clip that shows the first and the last frame at
full size under a grid, their red/cyan overlay and every frame; no label of the stage's on it;
the user's labels written to a file; then the agreement, with every disagreement listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from stages.scoring.camera import LABELS, STATIC

GRID = 60  # px between grid lines on the full-size frames (480x720: 8 by 12 cells)
THUMB = (120, 180)  # the strip's frame size (height, width)
EXCLUDE = "exclude"  # a clip that cannot carry a camera label (a cut inside it, black, a card)
TEMPLATE_HEADER = (
    "# clip_id\tlabel\tsure\tnote   (labels: " + ", ".join((*LABELS, EXCLUDE)) + ")\n"
    "# label by docs/scores.md, 'Labelling conventions': the camera's move; the background decides;"
    " a move is 12 px (a zoom 8 %) first frame to last; sure: sure or unsure"
)


def camera_sheet(frames: np.ndarray) -> np.ndarray:
    """One RGB picture to label a clip's camera from: its first and last frames side by side
    under a grid; below them the red (first) / cyan (last) overlay of the two, and of the first
    and the middle frame (a move that turns or stops shows there); then the clip's frames as a
    strip of thumbnails. Nothing measured is drawn on it."""
    first, last = (_gridded(frames[i]) for i in (0, -1))
    width = first.shape[1]
    overlays = [_gridded(_red_cyan(frames[0], frames[i])) for i in (-1, len(frames) // 2)]
    top, middle = np.concatenate([first, last], axis=1), np.concatenate(overlays, axis=1)
    return np.concatenate([top, middle, _strip(frames, 2 * width)], axis=0)


def _gridded(frame: np.ndarray) -> np.ndarray:
    out = frame.copy()
    out[:, ::GRID] = out[::GRID, :] = (255, 255, 0)  # a slide of a few pixels shows against it
    return out


def _red_cyan(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The first frame's grey in red, the last's in green and blue: what moved shows as a red
    and a cyan copy of itself, what held stays grey."""
    grey_first, grey_last = (cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in (first, last))
    return np.stack([grey_first, grey_last, grey_last], axis=-1)


def _strip(frames: np.ndarray, width: int) -> np.ndarray:
    """The frames as rows of thumbnails filling `width`, in order."""
    height, thumb_width = THUMB
    per_row = max(1, width // thumb_width)
    thumbs = [cv2.resize(f, (thumb_width, height), interpolation=cv2.INTER_AREA) for f in frames]
    thumbs += [np.zeros_like(thumbs[0])] * (-len(thumbs) % per_row)
    rows = [np.concatenate(thumbs[i : i + per_row], axis=1) for i in range(0, len(thumbs), per_row)]
    strip = np.concatenate(rows, axis=0)
    return np.pad(strip, ((0, 0), (0, width - strip.shape[1]), (0, 0)))


def read_labels(path: Path) -> dict[str, str]:
    """A labels file: a tab-separated line a clip, `clip_id<TAB>label`, further columns free;
    lines starting with # and lines with no label yet are skipped. A label outside the stage's
    (and `exclude`) is an error naming the file and the line."""
    labels: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        columns = [c.strip() for c in line.split("\t")]
        if line.startswith("#") or len(columns) < 2 or not columns[1]:
            continue
        clip_id, label = columns[0], columns[1]
        if label not in (*LABELS, EXCLUDE):
            known = ", ".join((*LABELS, EXCLUDE))
            raise ValueError(f"{path}:{number}: {label!r} is not a camera label ({known})")
        labels[clip_id] = label
    return labels


@dataclass
class Agreement:
    """The stage's labels against the user's, over the clips both label (not excluded)."""

    compared: int = 0
    agreed: int = 0
    moving: int = 0  # clips the user's label says the camera moves in
    moving_agreed: int = 0
    excluded: int = 0
    unknown: list[str] = field(default_factory=list)  # clip ids the dataset does not hold
    disagreements: list[tuple[str, str, str]] = field(default_factory=list)  # (clip, yours, stage)


def agreement(stage: dict[str, str | None], yours: dict[str, str]) -> Agreement:
    """How often the stage's label (`stage`: clip id to camera_motion) is the user's."""
    result = Agreement()
    for clip_id, label in yours.items():
        if clip_id not in stage:
            result.unknown.append(clip_id)
        elif label == EXCLUDE:
            result.excluded += 1
        else:
            same = stage[clip_id] == label
            result.compared += 1
            result.agreed += same
            if label != STATIC:
                result.moving += 1
                result.moving_agreed += same
            if not same:
                result.disagreements.append((clip_id, label, str(stage[clip_id])))
    return result
