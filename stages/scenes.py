"""Scene detection with PySceneDetect, fed one frame at a time.

The pipeline decodes each frame once and hands this stage a small BGR copy of the cropped picture,
so detection never decodes the film itself. Detectors report a cut a few frames after it happened
(`lag`); the segment worker holds that many frames back before cutting clips.
"""

from __future__ import annotations

from dataclasses import dataclass

from scenedetect import FrameTimecode
from scenedetect.detectors import (
    AdaptiveDetector,
    ContentDetector,
    HashDetector,
    HistogramDetector,
    ThresholdDetector,
)

from core.settings import Settings, check_choice
from stages.base import Frame

# name -> (detector class, name of its main threshold argument)
DETECTORS = {
    "adaptive": (AdaptiveDetector, "adaptive_threshold"),
    "content": (ContentDetector, "threshold"),
    "hash": (HashDetector, "threshold"),
    "histogram": (HistogramDetector, "threshold"),
    "threshold": (ThresholdDetector, "threshold"),
}


@dataclass
class SceneConfig(Settings):
    detector: str = "adaptive"
    """PySceneDetect detector: adaptive, content, hash, histogram or threshold."""
    threshold: float | None = None
    """The detector's main threshold (adaptive_threshold for adaptive); None keeps its default."""
    min_scene_len: int = 15
    """Frames that must pass after a cut before another can be reported (PySceneDetect's)."""
    options: dict | None = None
    """Further keyword arguments for the detector class, e.g. {window_width: 3}."""
    width: int = 256
    """Frames are scaled to this width for detection (PySceneDetect's own default effective width)."""
    lag_seconds: float = 0.0
    """Extra time frames wait before clips are cut, for detectors that report a cut later than
    their own window (the threshold detector places a fade's cut mid-fade but reports it when the
    fade ends). summary.json counts late_cuts: raise this if it is not 0."""

    def validate(self) -> None:
        check_choice("scenes", "detector", self.detector, DETECTORS)


class SceneCuts:
    """A frame-level stage: `process(frame)` returns the cut frame indices this frame confirmed.

    A cut at index c means frame c starts a new scene. `finish(end)` after the last frame flushes
    the cuts the detector still holds.
    """

    def __init__(self, config: SceneConfig, fps: float):
        config.validate()
        cls, threshold_name = DETECTORS[config.detector]
        kwargs = dict(config.options or {})
        kwargs["min_scene_len"] = config.min_scene_len
        if config.threshold is not None:
            kwargs[threshold_name] = config.threshold
        self.detector = cls(**kwargs)
        self.fps = fps
        self.extra_lag = int(round(config.lag_seconds * fps))

    @property
    def lag(self) -> int:
        """Frames a cut can be reported after the frame that starts the new scene."""
        return int(getattr(self.detector, "event_buffer_length", 0)) + 1 + self.extra_lag

    def process(self, frame: Frame) -> list[int]:
        found = self.detector.process_frame(FrameTimecode(frame.index, self.fps), frame.small())
        return [tc.frame_num for tc in found]

    def finish(self, end: int) -> list[int]:
        found = self.detector.post_process(FrameTimecode(end - 1, self.fps))
        return [tc.frame_num for tc in found or []]
