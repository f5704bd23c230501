"""Clarity of a clip (issue 36): how sharp its edges are, with no reference and no weights.

Blurring an image changes the differences between neighbouring pixels much less when it was
already blurred: the edges of a sharp picture are steep, and a low-pass filter flattens them,
while a soft edge has little left to lose (Crete, Dolmiere, Ladret and Nicolas, "The blur
effect: perception and estimation with a new no-reference perceptual blur metric", SPIE 2007,
measure their blur so). The rule (docs/scores.md has the figures):
1. On a clip frame's luma at its stored size (480x720), each pixel's step to its right and
   lower neighbour, |d|, and the same step once the frame is blurred along that direction with
   a 9-pixel box, |d_b|.
2. Only edges count: pixels whose 7x7 neighbourhood spans at least `min_contrast` grey levels.
   Flat colour, anime's large painted areas, is neither sharp nor blurred and is left out
   (there |d| is mostly compression noise).
3. Clarity = sum(max(0, |d| - |d_b|)) / sum(|d|) over those pixels: the share of the edges'
   steepness that blurring takes away, 0 (already as blurred as the filter makes it) to near 1.
   The clip's value is the median of its measured frames'.
A frame upscaled from half its size loses about a fifth of its clarity (docs/scores.md); the
film's `upscaled` note says by how much its clips enlarge the source, and the report shows both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from core.record import Clip
from core.resources import Resources
from core.schema import CLIP_SCHEMA
from core.settings import ConfigError, Settings
from stages.base import ClipStage, register_clip_stage
from stages.scoring.scores import Score

BLUR_TAPS = 9  # the box the frame is blurred with, along each direction
CONTRAST_SIDE = 7  # the neighbourhood whose range marks an edge
LIMITED_RANGE = 219 / 255  # luma spans 16-235: grey-level settings scale by this on the plane


@dataclass
class ClarityConfig(Settings):
    enabled: bool = True
    """Measure each clip's clarity (edge sharpness, no weights) while its frames are in memory."""
    frames: list[int] = field(default_factory=lambda: [8])
    """Which of the clip's 16 frames are measured (the median is kept). The middle frame by
    default: a frame costs about 4 ms at 480x720."""
    min_contrast: float = 24.0
    """An edge pixel's 7x7 neighbourhood spans at least this many grey levels (0-255)."""

    def validate(self) -> None:
        if not self.frames or any(k < 0 for k in self.frames):
            raise ConfigError(f"clarity.frames={self.frames}: give one or more frame positions")


def frame_clarity(luma: np.ndarray, min_contrast: float = 24.0) -> float | None:
    """The clarity of one frame's luma (uint8, limited range): see the module docstring. None
    when the frame has no edge (flat, black)."""
    kernel = np.ones((CONTRAST_SIDE, CONTRAST_SIDE), np.uint8)
    contrast = cv2.subtract(cv2.dilate(luma, kernel), cv2.erode(luma, kernel))
    # 1 at an edge pixel, else 0: the steps' sums over the edges are sums of steps times it
    # (exact integers: a third cheaper than sums of the steps picked out by a boolean mask)
    edges = (contrast >= min_contrast * LIMITED_RANGE).view(np.uint8)
    steep = kept = 0
    for horizontal in (True, False):
        blurred = cv2.blur(luma, (BLUR_TAPS, 1) if horizontal else (1, BLUR_TAPS))
        if horizontal:
            step = cv2.absdiff(luma[:, 1:], luma[:, :-1])
            blurred_step = cv2.absdiff(blurred[:, 1:], blurred[:, :-1])
            where = edges[:, :-1]
        else:
            step = cv2.absdiff(luma[1:], luma[:-1])
            blurred_step = cv2.absdiff(blurred[1:], blurred[:-1])
            where = edges[:-1]
        steep += int(cv2.sumElems(cv2.multiply(step, where))[0])
        kept += int(cv2.sumElems(cv2.multiply(cv2.subtract(step, blurred_step), where))[0])
    return kept / steep if steep else None


class ClarityStage(ClipStage):
    """Fills `clarity`: the median clarity of the configured frames (null when none has an
    edge)."""

    name = "clarity"
    resources = Resources(cpus=1.0)

    def __init__(self, config: ClarityConfig | None = None):
        self.config = config or ClarityConfig()
        self.config.validate()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise ValueError(f"clip {clip.clip_id}: clarity needs the in-memory frames")
        luma = clip.frames.luma()
        values = [
            frame_clarity(luma[min(k, len(luma) - 1)], self.config.min_contrast)
            for k in self.config.frames
        ]
        measured = [v for v in values if v is not None]
        clip.clarity = round(float(np.median(measured)), 4) if measured else None
        return clip


CLARITY_COLUMNS = (CLIP_SCHEMA.field("clarity"),)  # typed once, in core/schema.py
CLARITY_SCORES = (
    Score(
        "clarity",
        "clarity",
        unit="share of edge steepness a 9-px blur removes",
        reason="blurry",
        meaning="the edges are softer than the folder's threshold (reject.scores: clarity)",
    ),
)


@register_clip_stage(
    "clarity", settings=ClarityConfig, columns=CLARITY_COLUMNS, scores=CLARITY_SCORES, order=14
)
def clarity_stage(settings: ClarityConfig) -> ClipStage | None:
    """Before encode (order 100), which releases the frames."""
    return ClarityStage(settings) if settings.enabled else None
