"""The cut detectors `scenes.detector` names: PySceneDetect's, with frame scores taken by OpenCV,
and the adaptive rule on the window's median that judges anime from drawing to drawing (the hold
rule: frames that hold the previous drawing stay out of the window)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

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

from stages.scenes.similarity import colour_distance


class _OpenCvScore:
    """ContentDetector's frame score with each channel's mean absolute difference taken by
    OpenCV instead of numpy's int32 arithmetic: one absdiff of the two HSV pictures, whose
    per-channel sums (`sumElems`) are the hue, saturation and value sums the library takes
    plane by plane. Both sum the same integers exactly, so scores and cuts are identical
    (tests/test_frames.py compares them); this takes a fifth of the library's time, and
    splitting the HSV picture into planes (which the library does) would cost as much again as
    the difference itself. With a stats manager or an edge weight the library's own computation
    runs."""

    _previous_hsv: np.ndarray | None = None

    def _calculate_frame_score(self, timecode: FrameTimecode, frame_img: np.ndarray) -> float:
        weights = self._weights  # type: ignore[attr-defined]
        if self.stats_manager is not None or weights.delta_edges:  # type: ignore[attr-defined]
            return super()._calculate_frame_score(timecode, frame_img)  # type: ignore[misc]
        hsv = cv2.cvtColor(frame_img, cv2.COLOR_BGR2HSV)
        previous, self._previous_hsv = self._previous_hsv, hsv
        if previous is None:
            return 0.0
        pixels = float(hsv.shape[0] * hsv.shape[1])
        hue, sat, lum, _ = cv2.sumElems(cv2.absdiff(hsv, previous))
        components = (hue / pixels, sat / pixels, lum / pixels, 0.0)
        return sum(c * w for c, w in zip(components, weights)) / sum(abs(w) for w in weights)


class FastAdaptiveDetector(_OpenCvScore, AdaptiveDetector):
    """PySceneDetect's AdaptiveDetector, scores computed as in `_OpenCvScore`."""


class FastContentDetector(_OpenCvScore, ContentDetector):
    """PySceneDetect's ContentDetector, scores computed as in `_OpenCvScore`."""


