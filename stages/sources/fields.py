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
rule (stages/quality.py) turns it into the `combed` reason. docs/sources.md has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from core.frames import as_clip_frames
from core.record import Clip
from core.settings import ConfigError, Settings
from stages.base import ClipStage, register_clip_stage

TOOTH_LEVELS = 10  # grey levels a row must stand out by (and its own field agree within)
BAND_ROWS = 64  # combing is counted per band of rows this tall (a moving figure, not the sky)


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


def teeth(luma: np.ndarray, moved: np.ndarray | None = None) -> np.ndarray:
    """Comb-tooth pixels of grey pictures (... x H x W), as ... x (H - 6) x W boolean maps of
    rows 3 to H - 4. `moved` (same shape as `luma`, boolean), where given, is where the picture
    changes.

    A tooth stands out from the rows next to it, and so do those rows, the other way: teeth come
    in runs of rows that alternate. A lone dark row (a scan line, one line of hatching) does not
    make its neighbours stand out, so it is no tooth."""
    y = luma.astype(np.int16)
    here, up, down = y[..., 2:-2, :], y[..., 1:-3, :], y[..., 3:-1, :]
    above, below = here - up, here - down
    lighter = np.minimum(above, below) > TOOTH_LEVELS
    darker = np.maximum(above, below) < -TOOTH_LEVELS
    own_field = (abs(here - y[..., :-4, :]) <= TOOTH_LEVELS) & (
        abs(here - y[..., 4:, :]) <= TOOTH_LEVELS
    )
    lighter &= own_field
    darker &= own_field
    found = (lighter[..., 1:-1, :] & darker[..., :-2, :] & darker[..., 2:, :]) | (
        darker[..., 1:-1, :] & lighter[..., :-2, :] & lighter[..., 2:, :]
    )
    if moved is not None:
        found &= moved[..., 3:-3, :]
    return found


def band_share(found: np.ndarray) -> np.ndarray:
    """The share of tooth pixels in the densest band of BAND_ROWS rows, per picture (a map of
    `teeth`, ... x rows x W)."""
    rows = found.mean(axis=-1)
    band = min(BAND_ROWS, rows.shape[-1])
    if band == 0:
        return np.zeros(rows.shape[:-1])
    sums = np.cumsum(rows, axis=-1)
    sums = np.concatenate([np.zeros((*rows.shape[:-1], 1)), sums], axis=-1)
    return (sums[..., band:] - sums[..., :-band]).max(axis=-1) / band


def comb_share(luma: np.ndarray, moved: np.ndarray | None = None) -> float:
    """The share of comb-tooth pixels in one grey picture's densest band of BAND_ROWS rows."""
    return float(band_share(teeth(luma, moved)))


def changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two grey pictures differ by more than TOOTH_LEVELS."""
    return abs(a.astype(np.int16) - b.astype(np.int16)) > TOOTH_LEVELS


def clip_combing(luma: np.ndarray) -> float:
    """The largest comb share among a clip's frames (N x H x W grey), every other column (teeth
    run across rows); each frame's teeth are counted where it differs from the frame before or
    after it."""
    y = luma[:, :, ::2].astype(np.int16)
    if len(y) < 2:
        return 0.0
    steps = abs(y[1:] - y[:-1]) > TOOTH_LEVELS  # step k: frames k and k + 1
    moved = np.zeros(y.shape, bool)
    moved[:-1] |= steps
    moved[1:] |= steps
    return float(band_share(teeth(y, moved)).max())


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
