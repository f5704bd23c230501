"""The film's sampled pictures: one decode in the film's prepare step, shared by every film-level
pass that looks at the whole film before it is cut (the border crop, the overlay pass; a field
pass can take the same frames).

How many: the overlay pass's work grows with each sampled frame (the text detector runs on two
zones of each), so the count follows the film's length, `seconds_per_sample` of film a sample,
at least `min_samples` and at most `samples`. A 6-second clip needs 8 frames, not 48; a film
over 48 seconds keeps the 48 it always had.

Where from: key frames when the film has enough of them (they decode on their own: nothing else
is decoded); otherwise, for a film of at most `spread_max_frames`, frames spread evenly from one
decoding pass over it (short pieces often have one or two key frames); a longer film with too
few key frames keeps them. Either way the border crop and the overlay pass read the same frames
from one decode: before, a short film was decoded for its key frames and then again for the
overlay pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.video import FrameReader, HeldFrames, upright_grey
from stages.probe import FilmInfo


@dataclass(frozen=True)
class SamplePlan:
    """How many frames to sample and how: `spread` decodes the film once (frames spread evenly);
    otherwise its key frames alone are decoded."""

    count: int
    spread: bool


@dataclass
class FilmSamples:
    """Upright luma planes of frames sampled across the film, their frame indices, and how they
    were taken."""

    frames: list[np.ndarray]
    indices: list[int]
    plan: SamplePlan


def sample_plan(
    film: FilmInfo, samples: int, seconds_per_sample: float, min_samples: int, spread_max: int
) -> SamplePlan:
    """The count (`seconds_per_sample` of film a frame, between `min_samples` and `samples`)
    and the source: key frames when there are enough of them or the film is too long to decode
    once more (over `spread_max` frames), else one spread pass."""
    wanted = math.ceil(film.duration / seconds_per_sample) if seconds_per_sample > 0 else samples
    count = max(1, min(samples, max(min_samples, wanted)))
    spread = film.keyframes < count and film.num_frames <= spread_max
    return SamplePlan(count, spread)


def sample_film(film: FilmInfo, plan: SamplePlan, held: HeldFrames | None = None) -> FilmSamples:
    """The frames `plan` names, from one decode (`held`: the film's frames, decoded already)."""
    if plan.spread:
        found = spread_indexed_frames(film, plan.count, held)
    else:
        found = key_indexed_frames(film, plan.count)
    return FilmSamples([plane for _, plane in found], [index for index, _ in found], plan)


def sample_luma_frames(film: FilmInfo, count: int) -> list[np.ndarray]:
    """Upright luma planes of up to `count` key frames spread evenly over the film.

    Key frames only: they decode on their own, so sampling never decodes the film a second time
    (the segments decode every frame once). Encoders place key frames at scene changes too, so
    they cover the film's variety of shots well."""
    return [plane for _, plane in key_indexed_frames(film, count)]


def key_indexed_frames(film: FilmInfo, count: int) -> list[tuple[int, np.ndarray]]:
    """`sample_luma_frames`' planes with their frame indices."""
    reader = FrameReader(film.path, film.frame_pts)
    frames = reader.keyframes(max(1, count), film.keyframes)
    return list(upright_grey(frames, film.rotation))


def spread_luma_frames(
    film: FilmInfo, count: int, held: HeldFrames | None = None
) -> list[np.ndarray]:
    """Upright luma planes of `count` frames spread evenly over the film, from one decoding
    pass over all of it: for a short film with few key frames (a pass over it costs little).

    The pass skips the frames no other frame refers to, unless wanted (FrameReader `only`): the
    same planes, at 0.9-1.6 instead of 1.4-2.3 CPU-s on the sample film (1253 frames) and 0.2
    instead of 0.3 on bikes.mp4. Should a wanted frame not come out that way (a container whose
    packet timestamps are not its frames'), the pass is made again without skipping. `held`:
    the film's frames, decoded already (core/video.py `HeldFrames`), read instead."""
    return [plane for _, plane in spread_indexed_frames(film, count, held)]


def spread_indexed_frames(
    film: FilmInfo, count: int, held: HeldFrames | None = None
) -> list[tuple[int, np.ndarray]]:
    """`spread_luma_frames`' planes with their frame indices."""
    wanted = spread_indices(film, count)
    for only in (wanted, None):
        reader = held or FrameReader(film.path, film.frame_pts)
        frames = reader.frames(0, max(wanted) + 1, only)
        found = list(upright_grey(((i, f) for i, f in frames if i in wanted), film.rotation))
        if len(found) == len(wanted):
            break
    return found


def spread_indices(film: FilmInfo, count: int) -> set[int]:
    """The indices of `count` frames spread evenly over the film (`spread_luma_frames`')."""
    return {int(i * film.num_frames / count) for i in range(count)}
