"""Field structure (issue 35): the settings of the field pass and its restoration, the one comb
rule, and the clip stage that measures combing on every clip.

A picture woven from two fields shot at different moments shows comb teeth wherever something
moved between them: every other row belongs to the other moment. The rule that finds them
(`teeth`) looks at five rows around each pixel. A pixel is a tooth when it stands out from both
rows next to it (the other field) in the same direction, while the rows two above and two below
(its own field) agree with it, and the rows next to it are teeth the other way round: teeth
come in runs of alternating rows. A thin line one or two pixels tall (hatching, hair, a scan
line with wider gaps) fails both: its own field's rows are the background, not the line, and
the background rows beside it do not stand out.
Where `moved` is given, a tooth also needs the picture to change there, so that a still pattern
of alternating rows (the one progressive picture the five rows cannot tell from combing) is left
out: combing is motion between two fields, and there is none in a still part of a shot.

The clip stage (`CombingStage`, registered, order 40) stores `combing`: the largest share of
comb-tooth pixels among the clip's 16 frames, counted in the densest band of rows. The quality
rule (stages/quality/reject.py) turns it into the `combed` reason. docs/sources.md has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pyarrow as pa

from core.frames import as_clip_frames
from core.record import Clip
from core.settings import ConfigError, Settings
from stages.base import ClipStage, register_clip_stage

TOOTH_LEVELS = 10  # grey levels a row must stand out by (and its own field agree within)
BAND_ROWS = 64  # combing is counted per band of rows this tall (a moving figure, not the sky)
DENSE_RUNS = 64  # more than one pixel in this many in runs: test the own field everywhere


@dataclass
class FieldConfig(Settings):
    """How a film's field structure is found and restored, and how combing is measured."""

    enabled: bool = True
    """Find the film's field structure (progressive, telecined, interlaced or hybrid) in its
    prepare step and restore what is not progressive while cutting."""
    measure_combing: bool = True
    """Measure each clip's comb teeth (the `combing` column, the `combed` reason), whether or
    not the film pass ran: it catches what restoration missed."""
    key_frames: int = 24
    """Key frames looked at first (those the border crop samples already, so a progressive film
    decodes nothing more): a film whose key frames show no comb teeth and whose stream flags
    no interlace is progressive."""
    probes: int = 8
    """Runs of consecutive frames decoded, spread over the film, when the key frames or the
    stream's flags suggest fields: the cadence is read from them."""
    probe_frames: int = 40
    """Frames in each run."""
    combed_share: float = 0.002
    """A frame is combed when more than this share of its pixels (in its densest band of
    rows) are comb teeth."""

    def validate(self) -> None:
        if self.key_frames < 1 or self.probes < 1 or self.probe_frames < 10:
            raise ConfigError(
                "fields: key_frames and probes must be at least 1 and probe_frames at least 10"
            )


