"""The one record type that flows through the pipeline: a 2-second clip of a film.

Every stage reads and fills fields of `Clip`; the shard schema (core/schema.py) declares the
same persisted fields with their Arrow types, and tests/test_shards.py keeps the two in step. `frames` is the in-memory payload
(the 16 sampled frames as `core.frames.ClipFrames`: I420 planes that give RGB, luma or small
grey frames on request) and is never written: shards carry `video` (H.264 mp4) and `first_frame`
instead, and stages drop `frames` as soon as the media bytes exist.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from core.frames import ClipFrames

# Changing the namespace changes every clip id: never do it.
CLIP_NAMESPACE = uuid.UUID("6f3b8a52-9c1e-4c55-b0a7-1d2e63f0a9c4")

# a clip's `status`
STATUS_OK = "ok"
STATUS_ERROR = "error"

# a clip's `caption_status` (stages/captioning/stage.py says when each is given)
CAPTION_OK = "ok"
CAPTION_FAILED = "caption_failed"
CAPTION_PENDING = "pending"
SKIPPED_UNUSABLE = "skipped_unusable"  # the quality stage rejected the clip (docs/quality.md)


def caption_status_for(usable: bool, status: str | None) -> str | None:
    """A clip's caption status once its usability is decided (by the quality pass or a review):
    an uncaptioned clip that is not usable says captioning will skip it; one that became usable
    is pending again. Captioned and failed clips keep their status."""
    if not usable and status == CAPTION_PENDING:
        return SKIPPED_UNUSABLE
    if usable and status == SKIPPED_UNUSABLE:
        return CAPTION_PENDING
    return status


SKIPPED_CLIP_ERROR = "skipped_clip_error"
SKIPPED_NO_VIDEO = "skipped_no_video"
SKIPPED_NO_MOTION_LEVEL = "skipped_no_motion_level"
SKIPPED_BAD_VIDEO = "skipped_bad_video"


@dataclass(slots=True)
class Clip:
    # identity and position in the film
    clip_id: str
    film_id: str
    film_name: str
    ip: str
    segment_index: int
    scene_index: int
    clip_index: int
    start_frame: int
    end_frame: int  # exclusive: the first source frame after the 2-second window
    start_time: float
    end_time: float  # exclusive, seconds
    frame_indices: list[int]
    # geometry: crop box in source pixels, then the output size
    crop_x: int
    crop_y: int
    crop_w: int
    crop_h: int
    height: int
    width: int
    num_frames: int
    fps: float  # of the clip (8.0 by default), not of the source
    source_fps: float
    # media
    video: bytes | None = None
    first_frame: bytes | None = None
    # motion (stages/motion.py)
    motion_scope: float | None = None
    motion_level: int | None = None
    motion_backend: str | None = None
    motion_levels_version: str | None = None
    # captions (stages/captioning/stage.py)
    characters: list[str] | None = None
    num_characters: int | None = None
    subject: str | None = None
    motion_description: str | None = None
    environment: str | None = None
    adverb: str | None = None
    social: int | None = None
    entertainment: int | None = None
    stamina: int | None = None
    instruction: str | None = None
    caption_model: str | None = None
    prompt_version: str | None = None
    caption_status: str | None = CAPTION_PENDING  # a clip is born uncaptioned
    caption_raw: str | None = None
    # quality (stages/quality/; docs/quality.md)
    usable: bool = True
    reject_reasons: list[str] = field(default_factory=list)
    duplicate_of: str | None = None  # clip_id of the copy that is kept
    quality_luma_mean: list[float] | None = None  # per frame, grey 0-255
    quality_luma_peak: list[float] | None = None  # per frame, 99th percentile grey 0-255
    quality_text_area: float | None = None  # share 0-1 of the frame marked as text (max)
    quality_hashes: list[int] | None = None  # 64-bit perceptual hashes of a few frames
    quality_version: str | None = None
    # overlays (stages/burned_in/overlays.py; docs/quality.md "Overlays")
    overlay_subtitle_area: float | None = None  # share of the film's subtitle band that is text
    overlay_logo_share: float | None = None  # largest share of a film logo inside the window
    # field structure (stages/sources/fields.py; docs/sources.md)
    combing: float | None = None  # share of comb teeth in a frame's densest band of rows (max)
    blended: float | None = None  # share of the window's frames mixed from their neighbours
    # scores (docs/scores.md): camera motion (stages/scoring/camera.py) and clarity (stages/scoring/clarity.py)
    camera_motion: str | None = None  # static, pan_left, ..., complex
    camera_tx: float | None = None  # px per frame at 480x720, + when the picture slides right
    camera_ty: float | None = None  # + when the picture slides down
    camera_zoom: float | None = None  # scale change per second, + when the picture grows
    camera_rotation: float | None = None  # radians per second
    camera_fit: float | None = None  # share of textured points the camera's motion explains
    clarity: float | None = None  # share of edge steepness a 9-px blur removes (0-1)
    # outcome
    status: str = STATUS_OK
    error: str | None = None
    # the columns of registered stages that the record does not name (stages/base.py)
    extra: dict[str, Any] = field(default_factory=dict)
    # in memory only
    frames: ClipFrames | None = field(default=None, repr=False)

    def to_row(self) -> dict:
        """The persisted fields and the extra columns as a plain dict (one shard row)."""
        return {name: getattr(self, name) for name in persisted_fields()} | self.extra

    @classmethod
    def from_row(cls, row: dict) -> Clip:
        """A clip from a shard row; columns it has no field for are kept in `extra`."""
        known = set(persisted_fields())
        extra = {k: _plain(v) for k, v in row.items() if k not in known}
        return cls(**{k: _plain(v) for k, v in row.items() if k in known}, extra=extra)

    def fail(self, stage: str, message: str) -> None:
        """Mark the clip as failed in `stage`; it is still written, with the reason."""
        self.status = STATUS_ERROR
        note = f"{stage}: {message}"
        self.error = note if not self.error else f"{self.error}; {note}"


def persisted_fields() -> list[str]:
    """The fields that are shard columns: every one but the in-memory payload and `extra`."""
    return [f.name for f in fields(Clip) if f.name not in ("frames", "extra")]


def make_clip_id(
    film_id: str,
    frame_indices: list[int],
    crop: tuple[int, int, int, int],
    size: tuple[int, int],
    resize_mode: str,
) -> str:
    """Deterministic id: the same film content, frames and geometry always give the same id."""
    key = f"{film_id}|{','.join(map(str, frame_indices))}|{crop}|{size}|{resize_mode}"
    return uuid.uuid5(CLIP_NAMESPACE, key).hex


def _plain(value):
    """Arrow/pandas hand back numpy arrays and scalars; the record holds plain Python values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
