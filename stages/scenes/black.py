"""Sustained black or flat runs (`BlackRuns`): a fade to or from black, black between shots.

Such a run is a scene boundary: a scene starts where a black run starts and where it ends, so clip
windows start on the first frame after a fade from black instead of on a black frame. The fades
themselves, the frames that steadily darken into a black run or brighten out of it, are transition
spans: frames no clip may hold (`Frame.in_transition`, stages/clips.py). So a shot that opens with
a fade-in keeps its clip, starting where the picture is whole, instead of having it rejected as a
fade.
"""

from __future__ import annotations

from collections import deque

import cv2

from stages.base import Frame
from stages.scenes.config import SceneConfig
from stages.scenes.similarity import is_black_grey


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
        if is_black_grey(grey, self.luma) or std <= self.flat_std:
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
