"""Blends (`BlendSpans`): dissolves, fades that never reach a flat picture, short wipes and blur
transitions, found on CPU as transition spans: frames whose every pixel lies between the frames a
fraction of a second before and after them, when those two differ in colour and no cut lies
between them, or frames blurred far below both when those two are different pictures. It costs
about a fifth of decoding (docs/scenes.md).
"""

from __future__ import annotations

import cv2
import numpy as np

from core.frames import block_mean
from stages.base import Frame
from stages.scenes.config import SceneConfig
from stages.scenes.similarity import colour_histogram, edge_likeness, histogram_distance


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
    Or t is a blur between them (`_blurs`, the same cut rule): the outgoing shot blurs out and the
    next blurs in, or a zoom dissolve passes through a blurred frame. Such a frame lies outside
    the pair (the blur spreads both pictures), so the tests above miss it, and its colours stay
    close to both when the shots share a palette. Instead:
    - t's fine detail (`_detail`) is at most `blur_drop` times the sharper one's and
      `BLUR_SOFTER` times the softer one's;
    - t keeps at least `BLUR_CONTRAST` of their contrast (grey-level standard deviation), and
      that is more than a flat picture's (`flat_std`): a fade towards a flat or black picture
      loses its detail and its contrast together, and is the tests above's and the fade rule's;
    - A and B are different pictures: their edge strengths correlate below `blur_likeness`
      (`edge_likeness`); a camera zoom or a focus pull through a blur inside one shot keeps its
      shapes on both sides.
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
    # a blur keeps the picture's contrast: on the blur transitions measured (docs/scenes.md) the
    # blurred frame kept 0.53 to 1.4 times the grey-level spread of its sides
    BLUR_CONTRAST = 0.4
    # the blur (pixels at detection width) that fine detail is measured against: a 5x5 kernel
    # on the 8-bit picture, a third of the cost of an untruncated one on floats
    DETAIL_SIGMA, DETAIL_KERNEL = 1.5, (5, 5)
    # a blur frame's detail against the softer of its two sides (a shot of little detail, a
    # desert or a sky, has little to lose): below this, as well as `blur_drop` of the sharper
    BLUR_SOFTER = 0.6
    BLUR_EDGE = 0.9  # a blur run goes on over the frames with less detail than this share

    def __init__(self, config: SceneConfig, fps: float, cut_lag: int):
        self.enabled = config.blend_gate >= 0
        lags = {max(1, int(round(s * fps))) for s in config.blend_lags_seconds}
        self.lags = sorted(lags) if self.enabled and lags else []
        self.reach = max(self.lags, default=0)
        self.pad = max(0, int(round(config.blend_pad_seconds * fps)))
        self.gate, self.edge_gate = config.blend_gate, config.blend_edge_gate
        self.between, self.mix = config.blend_between, config.blend_mix
        self.blur_drop, self.blur_likeness = config.blur_drop, config.blur_likeness
        # a picture this flat (grey-level spread) has no detail to lose: at least one grey level
        # when flat runs are off (scenes.flat_std negative)
        self.flat_std = max(config.flat_std, 1.0)
        self.cut_lag = cut_lag
        # index -> (float BGR at WIDTH, colour histogram, fine detail, contrast) of the frames a
        # judgement may need
        self.frames: dict[int, tuple[np.ndarray, np.ndarray, float, float]] = {}
        self.cuts: set[int] = set()
        # [first, last] marked frame of the open run, the first frame it marked before them,
        # and whether a blur frame is among them
        self.run: list[int] | None = None
        self.run_edge = 0
        self.run_blurred = False
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
        detail, contrast = self._detail(frame.grey()) if self.blur_drop >= 0 else (0.0, 0.0)
        self.frames[frame.index] = (
            reduced.astype(np.float32),
            colour_histogram(reduced),
            detail,
            contrast,
        )
        return self._judge_up_to(frame.index - self.reach - self.cut_lag)

    def _detail(self, grey: np.ndarray) -> tuple[float, float]:
        """A picture's fine detail (mean absolute difference between its grey levels and their
        Gaussian blur: what a blur takes away) and its contrast (grey-level standard
        deviation)."""
        smooth = cv2.GaussianBlur(grey, self.DETAIL_KERNEL, self.DETAIL_SIGMA)
        spread = cv2.meanStdDev(grey)[1]
        return float(cv2.norm(grey, smooth, cv2.NORM_L1)) / grey.size, float(spread[0, 0])

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
        return now is not None and any(
            self._blends(t, now[0], k, gate) or self._blurs(t, now, k) for k in self.lags
        )

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

    def _blurs(self, t: int, now: tuple, k: int) -> bool:
        """Frame t is blurred far below the different pictures k before and after it (the
        class's docstring)."""
        if self.blur_drop < 0:
            return False
        before, after = self.frames.get(t - k), self.frames.get(t + k)
        if before is None or after is None:
            return False
        sharper, softer = max(before[2], after[2]), min(before[2], after[2])
        if now[2] > self.blur_drop * sharper or now[2] > self.BLUR_SOFTER * softer:
            return False
        if min(now[3], self.BLUR_CONTRAST * min(before[3], after[3])) <= self.flat_std:
            return False
        if not self._blurred_to_cut(t, k):
            return False
        return edge_likeness(before[0], after[0]) < self.blur_likeness

    def _blurred_to_cut(self, t: int, k: int) -> bool:
        """No boundary starts one of the frames (t - k, t + k], or one does and the blur reaches
        it from t's side: the frame next to it on that side has less than `BLUR_SOFTER` of the
        detail of the pair's frame on that side. The cut detector fires inside a blur
        transition, where the pictures switch, and a shot may open blurred and come into focus;
        a hard cut into a soft shot is followed by frames as soft as the cut's."""
        cuts = [c for c in self.cuts if t - k < c <= t + k]
        if not cuts:
            return True
        if len(cuts) > 1:
            return False
        next_to, clean = (cuts[0], t + k) if cuts[0] <= t else (cuts[0] - 1, t - k)
        near, far = self.frames.get(next_to), self.frames.get(clean)
        return near is not None and far is not None and near[2] <= self.BLUR_SOFTER * far[2]

    def _is_blur(self, t: int) -> bool:
        now = self.frames.get(t)
        return now is not None and any(self._blurs(t, now, k) for k in self.lags)

    def _still_blurred(self, t: int, clean: int) -> bool:
        """Frame t, next to a blur run, has less than `BLUR_EDGE` of the fine detail of the
        frame `clean`, the farthest the run may reach (taken to be out of the blur)."""
        now, out = self.frames.get(t), self.frames.get(clean)
        return now is not None and out is not None and now[2] < self.BLUR_EDGE * out[2]

    def _cut_within(self, first: int, last: int) -> bool:
        """A boundary starts one of the frames (first, last]."""
        return any(first < c <= last for c in self.cuts)

    def _take(self, t: int) -> list[int]:
        """Frame t is a blend: it joins the open run (with the frames between), or opens one."""
        run, blurred = self.run, self._is_blur(t)
        if run is not None and t - run[1] <= self.reach and not self._cut_within(run[1], t):
            joined = list(range(run[1] + 1, t + 1))
            run[1] = t
            if blurred and not self.run_blurred:  # its start may be a blur's slow start
                self.run_blurred, edge = True, self.run_edge
                self.run_edge = min(edge, self._edge(run[0], -1, True))
                joined += range(self.run_edge, edge)
            return joined
        out = self._close_run()
        self.run, self.run_blurred = [t, t], blurred
        self.run_edge = self._edge(t, -1, blurred)
        return out + list(range(self.run_edge, t + 1))

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
        return list(range(last + 1, self._edge(last, 1, self.run_blurred) + 1))

    def _edge(self, t: int, step: int, blurred: bool) -> int:
        """The outermost frame of a run whose last (step 1) or first (step -1) blend frame is t:
        up to a boundary within `reach` (a blend that runs into a cut takes every frame to it,
        and `pad` more past it when the cut is within the shortest lag: the blend straddles it),
        else on over the frames that are blends at the lower `edge_gate` (a dissolve's faint
        ends) or, for a run with a blur frame, still blurred (`_still_blurred`: a blur's slow
        start and end), and at least `pad` frames; never more than `reach` frames from t."""
        bound = t + step * self.reach
        near = [c for c in self.cuts if min(t, bound) < c <= max(t, bound)]
        if near:
            cut = max(near) if step < 0 else min(near)
            if abs(cut - t) <= self.lags[0]:  # the blend straddles the cut: it goes on past it
                return max(cut - 1 - self.pad, bound) if step < 0 else min(cut + self.pad, bound)
            return cut if step < 0 else cut - 1
        edge = t
        while edge != bound and (
            self._is_blend(edge + step, self.edge_gate)
            or (blurred and self._still_blurred(edge + step, bound))
        ):
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
