"""Encode a clip's frames into the bytes a shard stores: an H.264 mp4 and the first frame image.

This is the last stage that needs `frames`; it releases them so a worker holds at most one
clip's pixels at a time.
"""

from __future__ import annotations

import pyarrow as pa

from core.frames import as_clip_frames
from core.record import Clip
from core.video import encode_bgr_image, encode_mp4
from stages.base import ClipStage, register_clip_stage
from stages.clips import ClipConfig


class EncodeMedia(ClipStage):
    name = "encode"

    def __init__(self, config: ClipConfig | None = None):
        self.config = config or ClipConfig()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise ValueError(f"clip {clip.clip_id} has no frames to encode")
        frames = as_clip_frames(clip.frames)
        clip.video = encode_mp4(frames, clip.fps, crf=self.config.crf, preset=self.config.preset)
        clip.first_frame = encode_bgr_image(frames.first_bgr(), self.config.image_format)
        clip.frames = None
        return clip


MEDIA_COLUMNS = (pa.field("video", pa.binary()), pa.field("first_frame", pa.binary()))


@register_clip_stage(
    "encode", settings=ClipConfig, section="clips", columns=MEDIA_COLUMNS, order=100
)
def encode_stage(settings: ClipConfig) -> ClipStage:
    """Last: it turns the frames into the stored bytes and releases them."""
    return EncodeMedia(settings)
