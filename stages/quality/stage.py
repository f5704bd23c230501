"""The quality stage (issue 13; registered, order 50): while a clip's 16 frames are in memory (no
second decode) it measures and stores the values its decision is later taken from
(stages/quality/reject.py): the brightness series and the frame hashes
(stages/quality/measures.py), and the text area, in-world text left out
(stages/burned_in/text_detector.py, stages/burned_in/in_world_text.py). It decides nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import cv2
import numpy as np
import pyarrow as pa

from core.frames import as_clip_frames
from core.record import Clip
from core.settings import ConfigError, Settings
from stages.base import ClipStage, FilmContext, register_clip_stage
from stages.burned_in.in_world_text import MIN_STILL_TEXT, without_in_world_text
from stages.burned_in.picture_text import (
    LINE_ELONGATION,
    THICKEST_BLOB,
    overlaps,
    without_blobs,
)
from stages.burned_in.text_detector import TextDetector
from stages.quality.measures import LUMA_SIZE, luma_series, perceptual_hash


@dataclass
class QualityConfig(Settings):
    """What the quality stage measures (changing these changes stored values: clips are redone)."""

    enabled: bool = True
    """Measure clip quality while clips are cut; off: every clip is usable, nothing measured."""
    text_model: str | None = None
    """PP-OCRv4 text detection model (ONNX). None: the one shipped inside the rapidocr-onnxruntime
    package (ch_PP-OCRv4_det_infer.onnx, 4.7 MB); or a path to such a file."""
    text_frames: list[int] = field(default_factory=lambda: [8])
    """Frames of the clip (0-15) the text detector looks at, in one batch. The middle frame by
    default: a subtitle on screen at the clip's middle is seen; each further frame costs about
    as much again (the detector is most of the stage's time; docs/quality.md)."""
    text_width: int = 256
    """Frames are shrunk to this width for text detection (the height follows the clip's aspect;
    both are rounded to multiples of 32, as the detector needs: 160x256). It finds a 20-pixel
    subtitle of a 480x720 frame and the sample's small title card; 224 misses the title card,
    128x192 most subtitles (docs/quality.md)."""
    close_text_width: int = 512
    """Text over the middle of the picture, staff credits or lyrics, is 3 to 4 pixels tall at
    `text_width` and reads 0.0. The film pass looks for it in the middle of its samples (at the
    scale of its subtitle bands, at most this width's height, 352 rows:
    stages/burned_in/picture_text.py); a clip in a stretch where they show some is looked at
    again at this width (352x512), and the larger area is stored. The in-world rule's pixel
    settings stay as they are, so at this width they ask for half the motion. 0: never (docs/quality.md
    "Text over the picture")."""
    text_pixel_probability: float = 0.3
    """A pixel is text when the detector's probability exceeds this (PP-OCR's own default)."""
    in_world_min_shift: float = 2.0
    """Text that moves with the picture is in-world and not counted (stages/burned_in/in_world_text.py):
    the picture must shift by more than this many pixels (at the detector's size) between the
    sampled frame and the clip's first or last frame, else nothing can be told apart."""
    in_world_tolerance: float = 1.5
    """...and the text's own shift must be within this many pixels of the picture's."""
    in_world_min_match: float = 0.6
    """...where its patch is found again with at least this normalised correlation."""
    hash_frames: list[int] = field(default_factory=lambda: [0, 5, 10, 15])
    """Frames of the clip whose perceptual hashes are stored for near-duplicate search."""

    def validate(self) -> None:
        for name in ("text_frames", "hash_frames"):
            positions = getattr(self, name)
            if not positions or any(p < 0 for p in positions):
                raise ConfigError(
                    f"quality.{name}={positions}: give one or more frame positions (0-15)"
                )
        if self.close_text_width < 0:
            raise ConfigError(
                f"quality.close_text_width={self.close_text_width}: give a width, or 0 for never"
            )


class QualityError(ValueError):
    """A clip cannot be measured (a missing text model is the detector's `TextModelError`)."""


class QualityStage(ClipStage):
    """Fills the quality_* values of a clip; it decides nothing. The folder pass decides every
    clip from the stored values with the folder's thresholds (`decide`), after the film is
    gathered, so a clip that fails later and a duplicate across films are decided the same way."""

    name = "quality"

    def __init__(self, config: QualityConfig | None = None):
        self.config = config or QualityConfig()
        self.config.validate()
        config = self.config
        self.detector = TextDetector(
            config.text_model, config.text_width, config.text_pixel_probability
        )  # cheap: finds the model file, loads nothing
        self.close = None
        if config.close_text_width > 0:
            self.close = TextDetector(
                config.text_model, config.close_text_width, config.text_pixel_probability
            )
        self.text_spans: list[list[float]] = []

    def for_film(self, film: FilmContext) -> None:
        self.text_spans = film.overlays.text_spans if film.overlays is not None else []

    def setup(self) -> None:
        cv2.setNumThreads(1)  # one worker per core already: OpenCV's threads would oversubscribe
        self.detector.load()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise QualityError(
                f"clip {clip.clip_id}: quality needs the in-memory frames (clip.frames is None)"
            )
        # Its thresholds were measured on RGB frames, so it reads RGB (one conversion of the 16
        # frames, about 6 ms; the luma series could come from `grey()` without it, once the
        # thresholds are checked on luma-made grey).
        frames = as_clip_frames(clip.frames).rgb()
        clip.quality_luma_mean, clip.quality_luma_peak = luma_series(frames)
        clip.quality_text_area = self.text_area(frames)
        if self.close is not None and overlaps(self.text_spans, clip.start_time, clip.end_time):
            close = self.text_area(frames, self.close, without_blobs)
            clip.quality_text_area = max(clip.quality_text_area, close)
        clip.quality_hashes = [perceptual_hash(frames[_at(i, frames)]) for i in self.hash_frames]
        clip.quality_version = self.version
        return clip

    def text_area(
        self,
        frames: np.ndarray,
        detector: TextDetector | None = None,
        kept: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> float:
        """The largest share of a sampled frame marked as text, in-world text left out, seen by
        `detector` (the stage's own at `text_width` when None), of its text pixels those `kept`
        leaves (all when None; the close look leaves out blobs that are no line:
        stages/burned_in/picture_text.py `without_blobs`). Only a frame with text pays for
        the in-world check (two more detector frames, the first and the last): most clips have
        none. It runs whatever the reject threshold, so the stored value means the same under
        every threshold `quality-calibrate` may apply."""
        detector = detector or self.detector
        positions = [_at(i, frames) for i in self.config.text_frames]
        masks = detector.masks([frames[i] for i in positions])
        if kept is not None:
            masks = [kept(mask) for mask in masks]
        if not any(mask.any() for mask in masks):
            return 0.0
        ends = [0, len(frames) - 1]
        greys = {i: _grey(frames[i], detector) for i in {*positions, *ends}}
        others = list(zip([greys[i] for i in ends], detector.masks([frames[i] for i in ends])))
        config = self.config
        return max(
            float(
                without_in_world_text(
                    mask,
                    greys[i],
                    [(grey, other) for (grey, other), end in zip(others, ends) if end != i],
                    config.in_world_min_shift,
                    config.in_world_tolerance,
                    config.in_world_min_match,
                ).mean()
            )
            for i, mask in zip(positions, masks)
        )

    @property
    def hash_frames(self) -> list[int]:
        return self.config.hash_frames

    @property
    def version(self) -> str:
        """What quality_version stores: how the values were measured."""
        hashes = ",".join(map(str, self.config.hash_frames))
        texts = ",".join(map(str, self.config.text_frames))
        detector = self.detector.name
        in_world = (
            f"inworld:s{self.config.in_world_min_shift:g}:t{self.config.in_world_tolerance:g}"
            f":m{self.config.in_world_min_match:g}:k{MIN_STILL_TEXT:g}"
        )
        if self.close is not None:  # the close look of clips in the film's text stretches
            in_world += (
                f";close:{self.close.height}x{self.close.width}@text-spans"
                f":blob{THICKEST_BLOB}x{LINE_ELONGATION:g}"
            )
        return f"luma{LUMA_SIZE[0]}x{LUMA_SIZE[1]};{detector}:f{texts};{in_world};phash64:f{hashes}"


def _grey(frame: np.ndarray, detector: TextDetector) -> np.ndarray:
    """A frame as grey at the detector's size, where its text masks are."""
    size = (detector.width, detector.height)
    return cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), size, interpolation=cv2.INTER_AREA)


def _at(position: int, frames: np.ndarray) -> int:
    return min(position, len(frames) - 1)


# What the stage measures and stores (the decision's columns, usable and reject_reasons, are
# the folder pass's).
QUALITY_COLUMNS = (
    pa.field("quality_luma_mean", pa.list_(pa.float32())),
    pa.field("quality_luma_peak", pa.list_(pa.float32())),
    pa.field("quality_text_area", pa.float32()),
    pa.field("quality_hashes", pa.list_(pa.int64())),
    pa.field("quality_version", pa.string()),
)


@register_clip_stage("quality", settings=QualityConfig, columns=QUALITY_COLUMNS, order=50)
def quality_stage(settings: QualityConfig) -> ClipStage | None:
    """After motion (the static reason reads its scope), before encode (which releases the
    frames)."""
    return QualityStage(settings) if settings.enabled else None
