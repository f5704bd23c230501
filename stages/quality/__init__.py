"""Clip quality (issue 13): is a clip fit to caption and to train on, and if not, why.

The stage runs while a clip's 16 frames are in memory (no second decode) and stores what it
measured, so that decisions can be re-taken later from the stored values alone
(`animegamer quality-calibrate`):
- `quality_luma_mean`, `quality_luma_peak`: per frame, the mean and the 99th percentile of the
  grey level (0-255) at 60x90 — black frames, fades and flashes are read from these;
- `quality_text_area`: the largest share of a sampled frame that a real text detector (PP-OCRv4
  detection, ONNX, CPU) marks as text — title cards, credits, burned-in subtitles;
- `quality_hashes`: 64-bit perceptual hashes of a few frames — near-duplicates across clips and
  films are found from these by a dataset-level pass (pipeline/passes/quality.py).

The stage only measures. `decide` is the one function that turns stored values into usable /
reject_reasons (`clip_reasons` gives a clip's own reasons, the folder pass adds duplicates); the
folder pass (pipeline/passes/quality.py) is the one place that calls it.
docs/quality.md gives every rule, unit and threshold, and the figures measured on the sample.

- `stage.py`: the stage, its settings (`quality`) and its columns;
- `measures.py`: the brightness series, the perceptual hash and the distance of two hashes;
- `reject.py`: the thresholds (`reject`), the one rule and its words for people.
The text detector the stage runs is stages/burned_in/text_detector.py.

This package is quality's one public face: import from `stages.quality`.
"""

from stages.quality.measures import (
    HASH_INPUT_SIZE,
    HASH_SIDE,
    LUMA_SIZE,
    hamming,
    luma_series,
    perceptual_hash,
    small_grey,
)
from stages.quality.reject import (
    REASON_COLUMNS,
    RejectConfig,
    clip_reasons,
    decide,
    fades,
    field_limits,
    flashes,
    frame_jumps,
    is_black,
    overlay_limits,
    own_reasons,
    quality_measures,
    reason_columns,
    with_duplicate,
)
from stages.quality.stage import QUALITY_COLUMNS, QualityConfig, QualityError, QualityStage

__all__ = [
    "HASH_INPUT_SIZE",
    "HASH_SIDE",
    "LUMA_SIZE",
    "QUALITY_COLUMNS",
    "REASON_COLUMNS",
    "QualityConfig",
    "QualityError",
    "QualityStage",
    "RejectConfig",
    "clip_reasons",
    "decide",
    "fades",
    "field_limits",
    "flashes",
    "frame_jumps",
    "hamming",
    "is_black",
    "luma_series",
    "overlay_limits",
    "own_reasons",
    "perceptual_hash",
    "quality_measures",
    "reason_columns",
    "small_grey",
    "with_duplicate",
]