def teeth(luma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The comb-tooth pixels of grey pictures (N x H x W, uint8) as (picture, row, column)
    arrays, rows 3 to H - 4, before any motion test.

    A pixel is a tooth when it stands out from the rows next to it (by more than TOOTH_LEVELS,
    the same way up or down), its own field's rows two above and two below agree with it
    (within TOOTH_LEVELS), and the rows next to it are teeth the other way round: teeth come in
    runs of rows that alternate. A lone dark row (a scan line, one line of hatching) does not
    make its neighbours stand out, so it is no tooth.

    Why it is written this way (the same pixels as the rule written out row by row, at about half
    the CPU, test_fields): with d the step from each row to the next, "stands out from both
    neighbours, and they the other way" is four steps alternating in sign, which uint8
    saturating subtractions find over a whole picture; the own-field test, needed only where
    that holds (a few pixels of a progressive picture), is made there alone, or over the whole
    picture where runs are many (a combed picture), which then costs less. One picture at a
    time: its maps stay in the processor's cache, where a stack's do not."""
    if luma.dtype != np.uint8:
        raise TypeError(f"comb teeth are found in uint8 grey pictures, not {luma.dtype}")
    if luma.shape[1] < 7 or not len(luma):
        empty = np.zeros(0, np.intp)
        return empty, empty, empty
    found = [_picture_teeth(np.ascontiguousarray(picture)) for picture in luma]
    pictures = [np.full(len(row), k, np.intp) for k, (row, _) in enumerate(found)]
    rows, columns = zip(*found)
    return np.concatenate(pictures), np.concatenate(rows), np.concatenate(columns)


def _picture_teeth(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`teeth` of one grey picture (H x W, H >= 7): the (row, column) of each tooth."""
    height = len(y)
    up, down = _rises(y[:-1], y[1:]), _rises(y[1:], y[:-1])  # row i to i + 1 steps up / down
    peak = cv2.bitwise_and(up[:-1], down[1:])  # row i + 1 lighter than both its neighbours
    dip = cv2.bitwise_and(down[:-1], up[1:])
    runs = cv2.bitwise_or(  # row i + 2 with peaks (or dips) on both sides: a run of three
        cv2.bitwise_and(peak[:-2], peak[2:]), cv2.bitwise_and(dip[:-2], dip[2:])
    )
    runs = runs[1 : height - 5]  # rows 3 .. H - 4: the own field's rows lie in the picture
    rows = np.flatnonzero(runs.max(axis=1))  # np.nonzero is slow over a whole picture
    dense = np.count_nonzero(runs[rows]) > runs.size // DENSE_RUNS
    if dense:  # a combed picture: the own-field test over the whole picture costs less
        runs = cv2.bitwise_and(runs, _own_field(y)[1 : height - 5])
        rows = np.flatnonzero(runs.max(axis=1))
    local, column = np.nonzero(runs[rows])
    row = rows[local] + 3
    if dense:
        return row, column
    agree = np.ones(len(row), bool)
    for step in range(-1, 4):  # each of rows r - 1 .. r + 3 agrees with the row two above it
        here = y[row + step, column].astype(np.int16)
        agree &= abs(here - y[row + step - 2, column]) <= TOOTH_LEVELS
    return row[agree], column[agree]


def _own_field(y: np.ndarray) -> np.ndarray:
    """Per stacked row r + 2 (as `teeth`'s runs are indexed), 1 where each of rows r + 1 to
    r + 5 agrees with the row two above it (within TOOTH_LEVELS), else 0; the first and last
    rows, whose neighbourhood leaves the stack, are 0 (no tooth lies there)."""
    agrees = cv2.threshold(cv2.absdiff(y[2:], y[:-2]), TOOTH_LEVELS, 1, cv2.THRESH_BINARY_INV)[1]
    count = len(y) - 6  # rows r + 1 .. r + 5 are agrees[r - 1 .. r + 3], for r = 1 .. len - 6
    own = np.zeros((len(y) - 4, y.shape[1]), np.uint8)
    both = cv2.bitwise_and(agrees[:-1], agrees[1:])  # agrees[j] and agrees[j + 1]
    four = cv2.bitwise_and(both[: count + 1], both[2 : count + 3])  # j .. j + 3
    own[1 : count + 1] = cv2.bitwise_and(four[:count], agrees[4 : count + 4])
    return own


def _rises(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 where `b` exceeds `a` by more than TOOTH_LEVELS, else 0 (uint8 pictures)."""
    return cv2.threshold(cv2.subtract(b, a), TOOTH_LEVELS, 1, cv2.THRESH_BINARY)[1]


def band_share(picture: np.ndarray, row: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """The share of tooth pixels (`teeth`'s picture and row of each) in the densest band of
    BAND_ROWS rows of rows 3 to H - 4, per picture of `shape` (N x H x W)."""
    count, height, width = shape
    tall = max(height - 6, 0)
    teeth_in_row = np.bincount(picture * tall + row - 3, minlength=count * tall)
    rows = teeth_in_row.reshape(count, tall) / width  # each row's share of tooth pixels
    band = min(BAND_ROWS, tall)
    if band == 0:
        return np.zeros(count)
    sums = np.cumsum(rows, axis=-1)
    sums = np.concatenate([np.zeros((count, 1)), sums], axis=-1)
    return (sums[..., band:] - sums[..., :-band]).max(axis=-1) / band


def comb_share(luma: np.ndarray, moved: np.ndarray | None = None) -> float:
    """The share of comb-tooth pixels in one grey picture's densest band of BAND_ROWS rows;
    where `moved` (a boolean map of the picture) is given, only teeth where it changes count."""
    picture, row, column = teeth(luma[None])
    if moved is not None:
        kept = moved[row, column]
        picture, row = picture[kept], row[kept]
    return float(band_share(picture, row, (1, *luma.shape))[0])


def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two grey pictures (uint8) differ by more than TOOTH_LEVELS."""
    return cv2.absdiff(np.ascontiguousarray(a), np.ascontiguousarray(b)) > TOOTH_LEVELS


def clip_combing(luma: np.ndarray) -> float:
    """The largest comb share among a clip's frames (N x H x W grey), every other column (teeth
    run across rows); each frame's teeth are counted where it differs from the frame before or
    after it."""
    y = even_columns(luma)
    if len(y) < 2:
        return 0.0
    picture, row, column = teeth(y)
    here = y[picture, row, column].astype(np.int16)
    moved = np.zeros(len(picture), bool)
    for other in (picture - 1, picture + 1):  # the frame before, the frame after
        exists = (other >= 0) & (other < len(y))
        there = y[np.clip(other, 0, len(y) - 1), row, column]
        moved |= exists & (abs(here - there) > TOOTH_LEVELS)
    return float(band_share(picture[moved], row[moved], y.shape).max())


def even_columns(luma: np.ndarray) -> np.ndarray:
    """`luma[:, :, ::2]` as a new contiguous array. Where each row's pixels lie side by side
    and come in pairs, each pair read as one little-endian 16-bit number and cast to 8 bits
    keeps its first pixel: the same bytes at a fifth of numpy's strided copy."""
    if luma.shape[-1] % 2 == 0 and luma.strides[-1] == 1 and luma.strides[-2] % 2 == 0:
        return luma.view("<u2").astype(np.uint8)
    return np.ascontiguousarray(luma[:, :, ::2])


class CombingStage(ClipStage):
    """Stores `combing` (clip_combing of the clip's luma); it decides nothing: the quality rule
    turns it into the `combed` reason."""

    name = "combing"

    def __init__(self, config: FieldConfig):
        self.config = config

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise ValueError(f"clip {clip.clip_id}: combing needs the in-memory frames")
        clip.combing = round(clip_combing(as_clip_frames(clip.frames).luma()), 5)
        return clip


COMBING_COLUMNS = (pa.field("combing", pa.float32()),)


@register_clip_stage("fields", settings=FieldConfig, columns=COMBING_COLUMNS, order=40)
def combing_stage(settings: FieldConfig) -> ClipStage | None:
    """Before overlays, quality and encode (which releases the frames)."""
    return CombingStage(settings) if settings.measure_combing else None
