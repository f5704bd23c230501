"""The field pass (issue 35): a film's field structure, found once in its prepare step.

A DVD or a TV capture may hold its pictures as fields: two half-pictures, the even rows and the
odd rows, each shown for 1/59.94 s. Film animation (24 pictures a second) reaches 29.97 frames a
second by telecine: its pictures are spread over 2, 3, 2, 3 fields (3:2 pulldown; 2:3:3:2 is a
variant), so two frames in five weave two pictures together. Video-made parts (credits, effects,
some TV animation) are truly interlaced: each field is its own moment. A hybrid film has both.

The stream's flags (field order, interlaced frames) say how the fields are stored, not what they
hold, and many files carry wrong ones, so the pictures decide:

1. The key frames the border crop decoded already are looked at for comb teeth
   (stages/sources/fields.py `teeth`). None combed and no interlace in the stream's flags: the film is
   progressive, and the pass has cost next to nothing.
2. Otherwise `fields.probes` runs of `fields.probe_frames` consecutive frames are decoded, spread
   over the film. In each, a frame that moves and shows teeth is tried against its neighbours'
   fields: woven with the field before or after it, is it whole again? A telecined run has
   combed frames that such a match mends, in a fixed place in every five frames; a truly
   interlaced run has combed frames that no match mends, or, where it shows held drawings,
   mended frames at places no telecine puts them (stages/sources/cadence.py). Which weave of
   two neighbouring fields is the cleaner gives the field order.
3. The runs decide the film: progressive, telecined (with its cadence), interlaced (with its
   field order), or hybrid when both telecined and interlaced runs are found. Runs with too few
   mended frames to show a cycle count for neither; where nothing else decides, their combed
   frames are deinterlaced, which keeps the stream's rate.

The answer is a `FieldRecord` (core/film.py, summary.json's `fields`); stages/sources/field_restore.py
restores the film from it while the segments decode.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import av
import cv2
import numpy as np

from core.film import FieldRecord
from core.frames import hann_window
from core.video import FrameReader, HeldFrames, upright_grey
from stages.probe import FilmInfo
from stages.sources.cadence import (
    CADENCE,
    INTERLACED,
    TELECINED,
    UNSURE,
    cadence_name,
    cycle_kind,
)
from stages.sources.fields import FieldConfig, changed, comb_share
from stages.sources.film_samples import sample_luma_frames

MOVING_SHARE = 0.002  # a frame moves when this share of its pixels changed since the frame before
MENDED_SHARE = 0.6  # a run is mended (telecine, or held drawings) when a match mends this share
# of its combed frames
STREAM_ORDERS = {2: "top", 3: "bottom", 4: "top", 5: "bottom"}  # AVFieldOrder: TT BB TB BT
SLOW_MOTION = 1.0  # field rows (or half columns) a frame: less, and a weave cannot be told
SLOW_WOVEN_SHARE = 0.6  # a run without teeth is interlaced when this share of its moving frames
# weaves two moments (a slow crawl)


@dataclass
class _Run:
    """What one probed run of consecutive frames showed."""

    start: int
    stop: int
    moving: int = 0
    combed: int = 0
    mended: int = 0
    mended_at: list[int] = field(default_factory=list)  # the mended combed frames, in order
    order_votes: Counter = field(default_factory=Counter)
    slow_woven: int = 0  # moving frames without teeth whose fields are two moments

    @property
    def kind(self) -> str:
        if self.moving == 0:
            return "still"
        if self.combed <= max(1, self.moving // 20):
            if self.slow_woven >= max(CADENCE, SLOW_WOVEN_SHARE * self.moving):
                return "interlaced"  # a slow crawl: every frame two moments, no teeth
            return "progressive"
        if self.mended >= MENDED_SHARE * self.combed and self.combed <= 0.7 * self.moving:
            return cycle_kind(self.mended_at)  # telecine, or held drawings at the field rate
        return INTERLACED


def find_fields(
    film: FilmInfo,
    key_frames: list[np.ndarray] | None,
    config: FieldConfig,
    runs: list[_Run] | None = None,
    held: HeldFrames | None = None,
) -> FieldRecord:
    """The film's field structure: from the key frames alone when they show no teeth and the
    stream flags no interlace, else from probed runs of frames (`runs`, where the caller has
    them already: `sampled_and_probed`; `held`: the film's frames, decoded already)."""
    stream_order = _stream_field_order(film)
    frames = key_frames if key_frames is not None else sample_luma_frames(film, config.key_frames)
    chosen = _spread(frames, config.key_frames)
    combed = sum(comb_share(_columns(f)) > config.combed_share for f in chosen)
    record = FieldRecord(
        stream_field_order=stream_order,
        key_frames_combed=combed,
        key_frames_seen=len(chosen),
    )
    if combed == 0 and stream_order is None and not _too_few(len(chosen), config):
        return record
    return _decide(record, runs if runs is not None else probe_runs(film, config, held=held))


def _too_few(samples: int, config: FieldConfig) -> bool:
    """Fewer than half the wanted key frames (a short film, long GOPs) are no proof: probe."""
    return 2 * min(samples, config.key_frames) < config.key_frames


def sampled_and_probed(
    film: FilmInfo,
    wanted: Collection[int],
    config: FieldConfig,
    held: HeldFrames | None = None,
) -> tuple[list[np.ndarray], list[int], list[_Run]] | None:
    """For a film that will be probed whatever its samples show (too few of them) and whose
    runs come from one pass: the samples `wanted` (upright grey, by index, as
    film_samples.spread_luma_frames gives them), the index of each (a frame the decoder does
    not give is left out, and only it), and the judged runs, from that one decode. None for
    any other film. A 6-s film was decoded twice in its prepare step, for its samples and then
    for its runs."""
    spans = _spans(film, config)
    if not _too_few(len(wanted), config) or not _one_pass(film, spans):
        return None
    runs, samples = _one_pass_runs(film, spans, config, frozenset(wanted), held)
    return [grey for _, grey in samples], [index for index, _ in samples], runs


def _decide(record: FieldRecord, runs: list[_Run]) -> FieldRecord:
    kinds = _kinds(runs)
    parts = [[run.start, run.stop, kind] for run, kind in zip(runs, kinds)]
    telecined = [run for run, kind in zip(runs, kinds) if kind == TELECINED]
    interlaced = [run for run, kind in zip(runs, kinds) if kind == INTERLACED]
    unsure = [run for run, kind in zip(runs, kinds) if kind == UNSURE]
    if not telecined and not interlaced:
        interlaced = unsure  # combed frames whose places tell nothing: deinterlaced, rate kept
    votes = sum((run.order_votes or Counter() for run in telecined + interlaced), Counter())
    order = votes.most_common(1)[0][0] if votes else (record.stream_field_order or "top")
    if telecined and interlaced:
        structure, restoration = "hybrid", _ivtc(order)
    elif telecined:
        structure, restoration = "telecined", _ivtc(order)
    elif interlaced:
        structure, restoration = "interlaced", _deinterlace(order)
    else:
        return record.updated(parts=parts)
    cadence = cadence_name(run.mended_at for run in telecined) if telecined else None
    return record.updated(
        structure=structure,
        field_order=order,
        cadence=cadence,
        parts=parts,
        restoration=restoration,
    )


def _kinds(runs: list[_Run]) -> list[str]:
    """Each run's kind. Where no run shows a cycle on its own, the mended frames of the runs
    that could not tell (`unsure`, and a progressive run's odd one) are read together: a
    telecined film of held drawings may mend one or two frames a run (the One Piece hybrid
    copy: three in all, at one place), and its unsure runs are telecined when those frames keep
    to one stretch of CYCLE_EVIDENCE (stages/sources/cadence.py)."""
    kinds = [run.kind for run in runs]
    if TELECINED in kinds:
        return kinds
    pooled = [i for run, kind in zip(runs, kinds) if kind != INTERLACED for i in run.mended_at]
    if cycle_kind(pooled) != TELECINED:
        return kinds
    return [TELECINED if kind == UNSURE else kind for kind in kinds]


def _ivtc(order: str) -> str:
    """Field matching, the frames it cannot mend deinterlaced, then decimation (our own:
    stages/sources/field_restore.py)."""
    parity = "tff" if order == "top" else "bff"
    return (
        f"fieldmatch=order={parity}:combmatch=full,bwdif=mode=send_frame:deint=interlaced,decimate"
    )


def _deinterlace(order: str) -> str:
    parity = "tff" if order == "top" else "bff"
    return f"bwdif=mode=send_frame:parity={parity}:deint=all"


def probe_runs(
    film: FilmInfo,
    config: FieldConfig,
    one_pass: bool | None = None,
    held: HeldFrames | None = None,
) -> list[_Run]:
    """The probed runs, judged. Each run is decoded on its own (a seek to the key frame before
    it), or all in `one_pass` from the film's start; None: whichever decodes fewer frames
    (`_one_pass`). A short film has one or two key frames, so each seek decodes it from the
    start again (a 144-frame film's three runs: 275 frames, against 126 in one pass). The frames
    are the same either way. `held`: the film's frames, decoded already, read by the one pass."""
    spans = _spans(film, config)
    if one_pass is None:
        one_pass = _one_pass(film, spans)
    if not one_pass:
        return [
            _judged(start, stop, list(_decoded(film, start, stop)), config) for start, stop in spans
        ]
    return _one_pass_runs(film, spans, config, held=held)[0]


def _spans(film: FilmInfo, config: FieldConfig) -> list[tuple[int, int]]:
    """The probed runs' frames, start..stop - 1 each."""
    return [
        (start, min(film.num_frames, start + config.probe_frames))
        for start in _probe_starts(film, config)
    ]


def _one_pass_runs(
    film: FilmInfo,
    spans: list[tuple[int, int]],
    config: FieldConfig,
    wanted: Collection[int] = frozenset(),
    held: HeldFrames | None = None,
) -> tuple[list[_Run], list[tuple[int, np.ndarray]]]:
    """The runs judged from one pass from the film's start, each as it ends (memory: one run and
    its overlap), and the frames `wanted` on the way (index, upright grey); `held`: the
    film's frames, decoded already, read instead of decoding it."""
    runs: list[_Run] = []
    samples: list[tuple[int, np.ndarray]] = []
    window: list[tuple[int, np.ndarray]] = []  # frames from the first run not judged yet
    stop = max(spans[-1][1], max(wanted, default=-1) + 1)
    reader = held or FrameReader(film.path, film.frame_pts, threads=1)
    # a frame neither wanted nor in a run is decoded (the runs need what comes before them) but
    # never looked at: no grey picture
    looked_at = (
        (index, frame)
        for index, frame in reader.frames(0, stop)
        if index in wanted or any(start <= index < end for start, end in spans)
    )
    for index, grey in upright_grey(looked_at, film.rotation):
        if index in wanted:
            samples.append((index, grey))
        if len(runs) == len(spans) or index < spans[len(runs)][0]:
            continue
        window.append((index, _columns(grey)))
        while len(runs) < len(spans) and index >= spans[len(runs)][1] - 1:
            runs.append(_judged(*spans[len(runs)], window, config))
            if len(runs) < len(spans):
                window = [f for f in window if f[0] >= spans[len(runs)][0]]
    while len(runs) < len(spans):  # the film ended early (a gap at its end)
        runs.append(_judged(*spans[len(runs)], window, config))
    return runs, samples


def _one_pass(film: FilmInfo, spans: list[tuple[int, int]]) -> bool:
    """Whether one pass up to the last run's end decodes fewer frames than a seek for each
    run, taking each seek to decode half a key frame interval before its run."""
    interval = film.num_frames / max(1, film.keyframes)
    return spans[-1][1] <= sum(stop - start + interval / 2 for start, stop in spans)


def _decoded(film: FilmInfo, start: int, stop: int) -> Iterator[tuple[int, np.ndarray]]:
    """Frames start..stop - 1 (index, every other column of the upright luma), one thread."""
    reader = FrameReader(film.path, film.frame_pts, threads=1)
    for index, luma in upright_grey(reader.frames(start, stop), film.rotation):
        yield index, _columns(luma)


def _judged(
    start: int, stop: int, decoded: list[tuple[int, np.ndarray]], config: FieldConfig
) -> _Run:
    """What the run of frames start..stop - 1 among `decoded` (`_decoded`'s) shows."""
    run = _Run(start, stop)
    window = [(index, luma) for index, luma in decoded if start <= index < stop]
    smooth = []  # moving frames without teeth, each with the frame after it
    for k, (index, luma) in enumerate(window):
        previous = window[k - 1][1] if k else None
        following = window[k + 1][1] if k + 1 < len(window) else None
        if previous is None or following is None:
            continue
        moved = changed(luma, previous)
        if moved.mean() < MOVING_SHARE:
            continue
        run.moving += 1
        if comb_share(luma, moved) <= config.combed_share:
            smooth.append((luma, following))
            continue
        run.combed += 1
        _judge_combed(run, index, luma, previous, following, config.combed_share)
    if run.kind == "progressive":
        _judge_slow_run(run, smooth)
    return run


def _judge_slow_run(run: _Run, smooth: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """A run that shows no teeth: how many of its moving frames (`smooth`, each with the frame
    after it) still weave two moments, up to where it can no longer be interlaced."""
    needed = max(CADENCE, math.ceil(SLOW_WOVEN_SHARE * run.moving))
    for left, (luma, following) in zip(range(len(smooth), 0, -1), smooth):
        if run.slow_woven + left < needed:
            return
        _judge_slow(run, luma, following)


def _judge_combed(run, index, luma, previous, following, limit) -> None:
    """Whether a match with a neighbour's field mends a combed frame, and which field order
    the neighbouring fields suggest."""
    matches = (
        _weave(luma, previous),
        _weave(luma, following),
        _weave(previous, luma),
        _weave(following, luma),
    )
    if min(comb_share(m) for m in matches) <= limit:
        run.mended += 1
        run.mended_at.append(index)
    # with top field first, this frame's bottom field and the next frame's top field are one
    # field apart in time; with bottom first, this frame's top and the next frame's bottom
    top_first, bottom_first = (
        comb_share(_weave(following, luma)),
        comb_share(_weave(luma, following)),
    )
    if abs(top_first - bottom_first) > limit:
        run.order_votes["top" if top_first < bottom_first else "bottom"] += 1


def _judge_slow(run: _Run, luma: np.ndarray, following: np.ndarray) -> None:
    """Whether a frame without teeth still weaves two moments: a crawl of 1.5 pixels a field
    puts a woven frame's rows only a row or two out of place. Its bottom field is then moved
    from its top field by half the motion to the next frame's top field (later: top field
    first; earlier: bottom first), where a progressive frame's fields show one moment and are
    moved by nothing but their half row. Only a frame that moves by `SLOW_MOTION` or more as a
    whole can tell: the shifts are the pictures' global ones (phase correlation; the fields'
    own shift only for a frame that moves enough: most of a short film's frames do not, and a
    phase correlation is most of the field pass's time there)."""
    rows = luma.shape[0] // 2
    top, bottom, later = luma[0 : 2 * rows : 2], luma[1 : 2 * rows : 2], following[0 : 2 * rows : 2]
    motion = _global_shift(top, later)
    if motion is None or np.hypot(*motion) < SLOW_MOTION:
        return
    between = _global_shift(top, bottom)
    if between is None:
        return
    between[1] += 0.5  # a bottom row lies half a field row below the top row of its index
    still = np.hypot(*between)
    after, before = np.hypot(*(between - motion / 2)), np.hypot(*(between + motion / 2))
    if min(after, before) < still:
        run.slow_woven += 1
        run.order_votes["top" if after < before else "bottom"] += 1


def _global_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """(dx, dy) that moves picture `a` onto `b` as a whole (OpenCV's phase correlation, Hann
    window), or None when the correlation has no clear peak."""
    window = hann_window(*a.shape[:2])
    (dx, dy), response = cv2.phaseCorrelate(a.astype(np.float32), b.astype(np.float32), window)
    return np.array([dx, dy]) if np.isfinite(response) and response >= 0.1 else None


def _weave(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """A picture of `top`'s even rows and `bottom`'s odd rows."""
    woven = top.copy()
    woven[1::2] = bottom[1::2]
    return woven


def _columns(luma: np.ndarray) -> np.ndarray:
    """Every other column: comb teeth run across rows, so half the columns find them all at
    half the cost (copied once: each test of the picture reads it whole)."""
    return np.ascontiguousarray(luma[:, ::2])


def _spread(frames: list[np.ndarray], count: int) -> list[np.ndarray]:
    if len(frames) <= count:
        return list(frames)
    return [frames[int(i * len(frames) / count)] for i in range(count)]


def _probe_starts(film: FilmInfo, config: FieldConfig) -> list[int]:
    span = max(1, film.num_frames - config.probe_frames)
    count = min(config.probes, max(1, film.num_frames // config.probe_frames))
    return sorted({int((i + 0.5) * span / count) for i in range(count)})


def _stream_field_order(film: FilmInfo) -> str | None:
    """What the stream's flags say: 'top' or 'bottom' first, or None (progressive, unknown)."""
    with av.open(film.path) as container:
        return STREAM_ORDERS.get(int(container.streams.video[0].codec_context.field_order or 0))
