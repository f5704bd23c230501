"""The `scenes` settings section: the cut detector, the effect and hold rules, black runs and their
fades, blends and the learned detector of gradual transitions."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.settings import Settings, check_choice
from stages.scenes.detectors import DETECTORS

GRADUAL_DETECTORS = ("off", "transnetv2", "gated")


@dataclass
class SceneConfig(Settings):
    detector: str = "adaptive"
    """Scene detector: adaptive (PySceneDetect's adaptive rule on the window's median, so close
    cuts do not hide each other), pyscenedetect-adaptive (its own, on the mean), content, hash,
    histogram or threshold."""
    threshold: float | None = None
    """The detector's main threshold (adaptive_threshold for adaptive); None keeps its default."""
    options: dict | None = None
    """Further keyword arguments for the detector class, e.g. {window_width: 3}."""
    width: int = 256
    """Frames are scaled to this width for detection (PySceneDetect's own default effective width)."""
    effect_seconds: float = 1.0
    """Two cuts at most this far apart are dropped when the picture after the second is the
    one before the first again (a flash, an impact frame, a colour effect inside a shot:
    `SceneCuts`); cuts wait this much longer before clips are cut."""
    hold_seconds: float = 0.25
    """Drawings, not frames (detector adaptive): a frame that holds the previous drawing (the
    motion stage's held-pair test, motion.held_*) stays out of the detector's window, up to a
    hold this long (6 frames at 24 fps), so that anime drawn on twos and threes is judged from
    drawing to drawing and a new drawing is not a cut. 0: every frame is judged."""
    lag_seconds: float = 0.0
    """Extra time frames wait before clips are cut, for detectors that report a cut later than
    their own window (the threshold detector places a fade's cut mid-fade but reports it when the
    fade ends). summary.json counts late_cuts: raise this if it is not 0."""
    black_luma: int = 32
    """A frame is black when at most 1 % of its pixels are brighter than this grey level (0-255),
    i.e. its 99th-percentile grey level is at most this (quality's reject.black_luma)."""
    black_min_seconds: float = 0.2
    """A run of black frames at least this long starts a scene where it starts and where it ends
    (fades to and from black). Negative: black is no boundary."""
    flat_std: float = 5.0
    """A frame of one flat colour (white, the fog of a fade through white) counts as black does:
    its grey level's standard deviation (0-255) is at most this. Negative: only black does."""
    fade_step: float = 1.0
    """Frames next to a sustained black or flat run belong to its fade (no clip holds them) while
    their distance to the run's colour (grey levels: |mean - run's mean| + standard deviation,
    which a fade changes linearly) changes by at least this much a frame. Negative: fades are
    left in the shots."""
    fade_max_seconds: float = 1.0
    """The longest fade that is trimmed; frames wait this much longer before clips are cut."""
    blend_gate: float = 0.35
    """Dissolves and fades through any colour, on CPU (`BlendSpans`): a frame is looked at as a
    blend of the frames a lag before and after it only when their colour histograms differ by
    at least this (total variation, 0-1). Negative: the rule is off."""
    blend_edge_gate: float = 0.15
    """Next to a run of blend frames, a frame joins it at this lower colour distance (the faint
    start and end of a dissolve)."""
    blend_lags_seconds: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.35])
    """The lags (seconds) at which a frame is compared with the frames before and after it."""
    blend_between: float = 0.85
    """A blend's pixels lie between the two frames: sum|A-B| / sum(|t-A| + |t-B|) at least this
    (1 exactly between; motion scatters them)."""
    blend_mix: float = 0.25
    """A blend is far from both frames: min(sum|t-A|, sum|t-B|) / sum|A-B| at least this."""
    blend_pad_seconds: float = 0.13
    """Each run of blend frames is widened by this much on each side (the faint ends)."""
    blur_drop: float = 0.35
    """Blur transitions (the outgoing shot blurs out, the next blurs in; a zoom dissolve through
    a blurred frame), in `BlendSpans`: a frame counts as a blend of the frames a lag before and
    after it when its fine detail (grey level minus its Gaussian blur, mean absolute) is at most
    this share of both's and those two are different pictures (`blur_likeness`). Negative: off."""
    blur_likeness: float = 0.2
    """A blur frame's two sides are different pictures when their edge strengths correlate
    below this (`edge_likeness`: a shot zooming through a blur stays above it)."""

    gradual: str = "off"
    """Learned detector of gradual transitions (dissolves, fades through any colour, wipes):
    off, or transnetv2 (stages/transnet.py; about 13 times the cost of decoding on one CPU
    thread, so meant for GPU nodes: docs/scenes.md). Its transition frames hold no clip. Or
    gated: TransNetV2 only on the clip windows whose first and last frames' colours differ by at
    least `gradual_gate`, a window it marks dropped as `transition` (on the sample about +100 %
    of the pipeline's CPU, over issue 18's 25 % budget: docs/scenes.md)."""
    gradual_gate: float = 0.35
    """gradual=gated: the colour-histogram distance (0-1) between a window's first and last frame
    from which TransNetV2 looks at the window."""
    gradual_threshold: float = 0.5
    """A frame is part of a transition when TransNetV2's probability exceeds this."""
    gradual_min_frames: int = 3
    """Runs of fewer frames above the threshold (hard cuts, one-frame flashes) are left to the
    cut detector."""
    gradual_device: str = "auto"
    """Where TransNetV2 runs: auto (cuda when torch sees a GPU, else cpu), cpu, cuda, cuda:N."""

    def validate(self) -> None:
        check_choice("scenes", "detector", self.detector, DETECTORS)
        check_choice("scenes", "gradual", self.gradual, GRADUAL_DETECTORS)