class MedianAdaptiveDetector(_OpenCvScore, ContentDetector):
    """PySceneDetect's adaptive rule with the window's median in place of its mean (scores as in
    `_OpenCvScore`), judged between drawings rather than frames.

    The adaptive detector calls frame c a cut when its content score is `adaptive_threshold`
    times the average score of the `window_width` frames on each side. Two cuts a frame or two
    apart (a one-frame insert, a cut to black and out of it) each sit in the other's window and
    raise its average, so one of them is missed and a clip spans it. The median of the window
    ignores one or two such neighbours; on camera motion (all scores alike) the two rules agree.

    Anime is drawn on twos and threes: each drawing is shown for two or three frames, so frame by
    frame the scores read 0, 0, X, 0, 0, X, ... and every new drawing is `X / 0`, a cut, however
    alike the drawings are. A frame that holds the previous drawing (`process_frame(...,
    held=True)`, the motion stage's held-pair test, and a score under `min_content_val`, so it
    could not be a cut itself) therefore does not enter the window, up to `hold_frames - 1` of
    them in a row: the window then holds the changes from drawing to drawing, and a new drawing
    is a cut only when it changes `adaptive_threshold` times more than the drawings around it.
    The frames of a longer hold enter from the `hold_frames`-th on, so a still shot still reads
    as still, and the window never reaches more than `window_width * hold_frames` frames ahead
    (`event_buffer_length`). Footage without held frames is judged frame by frame, as before.
    """

    SMALL = 1 / 3  # a change under this share of min_content_val is no new drawing

    def __init__(
        self,
        adaptive_threshold: float = 3.0,
        min_scene_len: int = 1,
        window_width: int = 2,
        min_content_val: float = 15.0,
        hold_frames: int = 1,
        palette_ratio: float = 1.7,
        palette_change: float = 0.35,
        **content_options,
    ):
        if window_width < 1:
            raise ValueError("window_width must be at least 1")
        # the content rule only scores frames here: a threshold of 255 never cuts by itself
        super().__init__(threshold=255.0, min_scene_len=0, **content_options)
        self.adaptive_threshold, self.min_content_val = adaptive_threshold, min_content_val
        self.window_width, self.min_gap = window_width, min_scene_len
        self.hold_frames = max(1, hold_frames)
        self.palette_ratio, self.palette_change = palette_ratio, palette_change
        # (frame, score, the frame before it and it, for a palette change)
        self._window: list[tuple[FrameTimecode, float, tuple[np.ndarray, np.ndarray] | None]] = []
        self._previous: tuple[np.ndarray, bool] | None = None  # the last frame, and held?
        self._last_cut: int | None = None
        self._held_run = 0  # held frames left out of the window since the last one entered
        self.decided = -1  # the latest frame judged: no cut at or before it is still to come

    @property
    def event_buffer_length(self) -> int:
        return self.window_width * self.hold_frames

    def process_frame(
        self,
        timecode: FrameTimecode,
        frame_img: np.ndarray,
        held: Callable[[], bool] | bool = False,
    ):
        """`held`: whether the frame holds the previous drawing, or how to find out (asked only
        for a score between a third of `min_content_val` and `min_content_val`)."""
        super().process_frame(timecode, frame_img)
        if self._frame_score is None:
            return []
        # a frame that changes enough to be a cut is judged, whatever the held test says (it
        # sees little change in dark pictures, where the hue and saturation do change); one
        # that changes far less is part of the hold (a blink, a speck moving on a held drawing)
        score = self._frame_score
        if score >= self.min_content_val:
            held = False
        elif score < self.SMALL * self.min_content_val:
            held = True
        elif callable(held):
            held = held()
        previous, self._previous = self._previous, (frame_img, held)
        if not held:
            self._held_run = 0
        elif self._held_run < self.hold_frames - 1:
            self._held_run += 1
            return []
        # the pictures a palette change is measured between, when it may be asked (`_judge`)
        pair = None
        if previous is not None and self.hold_frames > 1 and score >= self.min_content_val:
            pair = (previous[0], frame_img)
        self._window = [*self._window, (timecode, score, pair)][-(2 * self.window_width + 1) :]
        if len(self._window) < 2 * self.window_width + 1:
            return []
        return self._judge()

    def _judge(self) -> list[FrameTimecode]:
        """Is the middle of the window a cut? Its score is `adaptive_threshold` times the
        median of the others; or, when held frames are left out (`hold_frames` > 1),
        `palette_ratio` times, with a new palette (colour-histogram distance from the frame
        before at least `palette_change`): a cut between two shots drawn on twos or threes whose
        drawings change a lot changes the picture only a few times more than they do, and its
        colours (docs/scenes.md)."""
        target, score, pair = self._window[self.window_width]
        self.decided = target.frame_num
        others = [s for i, (_, s, _) in enumerate(self._window) if i != self.window_width]
        reference = statistics.median(others)  # numpy's, to the bit; a tenth of its cost here
        ratio = 255.0 if reference < 1e-5 else min(score / reference, 255.0)
        far_enough = self._last_cut is None or target.frame_num - self._last_cut >= self.min_gap
        if score < self.min_content_val or not far_enough:
            return []
        if ratio < self.adaptive_threshold:
            # the histograms only where they decide (a tenth of a millisecond a pair)
            if pair is None or ratio < self.palette_ratio:
                return []
            if colour_distance(*pair) < self.palette_change:
                return []
        self._last_cut = target.frame_num
        return [target]


# name -> (detector class, name of its main threshold argument)
DETECTORS = {
    "adaptive": (MedianAdaptiveDetector, "adaptive_threshold"),
    "pyscenedetect-adaptive": (FastAdaptiveDetector, "adaptive_threshold"),
    "content": (FastContentDetector, "threshold"),
    "hash": (HashDetector, "threshold"),
    "histogram": (HistogramDetector, "threshold"),
    "threshold": (ThresholdDetector, "threshold"),
}
