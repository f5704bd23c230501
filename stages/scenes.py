"""Scene detection with PySceneDetect, fed one frame at a time.

The pipeline decodes each frame once and hands this stage a small BGR copy of the cropped picture,
so detection never decodes the film itself. Detectors report a cut a few frames after it happened
(`lag`); the segment worker holds that many frames back before cutting clips.

Every cut the detector finds is kept, however close to the previous one: PySceneDetect's
`min_scene_len` (which drops a cut within that many frames of the previous one, so that a clip
could span it) is always 1 here. A cut only ever splits; a false cut costs at most one clip (the
partial window before it), which summary.json counts as a drop.

Sustained black (a fade to or from black, black between shots) is a scene boundary too
(`BlackRuns`): a scene starts where a black run starts and where it ends, so clip windows start
on the first frame after a fade from black instead of on a black frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
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


class MedianAdaptiveDetector(ContentDetector):
    """PySceneDetect's adaptive rule with the window's median in place of its mean.

    The adaptive detector calls frame c a cut when its content score is `adaptive_threshold`
    times the average score of the `window_width` frames on each side. Two cuts a frame or two
    apart (a one-frame insert, a cut to black and out of it) each sit in the other's window and
    raise its average, so one of them is missed and a clip spans it. The median of the window
    ignores one or two such neighbours; on camera motion (all scores alike) the two rules agree.
    """

    def __init__(
        self,
        adaptive_threshold: float = 3.0,
        min_scene_len: int = 1,
        window_width: int = 2,
        min_content_val: float = 15.0,
        **content_options,
    ):
        if window_width < 1:
            raise ValueError("window_width must be at least 1")
        # the content rule only scores frames here: a threshold of 255 never cuts by itself
        super().__init__(threshold=255.0, min_scene_len=0, **content_options)
        self.adaptive_threshold, self.min_content_val = adaptive_threshold, min_content_val
        self.window_width, self.min_gap = window_width, min_scene_len
        self._window: list[tuple[FrameTimecode, float]] = []
        self._last_cut: int | None = None

    @property
    def event_buffer_length(self) -> int:
        return self.window_width

    def process_frame(self, timecode: FrameTimecode, frame_img: np.ndarray) -> list:
        super().process_frame(timecode, frame_img)
        if self._frame_score is None:
            return []
        self._window = [*self._window, (timecode, self._frame_score)][
            -(2 * self.window_width + 1) :
        ]
        if len(self._window) < 2 * self.window_width + 1:
            return []
        target, score = self._window[self.window_width]
        others = [s for i, (_, s) in enumerate(self._window) if i != self.window_width]
        reference = float(np.median(others))
        ratio = 255.0 if reference < 1e-5 else min(score / reference, 255.0)
        far_enough = self._last_cut is None or target.frame_num - self._last_cut >= self.min_gap
        if ratio >= self.adaptive_threshold and score >= self.min_content_val and far_enough:
            self._last_cut = target.frame_num
            return [target]
        return []


# name -> (detector class, name of its main threshold argument)
DETECTORS = {
    "adaptive": (MedianAdaptiveDetector, "adaptive_threshold"),
    "pyscenedetect-adaptive": (AdaptiveDetector, "adaptive_threshold"),
    "content": (ContentDetector, "threshold"),
    "hash": (HashDetector, "threshold"),
    "histogram": (HistogramDetector, "threshold"),
    "threshold": (ThresholdDetector, "threshold"),
}


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
        kwargs["min_scene_len"] = 1  # never drop a cut for being close to the previous one
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


class BlackRuns:
    """A frame-level stage: `process(frame)` returns the scene starts this frame confirms.

    A run of at least `min_frames` black frames starts a scene at its first frame (reported once
    the run is long enough, hence `lag`) and at the first frame after it.
    """

    def __init__(self, config: SceneConfig, fps: float):
        self.luma = config.black_luma
        self.enabled = config.black_min_seconds >= 0
        self.min_frames = max(1, int(round(config.black_min_seconds * fps)))
        self.run_start: int | None = None
        self.run_length = 0
        self.runs: list[tuple[int, int]] = []  # sustained runs seen: [start, stop)

    @property
    def lag(self) -> int:
        return self.min_frames + 1 if self.enabled else 0

    def process(self, frame: Frame) -> list[int]:
        if not self.enabled:
            return []
        index = frame.index
        if is_black_frame(frame.small(), self.luma):
            if self.run_start is None:
                self.run_start, self.run_length = index, 0
            self.run_length += 1
            return [self.run_start] if self.run_length == self.min_frames else []
        sustained = self.run_start is not None and self.run_length >= self.min_frames
        if sustained and self.run_start is not None:
            self.runs.append((self.run_start, index))
        self.run_start, self.run_length = None, 0
        return [index] if sustained else []

    def finish(self, end: int) -> list[int]:
        """No frame at or after `end`: a run still open is recorded up to it (its start was
        reported already)."""
        if self.run_start is not None and self.run_length >= self.min_frames:
            self.runs.append((self.run_start, end))
        self.run_start, self.run_length = None, 0
        return []

    def frames_within(self, start: int, stop: int) -> int:
        """Frames of sustained black runs inside [start, stop)."""
        return sum(max(0, min(b, stop) - max(a, start)) for a, b in self.runs)


def is_black_frame(bgr: np.ndarray, luma: float) -> bool:
    """At most 1 % of the pixels brighter than `luma` (the 99th percentile, without sorting)."""
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    return int(np.count_nonzero(grey > luma)) <= 0.01 * grey.size
