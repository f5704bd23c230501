"""The reject decision (issue 13): the thresholds (`reject`) that turn a clip's stored values into
usable / reject_reasons, the one rule that applies them (`own_reasons`, `clip_reasons`,
`decide`), and the same values beside their thresholds in words (`quality_measures`).

Nothing here measures a frame: the rule reads stored values alone, so `animegamer
quality-calibrate` can re-take every decision without recomputing. The folder pass
(pipeline/passes/quality.py) is the one place that decides clips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.record import STATUS_OK
from core.settings import Settings
from core.vocabulary import (
    BLACK,
    BLENDED,
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
from stages.base import registered_scores
from stages.scoring.scores import Score, rejected, score_limits


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
    blended_max_share: float = 0.03
    """A clip is `blended` when more than this share of its window's frames are mixes of the
    frames either side of them (stages/sources/blending.py): a frame-blending rate conversion,
    double images. Measured in docs/sources.md ("Frame-blended conversions")."""
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
REASON_COLUMNS += ["blended"]


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
    """The reasons of the source's picture timing, in overlay_limits' terms: comb teeth
    restoration left (stages/sources/fields.py), frames blended by a rate conversion
    (stages/sources/blending.py)."""
    return [
        (COMBED, "combing", thresholds.combed_max_share, "comb teeth in a band of rows"),
        (BLENDED, "blended", thresholds.blended_max_share, "share of frames mixed from neighbours"),
    ]


def clip_reasons(row: Mapping, thresholds: RejectConfig) -> list[str]:
    """The reasons a clip is unfit, from its own stored values (no other clip needed).

    `row` is a shard row (or a Clip's `to_row()`); absent measurements give no reason."""
    present = {name: [_plain(row[name])] for name in reason_columns(thresholds) if name in row}
    return own_reasons(pa.table(present) if present else pa.table({"_": [0]}), thresholds)[0]


def own_reasons(table: pa.Table, thresholds: RejectConfig) -> list[list[str]]:
    """Per row of `table` (shard rows; any of REASON_COLUMNS may be absent, and an absent or
    null measurement gives no reason), the reasons the clip is unfit on its own values, in the
    order error, black, fade, flash, text, subtitle, logo, combed, blended, static, then the thresholded
    scores' reasons in the scores' order. The one rule, for one clip or a film's."""
    return _as_lists(_reason_flags(table, thresholds), table.num_rows)


def _reason_flags(table: pa.Table, thresholds: RejectConfig) -> dict[str, np.ndarray]:
    """Per reason, in `own_reasons`' order, which rows of `table` it rejects."""
    count = table.num_rows
    order = (ERROR, BLACK, FADE, FLASH, TEXT, SUBTITLE, LOGO, COMBED, BLENDED, STATIC)
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
        flags[TEXT] = _floats(table, "quality_text_area") > thresholds.text_max_area
    for reason, column, limit, _ in overlay_limits(thresholds) + field_limits(thresholds):
        if column in table.column_names:
            flags[reason] = _floats(table, column) > limit
    if thresholds.reject_static and "motion_scope" in table.column_names:
        flags[STATIC] = _floats(table, "motion_scope") == 0.0
    for column, (score, limit) in thresholds.score_limits().items():
        if column in table.column_names:
            reason = score.reject_reason
            flags[reason] = flags.get(reason, np.zeros(count, bool)) | rejected(
                score, limit, table.column(column)
            )
    return flags


def _floats(table: pa.Table, column: str) -> np.ndarray:
    """A number column as float64, null as NaN (which no threshold comparison passes)."""
    return table.column(column).cast(pa.float64()).fill_null(np.nan).to_numpy()


def _as_lists(flags: dict[str, np.ndarray], count: int) -> list[list[str]]:
    """Per row, the names of the flags it has, in the flags' order."""
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
    words = _brightness_words(row, thresholds) + _value_words(row, thresholds)
    return [(reason, text, reason in reasons) for reason, text in words]


def _brightness_words(row: Mapping, thresholds: RejectConfig) -> list[tuple[str, str]]:
    """(reason, words) of the brightness series: black frames, a fade, a flash."""
    words = []
    peaks, means = row.get("quality_luma_peak"), row.get("quality_luma_mean")
    if peaks is not None and len(peaks):
        black = sum(is_black(p, thresholds) for p in peaks)
        first = "black" if is_black(peaks[0], thresholds) else "not black"
        text = (
            f"black frames {black} of {len(peaks)}, first {first} (rejected: the first, or more "
            f"than {thresholds.black_max_frames}; black: 99 % of pixels at most grey "
            f"{thresholds.black_luma:g})"
        )
        words.append((BLACK, text))
    if means is not None and len(means):
        m = np.asarray(means, dtype=float) + 4.0
        median = float(np.median(m))
        ratio = max(median / m[0], median / m[-1])
        text = (
            f"brightness {means[0]:.0f} to {means[-1]:.0f}, median {median - 4:.0f}; the darker "
            f"end {ratio:.2f}x darker (fade: at least {thresholds.fade_min_ratio:g}x, climbing "
            "steadily)"
        )
        words.append((FADE, text))
        if len(means) >= 3 and thresholds.flash_min_jump >= 0:
            jump = float(frame_jumps(np.asarray([means], dtype=float)).max())
            text = f"brightest jump {jump:.0f} (flash: at least {thresholds.flash_min_jump:g})"
            words.append((FLASH, text))
    return words


def _value_words(row: Mapping, thresholds: RejectConfig) -> list[tuple[str, str]]:
    """(reason, words) of the values compared one to one with a threshold: the text area, the
    overlay and field measures, the thresholded scores, and the duplicate the folder found."""
    words = []
    area = row.get("quality_text_area")
    if area is not None and not np.isnan(area):
        words.append((TEXT, f"text area {area:.4f} (text: over {thresholds.text_max_area:g})"))
    for reason, column, limit, what in overlay_limits(thresholds) + field_limits(thresholds):
        value = row.get(column)
        if value is not None and not np.isnan(value):
            words.append((reason, f"{what} {value:.4f} ({reason}: over {limit:g})"))
    for column, (score, limit) in thresholds.score_limits().items():
        if column in row:
            text = f"{score.label} {score.shown(row[column])} ({score.reject_reason}: {score.describe_limit(limit)})"
            words.append((score.reject_reason, text))
    duplicate = row.get("duplicate_of")
    if isinstance(duplicate, str):
        text = (
            f"duplicate of {duplicate[:8]} (frame hashes at most "
            f"{thresholds.duplicate_max_distance:g} bits apart)"
        )
        words.append((DUPLICATE, text))
    return words


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
