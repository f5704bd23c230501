"""Scene detection, one frame at a time: the frame-level stages that find where scenes start and
which frames no clip may hold, one module per rule family.

- `cuts.py`: hard cuts (`SceneCuts`) and the effect rule (a flash or a colour effect inside a
  shot is no cut); `detectors.py`: the cut detectors, with the hold rule (anime judged from
  drawing to drawing);
- `black.py`: sustained black or flat runs (`BlackRuns`) and their fades;
- `blends.py`: dissolves, fades through any colour, short wipes and blur transitions on CPU
  (`BlendSpans`);
- `similarity.py`: how alike two small pictures are, shared by the rules above;
- `config.py`: the `scenes` settings section (`SceneConfig`).

This package is the stage's one public face: import from `stages.scenes`.
"""

from stages.scenes.black import BlackRuns
from stages.scenes.blends import BlendSpans
from stages.scenes.config import GRADUAL_DETECTORS, SceneConfig
from stages.scenes.cuts import SceneCuts
from stages.scenes.detectors import (
    DETECTORS,
    FastAdaptiveDetector,
    FastContentDetector,
    MedianAdaptiveDetector,
)
from stages.scenes.similarity import (
    colour_distance,
    colour_histogram,
    content_difference,
    edge_likeness,
    grey_difference,
    histogram_distance,
    is_black_grey,
)

__all__ = [
    "DETECTORS",
    "GRADUAL_DETECTORS",
    "BlackRuns",
    "BlendSpans",
    "FastAdaptiveDetector",
    "FastContentDetector",
    "MedianAdaptiveDetector",
    "SceneConfig",
    "SceneCuts",
    "colour_distance",
    "colour_histogram",
    "content_difference",
    "edge_likeness",
    "grey_difference",
    "histogram_distance",
    "is_black_grey",
]
