"""Frame-blended rate conversions (issue 35): the one rule that tells a frame mixed from the
frames either side of it, the frame-level detector that applies it to every decoded frame, and
the declaration of the `blended` column it fills.

A copy converted between frame rates by blending (NTSC to PAL on many DVDs, fan uploads at 25 or
30 fps of a 24 fps film) shows, every few frames, a mix of two drawings: a double image. A
decoder trained on it learns to draw double images. Such a frame N lies, pixel by pixel, on the
straight line from the frame before (A) to the frame after (B): N = A + m (B - A) with one mix m
for the whole picture. The rule (`is_blend`) looks only where A and B differ by more than a
small move explains (a pixel of B that is outside the range of A's 3 x 3 neighbourhood, or the
other way round: a one-pixel move at 128 pixels wide, a slow pan over soft shading, is no
change), and asks that there

- the fitted mix is well inside (0, 1): N is neither A nor B (a held drawing, drawn on twos,
  shows A or B, never a mix of them);
- most of those pixels lie in the middle of their way from A to B: a moved edge puts a pixel
  at A's value or at B's, a blend puts it between;
- the straight line explains N: what it leaves is a small share of how far A and B are apart.

A frame whose neighbours differ by less than `blending.min_changed` of their pixels is not
judged: a held drawing, or a still shot. A fade (B is A made darker or brighter: one gain and
offset explain B from A) is not judged either: every frame of a fade is such a mix, and the
quality rule's `fade` reason owns it. Dissolves between shots are cut out of clips by scene
detection (stages/scenes/blends.py) before any clip holds them.

`BlendedFrames` judges each decoded frame once its next frame is decoded, on a 128-pixel-wide
grey copy of the detection picture, and gives a clip window's `blended`: the share of the
window's frames that are lone mixes (a mix next to another mix is a gradual change, not a
conversion). The quality rule (stages/quality/reject.py) turns it into the
`blended` reason. docs/sources.md has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pyarrow as pa

from core.settings import ConfigError, Settings
from stages.base import ClipStage, Frame, register_clip_stage

JUDGED_WIDTH = 128  # pixels across the picture the rule looks at


@dataclass
class BlendingConfig(Settings):
    """How frames mixed from their neighbours are found (stages/sources/blending.py)."""

    enabled: bool = True
    """Judge every decoded frame and store each clip's `blended` share."""
    change_levels: float = 30.0
    """Grey levels (0-255) by which A and B must differ at a pixel, beyond what a one-pixel
    move explains, for the pixel to count as changed."""
    min_changed: float = 0.003
    """A frame is judged only when at least this share of its pixels changed from the frame
    before it to the frame after it."""
    mix_range: tuple[float, float] = (0.2, 0.8)
    """The fitted mix m (N = A + m (B - A)) a blend has: away from 0 and 1 (N is A or B)."""
    min_middle: float = 0.7
    """Share of the changed pixels that must lie in the middle of their way from A to B (their
    own mix between 0.15 and 0.85)."""
    min_fit: float = 0.88
    """1 - (what the straight line leaves) / (how far A and B are apart), over the changed
    pixels, that a blend reaches at least."""
    max_fade_fit: float = 0.3
    """A frame is not judged when one gain and offset explain B from A this well (what they
    leave, over how far A and B are apart, is at most this): a fade, not a mix of drawings."""

    def validate(self) -> None:
        low, high = self.mix_range
        if not 0.0 <= low < high <= 1.0:
            raise ConfigError(
                f"blending.mix_range must be 0 <= low < high <= 1, got {self.mix_range}"
            )
        if not 0.0 < self.min_changed < 1.0:
            raise ConfigError(f"blending.min_changed must be in (0, 1), got {self.min_changed}")
        if self.change_levels < 0:
            raise ConfigError(f"blending.change_levels must be 0 or more, got {self.change_levels}")
        for name in ("min_middle", "min_fit", "max_fade_fit"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"blending.{name} must be in [0, 1], got {getattr(self, name)}")


def judged_picture(grey: np.ndarray) -> np.ndarray:
    """The detection picture (grey uint8) at JUDGED_WIDTH across, as float32."""
    height, width = grey.shape
    if width > JUDGED_WIDTH:
        size = (JUDGED_WIDTH, max(2, round(height * JUDGED_WIDTH / width)))
        grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA)
    return grey.astype(np.float32)


Range = tuple[np.ndarray, np.ndarray]  # a picture's 3 x 3 neighbourhood maximum and minimum


def neighbourhood_range(picture: np.ndarray) -> Range:
    """Each pixel's 3 x 3 neighbourhood maximum and minimum (computed once a frame: each frame is
    the frame after one judged frame and the frame before the next)."""
    kernel = np.ones((3, 3), np.uint8)
    return cv2.dilate(picture, kernel), cv2.erode(picture, kernel)


