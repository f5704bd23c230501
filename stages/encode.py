"""Encode a clip's frames into the bytes a shard stores: an H.264 mp4 and the first frame image.

This is the last stage that needs `frames`; it releases them so a worker holds at most one
clip's pixels at a time.
"""

from __future__ import annotations

from core.record import Clip
from core.video import encode_image, encode_mp4
from stages.base import ClipStage, register_clip_stage
from stages.clips import ClipConfig


class EncodeMedia(ClipStage):
    name = "encode"

    def __init__(self, config: ClipConfig | None = None):
        self.config = config or ClipConfig()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise ValueError(f"clip {clip.clip_id} has no frames to encode")
        clip.video = encode_mp4(
            clip.frames, clip.fps, crf=self.config.crf, preset=self.config.preset
        )
        clip.first_frame = encode_image(clip.frames[0], self.config.image_format)
        clip.frames = None
        return clip


@register_clip_stage("encode", section="clips", order=100)
def encode_stage(settings: ClipConfig) -> ClipStage:
    """Last: it turns the frames into the stored bytes and releases them."""
    return EncodeMedia(settings)
