"""Hard cuts, fed one frame at a time (`SceneCuts`): the detector's cuts (stages/scenes/detectors.py)
without those an effect inside a shot explains (a flash, an impact frame, a colour effect).

The pipeline decodes each frame once and hands this stage a small BGR copy of the cropped picture,
so detection never decodes the film itself. Detectors report a cut a few frames after it happened
(`lag`); the segment worker holds that many frames back before cutting clips.

Every cut the detector finds is kept, however close to the previous one: PySceneDetect's
`min_scene_len` (which drops a cut within that many frames of the previous one, so that a clip
could span it) is always 1 here. A cut only ever splits; a false cut costs at most one clip (the
partial window before it), which summary.json counts as a drop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import cv2
import numpy as np
from scenedetect import FrameTimecode

from core.frames import block_mean
from stages.base import Frame
from stages.motion import MotionConfig, is_held
from stages.scenes.config import SceneConfig
from stages.scenes.detectors import DETECTORS, MedianAdaptiveDetector
from stages.scenes.similarity import (
    colour_distance,
    content_difference,
    edge_likeness,
    grey_difference,
    is_black_grey,
)


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
        # every frame's timecode takes its rate from this one: PySceneDetect turns a float rate
        # into a Fraction anew for each timecode (a twentieth of a millisecond a frame)
        self.rate = FrameTimecode(0, fps)
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
        timecode = FrameTimecode(frame.index, self.rate)
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
        found = self.detector.post_process(FrameTimecode(end - 1, self.rate))
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
        return is_black_grey(grey, self.black_luma) or float(grey.std()) <= self.flat_std

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
        if stop - start <= self.FLASH_FRAMES and grey_difference(before, after) < (
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