def changed_pixels(
    a: np.ndarray, b: np.ndarray, levels: float, ranges: tuple[Range, Range] | None = None
) -> np.ndarray:
    """Where B (or A) is outside the range of the other's 3 x 3 neighbourhood by more than
    `levels`: a change a one-pixel move does not explain."""
    range_a, range_b = ranges or (neighbourhood_range(a), neighbourhood_range(b))
    out = np.zeros(a.shape, bool)
    for (high, low), y in ((range_a, b), (range_b, a)):
        out |= (y > high + levels) | (y < low - levels)
    return out


def is_blend(
    a: np.ndarray,
    n: np.ndarray,
    b: np.ndarray,
    config: BlendingConfig,
    ranges: tuple[Range, Range] | None = None,
) -> bool | None:
    """Whether N is a mix of the frames either side of it, A and B (float32 grey pictures of one
    size; `ranges`: A's and B's neighbourhood_range, when known); None when it cannot be judged:
    A and B alike, or a mix that is a fade (tested last: most frames fail the mix tests first)."""
    changed = changed_pixels(a, b, config.change_levels, ranges)
    if changed.mean() < config.min_changed:
        return None
    d, a_, n_ = (b - a)[changed], a[changed], n[changed]
    apart = float(np.abs(d).sum())
    mix = float(((n_ - a_) * d).sum() / (d * d).sum())
    low, high = config.mix_range
    if not low <= mix <= high:
        return False
    own = (n_ - a_) / d
    middle = float(((own > 0.15) & (own < 0.85)).mean())
    fit = 1.0 - float(np.abs(n_ - a_ - mix * d).sum()) / apart
    if middle < config.min_middle or fit < config.min_fit:
        return False
    return None if _is_fade(a, b, config) else True


def _is_fade(a: np.ndarray, b: np.ndarray, config: BlendingConfig) -> bool:
    """One gain and offset explain B from A (least squares over the whole picture)."""
    x, y = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    spread = x.var()
    apart = float(np.abs(y - x).mean())
    if spread == 0.0 or apart == 0.0:
        return False
    gain = float(((x - x.mean()) * (y - y.mean())).mean() / spread)
    left = np.abs(y - (y.mean() + gain * (x - x.mean()))).mean()
    return float(left) / apart <= config.max_fade_fit


class BlendedFrames:
    """The frame-level detector: fed every decoded frame in order (`process`), it judges each
    frame once the next one arrives, and answers for a clip window (`share`). Frames that a
    field restoration left out never arrive: a frame's neighbours are the restored ones.

    Only a lone mix counts: a rate conversion mixes two drawings into one frame between clean
    ones, while a frame whose neighbour is a mix as well is part of a gradual change (a light
    ramp, a slow dissolve inside a shot, a glow), in which every frame lies between the others."""

    # A frame is judged once the frame after it arrives, and a mix is known to be lone once the
    # frame after that is judged too: a window's share is final two frames after its last.
    lag = 2

    def __init__(self, config: BlendingConfig):
        self.config = config
        self.recent: list[tuple[int, np.ndarray, Range]] = []  # (index, picture, its range)
        self.mixes: set[int] = set()  # frames that are a mix of their neighbours
        self.in_runs: set[int] = set()  # those of them next to another mix

    def process(self, frame: Frame) -> None:
        picture = judged_picture(frame.grey())
        self.recent.append((frame.index, picture, neighbourhood_range(picture)))
        if len(self.recent) < 3:
            return
        (before, a, range_a), (index, n, _), (_, b, range_b) = self.recent
        same_size = a.shape == n.shape == b.shape
        if same_size and is_blend(a, n, b, self.config, (range_a, range_b)):
            self.mixes.add(index)
            if before in self.mixes:
                self.in_runs.update((before, index))
        del self.recent[0]

    def blends(self) -> set[int]:
        """The lone mixes judged so far: the frames a blending rate conversion made."""
        return self.mixes - self.in_runs

    def share(self, start: int, stop: int) -> float:
        """The share of the frames start..stop-1 that are lone mixes."""
        if stop <= start:
            return 0.0
        lone = sum(i in self.mixes and i not in self.in_runs for i in range(start, stop))
        return lone / (stop - start)


BLENDING_COLUMNS = (pa.field("blended", pa.float32()),)


def blended_frames(settings: BlendingConfig) -> BlendedFrames | None:
    """The detector a segment runs, or None when `blending.enabled` is off."""
    return BlendedFrames(settings) if settings.enabled else None


@register_clip_stage("blending", settings=BlendingConfig, columns=BLENDING_COLUMNS, order=41)
def blending_stage(settings: BlendingConfig) -> ClipStage | None:
    """Declares the `blended` column and the `blending` section. The measure needs every frame,
    not a clip's 16 samples, so the segment (pipeline/running/segments.py) runs BlendedFrames
    while it decodes and fills `blended` as each clip is cut: nothing is left to do per clip."""
    return None
