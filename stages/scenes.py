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
on the first frame after a fade from black instead of on a black frame. The fades themselves, the
frames that steadily darken into a black run or brighten out of it, are transition spans: frames
no clip may hold (`Frame.in_transition`, stages/clips.py). So a shot that opens with a fade-in
keeps its clip, starting where the picture is whole, instead of having it rejected as a fade.

Dissolves, fades that never reach a flat picture and short wipes are transition spans too
(`BlendSpans`): frames whose every pixel lies between the frames a fraction of a second before
and after them, when those two differ in colour and no cut lies between them. It costs about a
fifth of decoding (docs/scenes.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

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

from core.frames import block_mean
from core.settings import Settings, check_choice
from stages.base import Frame
from stages.motion import MotionConfig, is_held


class _OpenCvScore:
    """ContentDetector's frame score with each channel's mean absolute difference taken by
    OpenCV (absdiff, then a sum) instead of numpy's int32 arithmetic. Both sum the same integers
    exactly, so scores and cuts are identical (tests/test_clips.py compares them); this takes a
    fifth of the time (about 20 us against 105 us a frame at 256x108). With a stats manager or an
    edge weight the library's own computation runs."""

    def _calculate_frame_score(self, timecode: FrameTimecode, frame_img: np.ndarray) -> float:
        weights = self._weights  # type: ignore[attr-defined]
        if self.stats_manager is not None or weights.delta_edges:  # type: ignore[attr-defined]
            return super()._calculate_frame_score(timecode, frame_img)  # type: ignore[misc]
        hue, sat, lum = cv2.split(cv2.cvtColor(frame_img, cv2.COLOR_BGR2HSV))
        previous = self._last_frame  # type: ignore[has-type]
        self._last_frame = ContentDetector._FrameData(hue, sat, lum, None)
        if previous is None:
            return 0.0
        pixels = float(hue.shape[0] * hue.shape[1])
        components = [
            cv2.sumElems(cv2.absdiff(now, before))[0] / pixels
            for now, before in ((hue, previous.hue), (sat, previous.sat), (lum, previous.lum))
        ] + [0.0]
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
        reference = float(np.median(others))
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


class SceneCuts:
    """A frame-level stage: `process(frame)` returns the cut frame indices this frame confirmed.

    A cut at index c means frame c starts a new scene. `finish(end)` after the last frame flushes
    the cuts the detector still holds.

    An effect inside a shot gives a detector two cuts, into it and out of it, and would split one
    shot in three: a flash or an impact frame (a white, black or inverted frame or two), or a
    colour effect (the picture turns green over a mood pattern for a moment). Two cuts c1 < c2 at
    most `effect_seconds` apart are dropped, with any between them, when the shot comes back
    after them (`_is_effect`: the frames c1 - 1 and c2 are alike); each cut is held until no
    such second cut can still come. The frames of an effect of one or two frames are
    remembered (`take_flashes`): clip sampling shows the frame before them instead.
    """

    FLASH_MAX_DIFFERENCE = 12.0
    FLASH_FRAMES = 2  # an effect this short is not sampled into clips (impact frames)
    EFFECT_RATIO = 2.0
    EFFECT_MAX_COLOUR = 0.15
    EFFECT_MIN_EDGES = 0.2
    # the motion stage's held test looks at 120x180 frames, where shrinking averages compression
    # noise away; whole-factor block means of the detection copy to about this width do so too,
    # at a tenth of the cost of an area resize to 180
    HELD_CHECK_WIDTH = 128

    def __init__(
        self, config: SceneConfig, fps: float, held_rule: tuple[float, float] | None = None
    ):
        """`held_rule`: (pixel delta, fraction) of the held-pair test, the motion stage's
        (motion.held_pixel_delta, motion.held_max_fraction; their defaults when None)."""
        config.validate()
        cls, threshold_name = DETECTORS[config.detector]
        kwargs = dict(config.options or {})
        kwargs["min_scene_len"] = 1  # never drop a cut for being close to the previous one
        if config.threshold is not None:
            kwargs[threshold_name] = config.threshold
        self.by_drawing = cls is MedianAdaptiveDetector and config.hold_seconds > 0
        if self.by_drawing:
            kwargs.setdefault("hold_frames", max(1, int(round(config.hold_seconds * fps))))
        self.detector = cls(**kwargs)
        self.fps = fps
        self.held_rule = held_rule or (
            MotionConfig.held_pixel_delta,
            MotionConfig.held_max_fraction,
        )
        self.extra_lag = int(round(config.lag_seconds * fps))
        self.effect_frames = max(1, int(round(config.effect_seconds * fps)))
        self.black_luma, self.flat_std = config.black_luma, config.flat_std
        self.held: list[int] = []  # cuts that may still start an effect
        self.flashes: list[int] = []  # flash frames found and not yet taken
        self.judged = -1  # the detector can report no new cut at or before this frame
        self.pictures: deque[tuple[int, np.ndarray]] = deque(maxlen=self.lag + 3)
        self.previous_frame: Frame | None = None  # for the held test

    @property
    def lag(self) -> int:
        """Frames a cut can be reported after the frame that starts the new scene: the
        detector's window, then the next drawing (the frame after it, without holds) judged,
        then the longest effect."""
        window = self._window()
        return (
            window
            + int(getattr(self.detector, "hold_frames", 1))
            + self.effect_frames
            + (self.extra_lag)
        )

    def _window(self) -> int:
        return int(getattr(self.detector, "event_buffer_length", 0))

    def process(self, frame: Frame) -> list[int]:
        self.pictures.append((frame.index, frame.small()))
        timecode = FrameTimecode(frame.index, self.fps)
        if self.by_drawing:
            found = self.detector.process_frame(timecode, frame.small(), self._holds(frame))
        else:
            found = self.detector.process_frame(timecode, frame.small())
        # a detector that does not say how far it has judged reports within its window
        self.judged = getattr(self.detector, "decided", frame.index - self._window() - 1)
        return self._without_effects([tc.frame_num for tc in found])

    def _holds(self, frame: Frame) -> Callable[[], bool]:
        """Whether the frame shows the same drawing as the one before it (stages/motion.py
        is_held), found out when the detector asks (for few frames: most score too high or
        too low for the answer to matter)."""
        previous, self.previous_frame = self.previous_frame, frame
        if previous is None:
            return lambda: False
        return lambda: is_held(
            self._held_size(previous), self._held_size(frame), *self.held_rule, relight=False
        )

    def _held_size(self, frame: Frame) -> np.ndarray:
        grey = frame.grey()
        return block_mean(grey, max(1, grey.shape[1] // self.HELD_CHECK_WIDTH))

    def finish(self, end: int) -> list[int]:
        found = self.detector.post_process(FrameTimecode(end - 1, self.fps))
        self.judged = end + self.effect_frames  # every cut is known
        return self._without_effects([tc.frame_num for tc in found or []])

    def _without_effects(self, cuts: list[int]) -> list[int]:
        """The cuts no effect explains, once no cut that could end an effect started by them
        can still come; the others wait (`held`)."""
        pending, out = sorted(set(self.held + cuts)), []
        while pending and pending[0] + self.effect_frames <= self.judged:
            cut = pending.pop(0)
            ends = [c for c in pending if c - cut <= self.effect_frames and self._is_effect(cut, c)]
            if not ends:
                out.append(cut)
                continue
            pending = [c for c in pending if c > ends[0]]
            if ends[0] - cut <= self.FLASH_FRAMES:
                self.flashes += range(cut, ends[0])
        self.held = pending
        return out

    def take_flashes(self) -> list[int]:
        """The flash frames found since the last call."""
        flashes, self.flashes = self.flashes, []
        return flashes

    def _blank(self, picture: np.ndarray) -> bool:
        """Black or one flat colour (BlackRuns' test)."""
        grey = cv2.cvtColor(picture, cv2.COLOR_BGR2GRAY)
        return _is_black_grey(grey, self.black_luma) or float(grey.std()) <= self.flat_std

    def _is_effect(self, start: int, stop: int) -> bool:
        """Frames [start, stop) are an effect inside one shot: the frames before and after them
        are alike. A flash or an impact frame of one or two frames leaves a picture within
        `FLASH_MAX_DIFFERENCE` grey levels of the one before; a longer effect (or one inside a
        moving shot) comes back to the palette it left (colour-histogram distance at most
        `EFFECT_MAX_COLOUR`) with a change over it `EFFECT_RATIO` times smaller than into and
        out of it, and shows the shot's own edges (`edge_likeness` at least `EFFECT_MIN_EDGES`
        with the frames around it) or none. A cut into another shot and back to the first within `effect_seconds` reads
        the same way (docs/scenes.md), unless the frames around it are black or flat (a
        short shot between black ones)."""
        pictures = dict(self.pictures)
        before, first = pictures.get(start - 1), pictures.get(start)
        last, after = pictures.get(stop - 1), pictures.get(stop)
        if before is None or first is None or last is None or after is None:
            return False
        if stop - start <= self.FLASH_FRAMES and _grey_difference(before, after) < (
            self.FLASH_MAX_DIFFERENCE
        ):
            return True
        if self._blank(before) or self._blank(after):
            return False  # a short shot between black ones is a shot
        across = content_difference(before, after)
        into_and_out = min(content_difference(before, first), content_difference(last, after))
        same_palette = colour_distance(before, after) <= self.EFFECT_MAX_COLOUR
        if not (same_palette and across * self.EFFECT_RATIO <= into_and_out):
            return False
        # the effect shows the shot's own shapes (or nothing, a flash): not another shot's
        return all(
            self._blank(inside) or edge_likeness(inside, outside) >= self.EFFECT_MIN_EDGES
            for inside, outside in ((first, before), (last, after))
        )


def content_difference(a: np.ndarray, b: np.ndarray) -> float:
    """The content detector's score between two BGR pictures: the mean absolute difference of
    hue, saturation and value, averaged (PySceneDetect's default weights)."""
    planes = zip(
        cv2.split(cv2.cvtColor(a, cv2.COLOR_BGR2HSV)), cv2.split(cv2.cvtColor(b, cv2.COLOR_BGR2HSV))
    )
    return sum(float(cv2.absdiff(x, y).mean()) for x, y in planes) / 3.0


def edge_likeness(a: np.ndarray, b: np.ndarray) -> float:
    """Correlation (-1 to 1) of two BGR pictures' edge strengths at 64x36: a picture recoloured
    or inverted keeps its edges (0.3 to 1 on the test films), another shot's are unrelated
    (0 to 0.13 across the cuts measured, docs/scenes.md)."""
    strengths = []
    for picture in (a, b):
        grey = cv2.resize(
            cv2.cvtColor(picture, cv2.COLOR_BGR2GRAY), (64, 36), interpolation=cv2.INTER_AREA
        )
        grey = grey.astype(np.float32)
        edges = cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
        strengths.append(edges.ravel() - edges.mean())
    x, y = strengths
    scale = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / scale if scale > 0 else 0.0


def _grey_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute grey-level difference of two BGR pictures."""
    grey_a, grey_b = (cv2.cvtColor(p, cv2.COLOR_BGR2GRAY) for p in (a, b))
    return float(cv2.absdiff(grey_a, grey_b).mean())


class BlackRuns:
    """A frame-level stage: `process(frame)` returns the scene starts this frame confirms.

    A run of at least `min_frames` blank frames (black, or one flat colour such as white) starts
    a scene at its first frame (reported once the run is long enough, hence `lag`) and at the
    first frame after it. The fade into such a run and the fade out of it are transition frames,
    collected by `take_transition_frames()`: the frames before the run that each come closer to
    its colour by `fade_step` (the fade-out), and the frames after it whose successor is further
    from it by `fade_step` (the fade-in), at most `max_fade` of each.
    """

    def __init__(self, config: SceneConfig, fps: float):
        self.luma, self.flat_std = config.black_luma, config.flat_std
        self.enabled = config.black_min_seconds >= 0
        self.min_frames = max(1, int(round(config.black_min_seconds * fps)))
        self.fade_step = config.fade_step
        trimmed = self.enabled and config.fade_step >= 0
        self.max_fade = max(0, int(round(config.fade_max_seconds * fps))) if trimmed else 0
        self.run_start: int | None = None
        self.run_length = 0
        self.run_colour = 0.0  # mean grey level of the run's latest frame
        self.runs: list[tuple[int, int]] = []  # sustained runs seen: [start, stop)
        # (index, mean, standard deviation) of the latest frames
        self.history: deque[tuple[int, float, float]] = deque(
            maxlen=self.min_frames + self.max_fade + 1
        )
        self.fading_in = False  # the frames after a sustained run may still be its fade-in
        self.transition_frames: list[int] = []

    @property
    def lag(self) -> int:
        return self.min_frames + self.max_fade + 1 if self.enabled else 0

    def take_transition_frames(self) -> list[int]:
        """The fade frames found since the last call."""
        found, self.transition_frames = self.transition_frames, []
        return found

    def process(self, frame: Frame) -> list[int]:
        if not self.enabled:
            return []
        index = frame.index
        grey = frame.grey()
        mean, std = (float(v[0][0]) for v in cv2.meanStdDev(grey))
        self._follow_fade_in(index, mean, std)
        if _is_black_grey(grey, self.luma) or std <= self.flat_std:
            if self.run_start is None:
                self.run_start, self.run_length = index, 0
            self.run_length += 1
            self.run_colour = mean
            if self.run_length == self.min_frames:
                self._mark_fade_out(self.run_start, mean)
                return [self.run_start]
            return []
        sustained = self.run_start is not None and self.run_length >= self.min_frames
        if sustained and self.run_start is not None:
            self.runs.append((self.run_start, index))
            self.fading_in = True
        self.run_start, self.run_length = None, 0
        return [index] if sustained else []

    def _follow_fade_in(self, index: int, mean: float, std: float) -> None:
        """The previous frame is part of a fade-in when this one is further from the run's
        colour by fade_step."""
        previous = self.history[-1] if self.history else None
        self.history.append((index, mean, std))
        if not self.fading_in or previous is None:
            return
        run_end = self.runs[-1][1]
        away = _distance(mean, std, self.run_colour) - _distance(*previous[1:], self.run_colour)
        if away >= self.fade_step and previous[0] - run_end < self.max_fade:
            self.transition_frames.append(previous[0])
        elif previous[0] >= run_end:
            self.fading_in = False

    def _mark_fade_out(self, run_start: int, colour: float) -> None:
        """Frames before the run, back from its start, while each is further from its colour
        than the one after it by fade_step."""
        later = [(i, _distance(m, s, colour)) for i, m, s in self.history if i <= run_start]
        later.reverse()  # the run's start first
        for (index, distance), (_, later_distance) in zip(later[1 : self.max_fade + 1], later):
            if distance < later_distance + self.fade_step:
                break
            self.transition_frames.append(index)

    def finish(self, end: int) -> list[int]:
        """No frame at or after `end`: a run still open is recorded up to it (its start was
        reported already)."""
        if self.run_start is not None and self.run_length >= self.min_frames:
            self.runs.append((self.run_start, end))
        self.run_start, self.run_length = None, 0
        return []

    def frames_within(self, start: int, stop: int) -> int:
        """Frames of sustained black or flat runs inside [start, stop)."""
        return sum(max(0, min(b, stop) - max(a, start)) for a, b in self.runs)


def _distance(mean: float, std: float, colour: float) -> float:
    """How far a frame is from a flat picture of grey level `colour`: along a fade between a
    picture and that colour both terms change linearly, so their sum does."""
    return abs(mean - colour) + std


def _is_black_grey(grey: np.ndarray, luma: float) -> bool:
    """At most 1 % of the pixels brighter than `luma` (the 99th percentile, without sorting)."""
    return int(np.count_nonzero(grey > luma)) <= 0.01 * grey.size


def colour_histogram(image: np.ndarray) -> np.ndarray:
    """A picture's 4x4x4 colour histogram, as shares of its pixels."""
    counts = cv2.calcHist([image], [0, 1, 2], None, [4, 4, 4], [0, 256] * 3).ravel()
    return counts / counts.sum()


def colour_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance (0-1) of two pictures' 4x4x4 colour histograms."""
    return histogram_distance(colour_histogram(a), colour_histogram(b))


def histogram_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance (0-1) of two `colour_histogram`s."""
    return 0.5 * float(np.abs(a - b).sum())


class BlendSpans:
    """A frame-level stage: dissolves, fades through any colour and short wipes, found on CPU as
    frames that are a blend of the frames `k` before and `k` after them (`k` in `lags`), and
    returned by `process` as transition frames (stages/clips.py makes them a span).

    Frame t is a blend of A = frame t-k and B = frame t+k when
    - no boundary (cut, blank run) lies in (t-k, t+k]: the segment tells it every one (`cut`).
      At the shortest lag a pair may hold one: a transition of a few frames can make the cut
      detector fire inside it, and at a true cut t is one of the pair, so not mixed (below);
    - A and B differ in colour: colour-histogram distance at least `gate` (motion inside one
      shot rarely moves a picture's colours that far in a fraction of a second);
    - t lies between them: per pixel |t-A| + |t-B| >= |A-B|, with equality exactly when t's value
      is between A's and B's (a dissolve blends them, a wipe takes one or the other); the share
      sum|A-B| / sum(|t-A| + |t-B|) is at least `between`, where motion scatters t's values
      outside;
    - t is far from both: min(sum|t-A|, sum|t-B|) / sum|A-B| at least `mix` (at a hard cut or
      in a still shot t is one of them);
    - B is not A in another light (`_same_picture`: a lighting change moves every pixel by one
      gain and offset per channel, which is also "between").
    Blend frames closer than the longest lag are joined into one run (no boundary between them).
    A run that comes within `reach` of a boundary takes every frame up to it (half a dissolve
    ended by a cut), and `pad` frames past it when the boundary is within the shortest lag (the
    cut detector fired inside the transition); else its ends go on over the frames that are blends at the lower
    `edge_gate` (a dissolve's faint start and end), and at least `pad` frames. Frames are
    compared at about WIDTH pixels across, block means of the detection copy (`Frame.small`).
    Measured in docs/scenes.md.
    """

    WIDTH = 64
    RELIT = 0.02
    FLAT_SHARE = 0.25

    def __init__(self, config: SceneConfig, fps: float, cut_lag: int):
        self.enabled = config.blend_gate >= 0
        lags = {max(1, int(round(s * fps))) for s in config.blend_lags_seconds}
        self.lags = sorted(lags) if self.enabled and lags else []
        self.reach = max(self.lags, default=0)
        self.pad = max(0, int(round(config.blend_pad_seconds * fps)))
        self.gate, self.edge_gate = config.blend_gate, config.blend_edge_gate
        self.between, self.mix = config.blend_between, config.blend_mix
        self.cut_lag = cut_lag
        # index -> (float BGR at WIDTH, colour histogram) of the frames a judgement may need
        self.frames: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.cuts: set[int] = set()
        self.run: list[int] | None = None  # [first, last] marked frame of the open run
        self.next: int | None = None  # the next frame to judge

    @property
    def lag(self) -> int:
        """Frame t is judged once t + reach and the cut detector's lag after it were decoded; a
        run's end is known (and padded) up to `reach` frames later."""
        if not self.enabled:
            return 0
        return 2 * self.reach + self.cut_lag + 1

    def cut(self, index: int) -> None:
        """Frame `index` starts a scene: no blend is looked for across it."""
        self.cuts.add(index)

    def process(self, frame: Frame) -> list[int]:
        if not self.enabled:
            return []
        small = frame.small()
        reduced = block_mean(small, max(1, small.shape[1] // self.WIDTH))
        self.frames[frame.index] = (reduced.astype(np.float32), colour_histogram(reduced))
        return self._judge_up_to(frame.index - self.reach - self.cut_lag)

    def finish(self, end: int) -> list[int]:
        """No frame at or after `end`; every cut is known."""
        if not self.enabled:
            return []
        return self._judge_up_to(end - 1) + self._close_run()

    def _judge_up_to(self, last: int) -> list[int]:
        found: list[int] = []
        if self.next is None:
            self.next = min(self.frames, default=last + 1)
        while self.next <= last:
            t, self.next = self.next, self.next + 1
            found += self._take(t) if self._is_blend(t, self.gate) else self._passed(t)
            self._forget(self.next - 2 * self.reach - 1)
        return found

    def _forget(self, oldest: int) -> None:
        """Frames and cuts before `oldest` are needed no more (the edge of a run opening at the
        next frame looks `reach` back, from frames `reach` before that)."""
        for index in [i for i in self.frames if i < oldest]:
            del self.frames[index]
        self.cuts = {c for c in self.cuts if c >= oldest}

    def _is_blend(self, t: int, gate: float) -> bool:
        now = self.frames.get(t)
        return now is not None and any(self._blends(t, now[0], k, gate) for k in self.lags)

    def _blends(self, t: int, now: np.ndarray, k: int, gate: float) -> bool:
        before, after = self.frames.get(t - k), self.frames.get(t + k)
        if before is None or after is None:
            return False
        if k != self.lags[0] and self._cut_within(t - k, t + k):
            return False
        if histogram_distance(before[1], after[1]) < gate:
            return False
        a, b = before[0], after[0]
        apart = float(cv2.norm(a, b, cv2.NORM_L1))
        from_a, from_b = float(cv2.norm(now, a, cv2.NORM_L1)), float(cv2.norm(now, b, cv2.NORM_L1))
        if apart <= 0 or apart < self.between * (from_a + from_b):
            return False
        if min(from_a, from_b) < self.mix * apart:
            return False
        return not _same_picture(a, b, self.RELIT, self.FLAT_SHARE)

    def _cut_within(self, first: int, last: int) -> bool:
        """A boundary starts one of the frames (first, last]."""
        return any(first < c <= last for c in self.cuts)

    def _take(self, t: int) -> list[int]:
        """Frame t is a blend: it joins the open run (with the frames between), or opens one."""
        run = self.run
        if run is not None and t - run[1] <= self.reach and not self._cut_within(run[1], t):
            joined = list(range(run[1] + 1, t + 1))
            run[1] = t
            return joined
        out = self._close_run()
        self.run = [t, t]
        return out + list(range(self._edge(t, -1), t + 1))

    def _passed(self, t: int) -> list[int]:
        """Frame t is no blend: the open run ends when no later frame can join it."""
        if self.run is not None and t - self.run[1] >= self.reach:
            return self._close_run()
        return []

    def _close_run(self) -> list[int]:
        """The frames after the open run's last one that still belong to it."""
        if self.run is None:
            return []
        last, self.run = self.run[1], None
        return list(range(last + 1, self._edge(last, 1) + 1))

    def _edge(self, t: int, step: int) -> int:
        """The outermost frame of a run whose last (step 1) or first (step -1) blend frame is t:
        up to a boundary within `reach` (a blend that runs into a cut takes every frame to it,
        and `pad` more past it when the cut is within the shortest lag: the blend straddles it),
        else on over the frames that are blends at the lower `edge_gate` (a dissolve's faint
        ends), and at least `pad` frames; never more than `reach` frames from t."""
        bound = t + step * self.reach
        near = [c for c in self.cuts if min(t, bound) < c <= max(t, bound)]
        if near:
            cut = max(near) if step < 0 else min(near)
            if abs(cut - t) <= self.lags[0]:  # the blend straddles the cut: it goes on past it
                return max(cut - 1 - self.pad, bound) if step < 0 else min(cut + self.pad, bound)
            return cut if step < 0 else cut - 1
        edge = t
        while edge != bound and self._is_blend(edge + step, self.edge_gate):
            edge += step
        if step < 0:
            return max(min(edge, t - self.pad), bound)
        return min(max(edge, t + self.pad), bound)


def _same_picture(a: np.ndarray, b: np.ndarray, relit: float, flat: float) -> bool:
    """B is A in another light: per colour channel an affine change of A's values (gain and
    offset, fitted by least squares over the pixels neither picture clips) explains all but
    `relit` of the squared change from A to B. Not when one of them is nearly flat (contrast
    under `flat` times the other's): that is a fade towards or from a colour, such a change too,
    and a transition."""
    a, b = a.reshape(-1, 3), b.reshape(-1, 3)
    unclipped = ((a > 3) & (a < 252) & (b > 3) & (b < 252)).all(axis=1)
    a, b = a[unclipped].astype(np.float64), b[unclipped].astype(np.float64)
    if len(a) < 16:
        return False
    a_dev, b_dev = a - a.mean(axis=0), b - b.mean(axis=0)
    var_a, var_b = (a_dev**2).sum(axis=0), (b_dev**2).sum(axis=0)
    if min(var_a.sum(), var_b.sum()) <= flat**2 * max(var_a.sum(), var_b.sum()):
        return False
    covariance = (a_dev * b_dev).sum(axis=0)
    unexplained = (var_b - covariance**2 / np.maximum(var_a, 1e-9)).sum()
    return bool(unexplained <= relit * ((b - a) ** 2).sum())
