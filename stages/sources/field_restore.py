"""Restoring a film's progressive pictures while a segment decodes (issue 35).

The field pass (stages/sources/field_pass.py) names a filter chain in its `FieldRecord.restoration`:

- telecined or hybrid: libavfilter's `fieldmatch` (each frame's field woven with the matching
  field of itself or a neighbour, so the frames that wove two pictures are whole again),
  `bwdif` (one picture per frame, `mode=send_frame`) on the frames no match mends (fieldmatch flags them: the interlaced parts of a hybrid
  film, the frames at an edit), then decimation;
- interlaced: `bwdif`, one picture per frame, each frame deinterlaced.

Decimation is our own, not libavfilter's `decimate`: `decimate` gives its frames new timestamps
on a regular grid, which would lose each picture's source frame. In every cycle of five source
frames (by absolute index, so every segment cuts the cycles alike) the frame most like the
one before it is left out when it is a near-duplicate (telecine's repeated picture after
matching), which brings telecined parts back to 23.976 pictures a second. A cycle without one
(a truly interlaced part of a hybrid film) keeps its five frames.

What the indices mean after restoration: every restored picture keeps the index (and time) of
the source frame it was made from (fieldmatch keeps the current frame's timestamp and replaces
one field). A left-out frame is never shown: a clip sample that falls on it shows the kept frame
before it and records that frame's index, as for a one-frame flash (pipeline/running/segments.py). So
clip frame indices are always source frame indices of kept pictures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction

import av
import numpy as np

from core.film import FieldRecord

CYCLE = 5
DUPLICATE_LEVELS = 1.5  # mean grey difference under which a frame repeats the one before it
DIFF_STEP = 4  # the difference is taken on every 4th row and column


class FieldRestorer:
    """Wraps a segment's decoded frames: `frames(source)` yields (index, restored frame) in
    order; `dropped` holds the indices decimation left out, `seconds` the CPU time spent."""

    def __init__(self, record: FieldRecord, time_base: str, fps: float):
        filters = [f for f in (record.restoration or "").split(",") if f]
        self.decimate = "decimate" in filters
        self.filters = [f for f in filters if f != "decimate"]
        self.time_base = Fraction(time_base)
        self.rate = Fraction(fps).limit_denominator(1001)
        self.dropped: set[int] = set()
        self.unmatched = 0  # filtered pictures whose timestamp no source frame had
        self.seconds = 0.0

    def frames(
        self, source: Iterator[tuple[int, av.VideoFrame]]
    ) -> Iterator[tuple[int, av.VideoFrame]]:
        restored = self._filtered(source)
        if self.decimate:
            restored = self._decimated(restored)
        yield from restored

    def _filtered(self, source):
        """Each filtered picture with the index of the source frame whose timestamp it carries
        (the filters keep it, in their own time base); a picture with another timestamp is
        counted in `unmatched` and left out."""
        graph, waiting = None, {}
        for index, frame in source:
            began = time.thread_time()
            if graph is None:
                graph = self._graph(frame)
            waiting[frame.pts] = index
            graph.push(frame)
            out = pulled_frames(graph)
            self.seconds += time.thread_time() - began
            yield from self._matched(out, waiting)
        if graph is None:
            return
        began = time.thread_time()
        graph.push(None)
        out = pulled_frames(graph)
        self.seconds += time.thread_time() - began
        yield from self._matched(out, waiting)

    def _matched(self, pictures, waiting):
        for picture in pictures:
            pts = round(picture.pts * picture.time_base / self.time_base)
            index = waiting.pop(pts, None)
            if index is None:
                self.unmatched += 1
                continue
            yield index, picture

    def _decimated(self, restored):
        cycle: list[tuple[int, av.VideoFrame, float]] = []
        before = None
        for index, picture in restored:
            began = time.thread_time()
            small = _small_luma(picture)
            difference = np.inf if before is None else float(np.abs(small - before).mean())
            before = small
            ready = []
            if cycle and index // CYCLE != cycle[0][0] // CYCLE:
                ready, cycle = self._decide(cycle), []
            cycle.append((index, picture, difference))
            self.seconds += time.thread_time() - began
            yield from ready
        yield from (item[:2] for item in cycle)  # the film's last, short cycle: kept whole

    def _decide(self, cycle):
        """The cycle's frames, less its most repeated one when that is a near-duplicate (full
        cycles only: one cut short by the segment's first frames is kept whole)."""
        keep = [(index, picture) for index, picture, _ in cycle]
        if len(cycle) < CYCLE:
            return keep
        least = min(range(len(cycle)), key=lambda k: cycle[k][2])
        if cycle[least][2] >= DUPLICATE_LEVELS:
            return keep
        self.dropped.add(cycle[least][0])
        return keep[:least] + keep[least + 1 :]

    def _graph(self, frame: av.VideoFrame) -> av.filter.Graph:
        graph = av.filter.Graph()
        tb, rate = self.time_base, self.rate
        buffer = graph.add(
            "buffer",
            f"video_size={frame.width}x{frame.height}:pix_fmt={frame.format.name}"
            f":time_base={tb.numerator}/{tb.denominator}"
            f":frame_rate={rate.numerator}/{rate.denominator}:pixel_aspect=1/1",
        )
        last = buffer
        for spec in self.filters:
            name, _, args = spec.partition("=")
            node = graph.add(name, args or None)
            last.link_to(node)
            last = node
        sink = graph.add("buffersink")
        last.link_to(sink)
        graph.configure()
        return graph


def pulled_frames(graph: av.filter.Graph) -> list:
    """Every frame a filter graph has ready now (none when it waits for input or has ended)."""
    out = []
    while True:
        try:
            out.append(graph.pull())
        except (av.error.BlockingIOError, av.error.EOFError):
            return out


def _small_luma(picture: av.VideoFrame) -> np.ndarray:
    """Every DIFF_STEP-th row and column of the luma plane, as int16."""
    plane = picture.planes[0]
    rows = np.frombuffer(memoryview(plane), np.uint8).reshape(picture.height, plane.line_size)
    return rows[::DIFF_STEP, : picture.width : DIFF_STEP].astype(np.int16)


def restored(record: FieldRecord | None, segment_results: list, fps: float) -> FieldRecord | None:
    """The record with the frames the segments kept, and their rate (the source rate times the
    share kept), once the film is cut; unchanged where nothing was restored."""
    if record is None or record.restoration is None:
        return record
    done = [stats for stats in segment_results if not isinstance(stats, Exception)]
    kept = sum(stats.frames for stats in done)
    dropped = sum(stats.fields_dropped for stats in done)
    rate = fps * kept / (kept + dropped) if kept + dropped else fps
    return record.updated(restored_frames=kept, restored_fps=round(rate, 3))
