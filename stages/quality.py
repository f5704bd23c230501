"""Clip quality (issue 13): is a clip fit to caption and to train on, and if not, why.

The stage runs while a clip's 16 frames are in memory (no second decode) and stores what it
measured, so that decisions can be re-taken later from the stored values alone
(`animegamer quality-calibrate`):
- `quality_luma_mean`, `quality_luma_peak`: per frame, the mean and the 99th percentile of the
  grey level (0-255) at 60x90 — black frames, fades and flashes are read from these;
- `quality_text_area`: the largest share of a sampled frame that a real text detector (PP-OCRv4
  detection, ONNX, CPU) marks as text — title cards, credits, burned-in subtitles;
- `quality_hashes`: 64-bit perceptual hashes of a few frames — near-duplicates across clips and
  films are found from these by a dataset-level pass (pipeline/passes/quality.py).

The stage only measures. `decide` is the one function that turns stored values into usable /
reject_reasons (`clip_reasons` gives a clip's own reasons, the folder pass adds duplicates); the
folder pass (pipeline/passes/quality.py) is the one place that calls it.
docs/quality.md gives every rule, unit and threshold, and the figures measured on the sample.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.frames import as_clip_frames
from core.record import STATUS_OK, Clip
from core.settings import ConfigError, Settings
from core.vocabulary import (
    BLACK,
    COMBED,
    DUPLICATE,
    ERROR,
    FADE,
    FLASH,
    LOGO,
    STATIC,
    SUBTITLE,
    TEXT,
)
from stages.base import ClipStage, register_clip_stage, registered_scores
from stages.burned_in.in_world_text import without_in_world_text
from stages.scoring.scores import Score, rejected, score_limits

LUMA_SIZE = (60, 90)  # (h, w) grey copy the brightness values are measured on
HASH_INPUT_SIZE = (120, 180)  # (h, w) grey copy a hashed frame is shrunk from
HASH_SIDE = 32  # frames are shrunk to 32x32 grey for the DCT of the perceptual hash
TEXT_MODEL_PACKAGE = "rapidocr_onnxruntime"
TEXT_MODEL_FILE = "models/ch_PP-OCRv4_det_infer.onnx"


@dataclass
class QualityConfig(Settings):
    """What the quality stage measures (changing these changes stored values: clips are redone)."""

    enabled: bool = True
    """Measure clip quality while clips are cut; off: every clip is usable, nothing measured."""
    text_model: str | None = None
    """PP-OCRv4 text detection model (ONNX). None: the one shipped inside the rapidocr-onnxruntime
    package (ch_PP-OCRv4_det_infer.onnx, 4.7 MB); or a path to such a file."""
    text_frames: list[int] = field(default_factory=lambda: [8])
    """Frames of the clip (0-15) the text detector looks at, in one batch. The middle frame by
    default: a subtitle on screen at the clip's middle is seen; each further frame costs about
    as much again (the detector is most of the stage's time; docs/quality.md)."""
    text_width: int = 256
    """Frames are shrunk to this width for text detection (the height follows the clip's aspect;
    both are rounded to multiples of 32, as the detector needs: 160x256). It finds a 20-pixel
    subtitle of a 480x720 frame and the sample's small title card; 224 misses the title card,
    128x192 most subtitles (docs/quality.md)."""
    text_pixel_probability: float = 0.3
    """A pixel is text when the detector's probability exceeds this (PP-OCR's own default)."""
    in_world_min_shift: float = 2.0
    """Text that moves with the picture is in-world and not counted (stages/burned_in/in_world_text.py):
    the picture must shift by more than this many pixels (at the detector's size) between the
    sampled frame and the clip's first or last frame, else nothing can be told apart."""
    in_world_tolerance: float = 1.5
    """...and the text's own shift must be within this many pixels of the picture's."""
    in_world_min_match: float = 0.6
    """...where its patch is found again with at least this normalised correlation."""
    hash_frames: list[int] = field(default_factory=lambda: [0, 5, 10, 15])
    """Frames of the clip whose perceptual hashes are stored for near-duplicate search."""

    def validate(self) -> None:
        for name in ("text_frames", "hash_frames"):
            positions = getattr(self, name)
            if not positions or any(p < 0 for p in positions):
                raise ConfigError(
                    f"quality.{name}={positions}: give one or more frame positions (0-15)"
                )


@dataclass
class RejectConfig(Settings):
    """Thresholds that turn stored quality values into decisions. They change no stored value:
    `animegamer quality-calibrate` re-applies them to a dataset folder without recomputing."""

    content_fields = ()  # not in the fingerprint: the folder pass re-applies them

    black_luma: float = 32.0
    """A frame is black when 99 % of its pixels are at most this grey level (0-255)."""
    black_max_frames: int = 2
    """A clip is `black` when its first frame is black or more than this many of its frames are."""
    fade_min_ratio: float = 1.6
    """A clip is `fade` when its first or last frame is this many times darker (mean grey + 4)
    than the clip's median frame and the brightness climbs from it to the median steadily."""
    fade_min_steadiness: float = 0.7
    """Share of the climb to the median that goes up (climb / sum of |steps|): 1.0 is a perfectly
    steady fade; a flicker or a dark object crossing the picture is lower."""
    flash_min_jump: float = 48.0
    """A clip is `flash` when one frame is brighter than both neighbours by at least this many grey
    levels (mean). Negative: never."""
    text_max_area: float = 0.004
    """A clip is `text` when a sampled frame has more than this share of its pixels marked as text.
    A one-line subtitle at 720 pixels covers about 0.013, the SINTEL logo 0.015, real shots 0."""
    subtitle_max_area: float = 0.01
    """A clip is `subtitle` when, in a sampled frame, more than this share of the film's subtitle
    band (as the clip shows it) is subtitle-like text (stages/burned_in/overlays.py; docs/quality.md)."""
    logo_max_share: float = 0.1
    """A clip is `logo` when its window shows more than this share of a logo's box."""
    combed_max_share: float = 0.004
    """A clip is `combed` when, in a sampled frame, more than this share of a band of rows
    is comb teeth where the picture moves (stages/sources/fields.py): a frame woven from two moments.
    Measured: telecined frames 0.03 to 0.46, progressive anime at most 0.0003 (docs/sources.md)."""
    reject_static: bool = False
    """Also reject clips whose every frame pair is a held drawing (motion scope 0): `static`.
    Off by default: limited animation holds drawings, and level 1 needs still shots."""
    duplicate_max_distance: float = 12.0
    """Two clips are near-duplicates when the mean Hamming distance of their frame hashes (64
    bits each) is at most this. Measured: a copy re-encoded at a third of the size, crf 32, a
    little brighter, is 7.5 to 9.5 away; different shots are 24 or more (docs/quality.md)."""
    duplicate_within_film: bool = True
    """Also look for duplicates inside one film (recaps, flashbacks, reused animation); clips of
    the same scene are never compared (a long still shot is not a duplicate of itself)."""
    similar_min_cosine: float | None = None
    """Two clips are semantic duplicates (`similar`) when the cosine of their CLIP embeddings
    (clip_scores.model) is at least this. None: off (no CLIP reading has been checked on anime
    yet; docs/scores.md). Same kept-copy rule and scene and film rules as `duplicate`."""
    scores: dict[str, Any] = field(default_factory=dict)
    """Reject clips by their scores (docs/scores.md), {column: limit}: a number score below its
    limit (or above, where it says so), e.g. {clarity: 0.45} rejects as `blurry`; a label score
    when its label is listed, e.g. {camera_motion: [complex]} rejects as `camera`. null switches
    a score's default limit off. Empty: only the scores that declare a default reject."""

    def validate(self) -> None:
        score_limits(registered_scores(), self.scores)

    def score_limits(self) -> dict[str, tuple[Score, Any]]:
        """The score thresholds in force: column -> (the score, its limit)."""
        return score_limits(registered_scores(), self.scores)


# ----------------------------------------------------------------------------- measurements


def small_grey(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """One RGB frame as grey at `size` (h, w).

    Bilinear shrinking samples rather than averages: a fifth of the cost of area averaging, which
    matters at 16 frames per clip; the brightness values are statistics over thousands of such
    samples, and the hash averages its input further down to 32x32."""
    small = cv2.resize(frame, size[::-1], interpolation=cv2.INTER_LINEAR)
    return cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)


def luma_series(frames: np.ndarray) -> tuple[list[float], list[float]]:
    """Per frame: mean and 99th-percentile grey level (0-255), measured at LUMA_SIZE. The
    percentile is the pixel value 1 % of the pixels are brighter than (no interpolation)."""
    flat = np.stack([small_grey(f, LUMA_SIZE) for f in frames]).reshape(len(frames), -1)
    k = int(0.99 * (flat.shape[1] - 1))
    peaks = np.partition(flat, k, axis=1)[:, k]  # a partial sort: the percentile's cost halved
    return [round(float(m), 3) for m in flat.mean(axis=1)], [float(p) for p in peaks]


def perceptual_hash(frame: np.ndarray) -> int:
    """64-bit DCT hash (pHash) of one RGB frame: the signs of the 8x8 lowest frequencies of a
    32x32 grey copy against their median. Global gain and offset, rescaling and re-encoding
    barely move it."""
    grey = small_grey(frame, HASH_INPUT_SIZE)
    small = cv2.resize(grey, (HASH_SIDE, HASH_SIDE), interpolation=cv2.INTER_AREA)
    low = cv2.dct(small.astype(np.float32))[:8, :8].flatten()
    bits = low > np.median(low[1:])  # the DC term (overall brightness) does not set the median
    return int(np.packbits(bits).view(">i8")[0])


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bitwise distance of int64 hashes (broadcasting). Counted on the unsigned view: numpy's
    bitwise_count counts the bits of a signed value's absolute value, which for hashes that
    differ in their top bit is not the number of differing bits."""
    return np.bitwise_count(np.asarray(np.bitwise_xor(a, b)).view(np.uint64))


class TextDetector:
    """PP-OCRv4 text detection (a DB network) through onnxruntime, one thread, detection only.

    `areas(frames)` gives, per RGB frame, the share of its pixels whose text probability exceeds
    the threshold. The frames of a call go through the network as one batch.
    """

    def __init__(self, model: str | None, width: int, probability: float, aspect: float = 1.5):
        self.path = resolve_text_model(model)
        self.width = _multiple_of_32(width)
        self.height = _multiple_of_32(width / aspect)
        self.threshold = probability
        self.name = f"ppocrv4-det:{self.path.stem}@{self.height}x{self.width}:p{probability:g}"
        self._session: Any = None

    def load(self) -> None:
        self._session = _session(str(self.path))

    def areas(self, frames: Sequence[np.ndarray]) -> list[float]:
        return [float(mask.mean()) for mask in self.masks(frames)]

    def masks(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per RGB frame, its text pixels (bool, height x width of the detector's size)."""
        batch = np.stack([self._input(f, (self.width, self.height)) for f in frames])
        return [p[0] > self.threshold for p in self._run(batch)]

    def grey_map(self, grey: np.ndarray) -> np.ndarray:
        """The text probability map of one grey picture at its own size (height and width
        multiples of 32): the overlay pass's zones and bands. The network's input is the grey
        plane as its three channels: the input `_input` makes from the grey picture repeated in
        three channels (the same values: the channels' order does not matter and the size is
        kept), without making and converting that picture (2.7 ms of a 23-36 ms call on a
        96x672 zone)."""
        plane = _to_model_range(grey)
        return self._run(np.ascontiguousarray(np.broadcast_to(plane, (1, 3, *plane.shape))))[0, 0]

    def _run(self, batch: np.ndarray) -> np.ndarray:
        if self._session is None:
            self.load()
        [probability] = self._session.run(None, {self._session.get_inputs()[0].name: batch})
        return probability

    @staticmethod
    def _input(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        # PP-OCR models are trained on BGR scaled to [-1, 1], channels first
        shrinking = size[0] * size[1] < frame.shape[0] * frame.shape[1]
        interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
        small = cv2.resize(frame, size, interpolation=interpolation)
        return np.ascontiguousarray(_to_model_range(small[..., ::-1]).transpose(2, 0, 1))


def _to_model_range(pixels: np.ndarray) -> np.ndarray:
    """8-bit pixels scaled to [-1, 1] as float32, the range PP-OCR's detector was trained on."""
    return pixels.astype(np.float32) / 127.5 - 1.0


@functools.cache
def _session(path: str):
    """One inference session per model file and process: building one takes about half a
    second, and a worker process runs many segments, each with its own stage objects."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # one pipeline worker per core already: the detector's own threads would oversubscribe
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def resolve_text_model(model: str | None) -> Path:
    if model:
        path = Path(model)
        if not path.is_file():
            raise QualityError(f"quality.text_model={model}: no such file")
        return path
    spec = importlib.util.find_spec(TEXT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise QualityError(
            "quality.text_model is not set and the rapidocr-onnxruntime package, which ships the "
            "PP-OCRv4 detection model, is not installed: install it (requirements.lock) or set "
            "quality.text_model to a ch_PP-OCRv4_det_infer.onnx file"
        )
    path = Path(spec.origin).parent / TEXT_MODEL_FILE
    if not path.is_file():
        raise QualityError(f"{path}: the text detection model is missing from rapidocr-onnxruntime")
    return path


def _multiple_of_32(value: float) -> int:
    return max(32, int(round(value / 32)) * 32)


class QualityError(ValueError):
    """A clip cannot be measured, or the quality configuration is unusable."""


# ----------------------------------------------------------------------------- decisions


def is_black(peak: Any, thresholds: RejectConfig) -> Any:
    """Black: the 99th-percentile grey level at most black_luma (a value or an array of them)."""
    return peak <= thresholds.black_luma


def fades(means: np.ndarray, thresholds: RejectConfig) -> np.ndarray:
    """Per row of `means` (clips x frames): a fade from or to dark. The first (or last) frame is
    darker than the clip's median brightness by fade_min_ratio, and the brightness climbs from it
    to the median steadily (no single step makes half the climb: that would be a cut, not a
    fade)."""
    m = means + 4.0  # +4: the ratio of two near-black frames is noise
    median = np.median(m, axis=1)
    rows = np.arange(len(m))
    found = np.zeros(len(m), bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for series in (m, m[:, ::-1]):  # fade in from the start, fade out towards the end
            dark = ~(median / series[:, 0] < thresholds.fade_min_ratio)
            top = np.argmax(series >= median[:, None], axis=1)  # the climb is series[: top + 1]
            rise = series[rows, top] - series[:, 0]
            steps = np.diff(series, axis=1)
            for length in np.unique(top[dark]):  # rows whose climb has `length` steps
                group = np.flatnonzero(dark & (top == length))
                climb = steps[group, :length]
                # np.sum over each row: the same additions, in the same order, as one clip's sum
                steady = rise[group] >= thresholds.fade_min_steadiness * np.abs(climb).sum(axis=1)
                biggest = climb.max(axis=1, initial=0.0)
                found[group] |= steady & (biggest <= 0.5 * rise[group])
    return found


def flashes(means: np.ndarray, thresholds: RejectConfig) -> np.ndarray:
    """Per row of `means` (clips x frames): one frame at least flash_min_jump brighter than both
    neighbours."""
    if thresholds.flash_min_jump < 0 or means.shape[1] < 3:
        return np.zeros(len(means), bool)
    return np.any(frame_jumps(means) >= thresholds.flash_min_jump, axis=1)


def frame_jumps(means: np.ndarray) -> np.ndarray:
    """Per row of `means` (clips x frames, at least 3): how much brighter each inner frame is
    than the brighter of its two neighbours, the measure `flashes` compares with its threshold."""
    return means[:, 1:-1] - np.maximum(means[:, :-2], means[:, 2:])


REASON_COLUMNS = ["status", "quality_luma_peak", "quality_luma_mean", "quality_text_area"]
REASON_COLUMNS += ["overlay_subtitle_area", "overlay_logo_share", "motion_scope", "combing"]


def reason_columns(thresholds: RejectConfig) -> list[str]:
    """The columns a clip's own reasons read: the quality measurements and the thresholded
    scores."""
    return REASON_COLUMNS + list(thresholds.score_limits())


def overlay_limits(thresholds: RejectConfig) -> list[tuple[str, str, float, str]]:
    """The overlay reasons: (reason, the measured column, its threshold, what it measures).
    One table for the rule (`own_reasons`) and for its explanation (`quality_measures`)."""
    return [
        (
            SUBTITLE,
            "overlay_subtitle_area",
            thresholds.subtitle_max_area,
            "subtitle text in the band",
        ),
        (LOGO, "overlay_logo_share", thresholds.logo_max_share, "share of a logo in the window"),
    ]


def field_limits(thresholds: RejectConfig) -> list[tuple[str, str, float, str]]:
    """The field reason, in overlay_limits' terms: comb teeth restoration left (stages/sources/fields.py)."""
    return [(COMBED, "combing", thresholds.combed_max_share, "comb teeth in a band of rows")]


def clip_reasons(row: Mapping, thresholds: RejectConfig) -> list[str]:
    """The reasons a clip is unfit, from its own stored values (no other clip needed).

    `row` is a shard row (or a Clip's `to_row()`); absent measurements give no reason."""
    present = {name: [_plain(row[name])] for name in reason_columns(thresholds) if name in row}
    return own_reasons(pa.table(present) if present else pa.table({"_": [0]}), thresholds)[0]


def own_reasons(table: pa.Table, thresholds: RejectConfig) -> list[list[str]]:
    """Per row of `table` (shard rows; any of REASON_COLUMNS may be absent, and an absent or
    null measurement gives no reason), the reasons the clip is unfit on its own values, in the
    order error, black, fade, flash, text, subtitle, logo, combed, static, then the thresholded
    scores' reasons in the scores' order. The one rule, for one clip or a film's."""
    count = table.num_rows
    order = (ERROR, BLACK, FADE, FLASH, TEXT, SUBTITLE, LOGO, COMBED, STATIC)
    flags = {name: np.zeros(count, bool) for name in order}
    if "status" in table.column_names:
        ok = pc.equal(table.column("status"), STATUS_OK).fill_null(False)
        flags[ERROR] = ~ok.to_numpy(zero_copy_only=False)
    for rows, peaks in _by_length(table, "quality_luma_peak"):
        black = is_black(peaks, thresholds)
        flags[BLACK][rows] = black[:, 0] | (black.sum(axis=1) > thresholds.black_max_frames)
    for rows, means in _by_length(table, "quality_luma_mean"):
        flags[FADE][rows] = ~flags[BLACK][rows] & fades(means, thresholds)
        flags[FLASH][rows] = flashes(means, thresholds)
    if "quality_text_area" in table.column_names:
        area = table.column("quality_text_area").cast(pa.float64()).fill_null(np.nan)
        flags[TEXT] = area.to_numpy() > thresholds.text_max_area
    for reason, column, limit, _ in overlay_limits(thresholds) + field_limits(thresholds):
        if column in table.column_names:
            values = table.column(column).cast(pa.float64()).fill_null(np.nan)
            flags[reason] = values.to_numpy() > limit
    if thresholds.reject_static and "motion_scope" in table.column_names:
        scope = table.column("motion_scope").cast(pa.float64()).fill_null(np.nan)
        flags[STATIC] = scope.to_numpy() == 0.0
    for column, (score, limit) in thresholds.score_limits().items():
        if column in table.column_names:
            reason = score.reject_reason
            flags[reason] = flags.get(reason, np.zeros(count, bool)) | rejected(
                score, limit, table.column(column)
            )
    names = list(flags)
    # each row's set of reasons as one number (bit k: reason k), then one list per number seen
    codes = np.zeros(count, np.int64)
    for bit, flag in enumerate(flags.values()):
        codes |= flag.astype(np.int64) << bit
    lists = {
        int(code): [name for bit, name in enumerate(names) if int(code) >> bit & 1]
        for code in np.unique(codes)
    }
    return [list(lists[code]) for code in codes.tolist()]


def _by_length(table: pa.Table, name: str):
    """(row numbers, values as a rows x length float matrix) per list length of column `name`
    (lists that are null or empty are left out: no measurement, no reason)."""
    if name not in table.column_names:
        return
    column = table.column(name).combine_chunks()
    if pa.types.is_null(column.type):
        return
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(column).cast(pa.float64()).to_numpy(zero_copy_only=False)
    starts = np.cumsum(lengths) - lengths
    for length in np.unique(lengths[lengths > 0]):
        rows = np.flatnonzero(lengths == length)
        yield rows, values[starts[rows, None] + np.arange(length)]


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


def quality_measures(
    row: Mapping, thresholds: RejectConfig, reasons: Sequence[str] = ()
) -> list[tuple[str, str, bool]]:
    """The stored values behind a clip's decision, each beside its threshold, for people (the
    report, the review page): (reason, "value (threshold)", whether that reason rejected the
    clip: it is in `reasons`, the clip's stored or reviewed reject_reasons)."""
    measures = []
    peaks, means = row.get("quality_luma_peak"), row.get("quality_luma_mean")
    if peaks is not None and len(peaks):
        black = sum(is_black(p, thresholds) for p in peaks)
        first = "black" if is_black(peaks[0], thresholds) else "not black"
        text = (
            f"black frames {black} of {len(peaks)}, first {first} (rejected: the first, or more "
            f"than {thresholds.black_max_frames}; black: 99 % of pixels at most grey "
            f"{thresholds.black_luma:g})"
        )
        measures.append((BLACK, text, BLACK in reasons))
    if means is not None and len(means):
        m = np.asarray(means, dtype=float) + 4.0
        median = float(np.median(m))
        ratio = max(median / m[0], median / m[-1])
        text = (
            f"brightness {means[0]:.0f} to {means[-1]:.0f}, median {median - 4:.0f}; the darker "
            f"end {ratio:.2f}x darker (fade: at least {thresholds.fade_min_ratio:g}x, climbing "
            "steadily)"
        )
        measures.append((FADE, text, FADE in reasons))
        if len(means) >= 3 and thresholds.flash_min_jump >= 0:
            jump = float(frame_jumps(np.asarray([means], dtype=float)).max())
            text = f"brightest jump {jump:.0f} (flash: at least {thresholds.flash_min_jump:g})"
            measures.append((FLASH, text, FLASH in reasons))
    area = row.get("quality_text_area")
    if area is not None and not np.isnan(area):
        text = f"text area {area:.4f} (text: over {thresholds.text_max_area:g})"
        measures.append((TEXT, text, TEXT in reasons))
    for reason, column, limit, what in overlay_limits(thresholds) + field_limits(thresholds):
        value = row.get(column)
        if value is not None and not np.isnan(value):
            text = f"{what} {value:.4f} ({reason}: over {limit:g})"
            measures.append((reason, text, reason in reasons))
    for column, (score, limit) in thresholds.score_limits().items():
        if column in row:
            text = f"{score.label} {score.shown(row[column])} ({score.reject_reason}: {score.describe_limit(limit)})"
            measures.append((score.reject_reason, text, score.reject_reason in reasons))
    duplicate = row.get("duplicate_of")
    if isinstance(duplicate, str):
        text = (
            f"duplicate of {duplicate[:8]} (frame hashes at most "
            f"{thresholds.duplicate_max_distance:g} bits apart)"
        )
        measures.append((DUPLICATE, text, DUPLICATE in reasons))
    return measures


def decide(values: Mapping, thresholds: RejectConfig) -> tuple[bool, list[str]]:
    """(usable, reject_reasons) of a clip from its stored values: its own measurements
    (`clip_reasons`) and, when the folder pass found one, `duplicate_of`.

    The one decision: only the folder pass (pipeline/passes/quality.py) calls it, for every entry point
    (dataset, run_film, quality-calibrate); captioning, the trainer and the review read what it
    stored."""
    return with_duplicate(clip_reasons(values, thresholds), values.get("duplicate_of"))


def with_duplicate(
    reasons: list[str], duplicate_of: str | None, reason: str = DUPLICATE
) -> tuple[bool, list[str]]:
    """(usable, reject_reasons) from a clip's own reasons and the kept copy it duplicates
    (`reason`: `duplicate` for the pHash pass, `similar` for the semantic one)."""
    reasons = [*reasons, reason] if duplicate_of is not None else list(reasons)
    return not reasons, reasons


# ----------------------------------------------------------------------------- the stage


class QualityStage(ClipStage):
    """Fills the quality_* values of a clip; it decides nothing. The folder pass decides every
    clip from the stored values with the folder's thresholds (`decide`), after the film is
    gathered, so a clip that fails later and a duplicate across films are decided the same way."""

    name = "quality"

    def __init__(self, config: QualityConfig | None = None):
        self.config = config or QualityConfig()
        self.config.validate()
        self.detector = TextDetector(
            self.config.text_model, self.config.text_width, self.config.text_pixel_probability
        )  # cheap: finds the model file, loads nothing

    def setup(self) -> None:
        cv2.setNumThreads(1)  # one worker per core already: OpenCV's threads would oversubscribe
        self.detector.load()

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise QualityError(
                f"clip {clip.clip_id}: quality needs the in-memory frames (clip.frames is None)"
            )
        # Its thresholds were measured on RGB frames, so it reads RGB (one conversion of the 16
        # frames, about 6 ms; the luma series could come from `grey()` without it, once the
        # thresholds are checked on luma-made grey).
        frames = as_clip_frames(clip.frames).rgb()
        clip.quality_luma_mean, clip.quality_luma_peak = luma_series(frames)
        clip.quality_text_area = self.text_area(frames)
        clip.quality_hashes = [perceptual_hash(frames[_at(i, frames)]) for i in self.hash_frames]
        clip.quality_version = self.version
        return clip

    def text_area(self, frames: np.ndarray) -> float:
        """The largest share of a sampled frame marked as text, in-world text left out. Only a
        frame with text pays for the in-world check (two more detector frames, the first and
        the last): most clips have none. It runs whatever the reject threshold, so the stored
        value means the same under every threshold `quality-calibrate` may apply."""
        positions = [_at(i, frames) for i in self.config.text_frames]
        masks = self.detector.masks([frames[i] for i in positions])
        if not any(mask.any() for mask in masks):
            return 0.0
        ends = [0, len(frames) - 1]
        greys = {i: self._grey(frames[i]) for i in {*positions, *ends}}
        others = list(zip([greys[i] for i in ends], self.detector.masks([frames[i] for i in ends])))
        config = self.config
        return max(
            float(
                without_in_world_text(
                    mask,
                    greys[i],
                    [(grey, other) for (grey, other), end in zip(others, ends) if end != i],
                    config.in_world_min_shift,
                    config.in_world_tolerance,
                    config.in_world_min_match,
                ).mean()
            )
            for i, mask in zip(positions, masks)
        )

    def _grey(self, frame: np.ndarray) -> np.ndarray:
        """A frame as grey at the detector's size, where the text masks are."""
        size = (self.detector.width, self.detector.height)
        return cv2.resize(
            cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), size, interpolation=cv2.INTER_AREA
        )

    @property
    def hash_frames(self) -> list[int]:
        return self.config.hash_frames

    @property
    def version(self) -> str:
        """What quality_version stores: how the values were measured."""
        hashes = ",".join(map(str, self.config.hash_frames))
        texts = ",".join(map(str, self.config.text_frames))
        detector = self.detector.name
        in_world = (
            f"inworld:s{self.config.in_world_min_shift:g}:t{self.config.in_world_tolerance:g}"
            f":m{self.config.in_world_min_match:g}"
        )
        return f"luma{LUMA_SIZE[0]}x{LUMA_SIZE[1]};{detector}:f{texts};{in_world};phash64:f{hashes}"


def _at(position: int, frames: np.ndarray) -> int:
    return min(position, len(frames) - 1)


# What the stage measures and stores (the decision's columns, usable and reject_reasons, are
# the folder pass's).
QUALITY_COLUMNS = (
    pa.field("quality_luma_mean", pa.list_(pa.float32())),
    pa.field("quality_luma_peak", pa.list_(pa.float32())),
    pa.field("quality_text_area", pa.float32()),
    pa.field("quality_hashes", pa.list_(pa.int64())),
    pa.field("quality_version", pa.string()),
)


@register_clip_stage("quality", settings=QualityConfig, columns=QUALITY_COLUMNS, order=50)
def quality_stage(settings: QualityConfig) -> ClipStage | None:
    """After motion (the static reason reads its scope), before encode (which releases the
    frames)."""
    return QualityStage(settings) if settings.enabled else None
