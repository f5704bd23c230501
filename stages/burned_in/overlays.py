"""Overlay text and logos (issue 28): what the film's distributor drew over the picture.

Burned-in subtitles and a channel's logo are not part of the picture: a video model trained on
clips that show them learns to draw them. Two passes find them.

The film pass (`FilmOverlays`, run once per film in its prepare step, beside the border crop,
on the same sampled key frames) finds where overlays live:
- subtitle bands: the text detector looks at the bottom and top zones of each sampled frame at
  a scale where the smallest subtitle (`min_text_pixels` in the source) is still as tall as the
  detector needs (`detector_pixels`); text lines near the middle of the picture whose bottom
  (or top) edges fall on the same rows in several frames form a band;
- logos and watermarks: edges that stay at the same pixels in most sampled frames, although
  the frames are of many different shots.
It gives an `OverlayRecord` (core/film.py): summary.json's `overlays`.

The clip pass (`OverlayStage`, a registered clip stage) looks closely at each clip's frames
inside the film's subtitle bands, at the same scale, and stores how much of the band is overlay
text; it also stores how much of a logo the clip's window shows. Both are measurements: the
quality rule (stages/quality/reject.py `own_reasons`) turns them into the `subtitle` and `logo`
reasons. docs/quality.md ("Overlays") has the figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import cv2
import numpy as np
import pyarrow as pa

from core.film import OverlayRecord
from core.frames import as_clip_frames
from core.record import Clip
from core.settings import ConfigError, Settings
from stages.base import ClipStage, FilmContext, register_clip_stage
from stages.burned_in.clip_geometry import Box4, clip_rows, logo_share, picture_columns
from stages.burned_in.edge_text import edge_text_share, edge_zones
from stages.burned_in.logos import BLACK_PEAK, persistent_edges, views
from stages.burned_in.overlays_text import Box, rows_overlap, subtitle_like, text_lines
from stages.burned_in.picture_text import picture_text_share, text_spans
from stages.burned_in.player_bars import player_rows
from stages.burned_in.text_detector import TextDetector
from stages.crop import CropBox
from stages.probe import FilmInfo
from stages.sources.film_samples import SamplePlan, sample_plan


@dataclass
class OverlayConfig(Settings):
    """Where overlay text and logos are looked for, and how closely."""

    enabled: bool = True
    """Find subtitle bands and logos once per film, and measure each clip against them."""
    samples: int = 48
    """At most this many frames sampled evenly across the film (the border crop reads the same
    frames: stages/sources/film_samples.py)."""
    seconds_per_sample: float = 1.0
    """One sampled frame per this many seconds of film, within min_samples..samples: the pass's
    work follows the film's length (a 6-s clip needs 8 frames, a film of 48 s or more 48)."""
    min_samples: int = 8
    """At least this many frames, however short the film."""
    min_text_pixels: int = 12
    """The smallest subtitle to find, in source pixels (the height of a line's letters)."""
    min_text_share: float = 1 / 45
    """...or this share of the picture's height, when larger: 12 pixels up to 540 lines, 24 at
    1080 (`scale_for`)."""
    detector_pixels: int = 9
    """The smallest text height the detector finds in its input: 12-pixel subtitles were all
    found at 0.75 scale (9 px) and a third of them at 0.5 (6 px) (docs/quality.md)."""
    bottom_zone: float = 0.3
    """Share of the picture's height, from the bottom, searched for subtitle bands."""
    top_zone: float = 0.2
    """Share of the picture's height, from the top, searched for bands (signs, notes)."""
    centre: float = 0.1
    """A line is subtitle-like when its middle is within this share of the picture's width
    of the picture's middle (subtitles are centred; in-world text seldom is, so closely)."""
    band_min_frames: int = 3
    """A band needs text lines on the same rows in at least this many sampled frames..."""
    band_min_share: float = 0.04
    """...and at least this share of the sampled frames that show a picture."""
    band_two_subtitles: bool = True
    """A band is also two sightings on the same rows that differ both in picture and in the
    line's width: two different lines in two shots. A short dialogue piece has few of them (One
    Piece's 7.5 s: two lines, each over a held drawing), and whether a third sighting is sampled
    is chance: a 3:2 telecined copy sampled other moments than its progressive copy and lost
    its band. A sign keeps its width as the picture moves past it, so it is not two lines."""
    logo_persistence: float = 0.6
    """A pixel is part of a logo when it is an edge in at least this share of the sampled
    frames that show a picture (frames of many different shots)."""
    logo_min_shots: int = 5
    """With this many views or more, a mark that holds its edges is a logo (a semi-transparent
    one included)..."""
    logo_few_views: int = 3
    """...with fewer, down to this many (a short piece, or shot / reverse shot: six shots of a
    dialogue are three views), only an opaque mark is: its pixels also keep their grey levels
    across the views (within `logo_steady_grey`), which a background never does across
    different pictures. Fewer views than this: no logo is looked for."""
    logo_steady_grey: float = 12.0
    """The median, over a mark's edge pixels, of the spread (highest less lowest) of the views'
    mean grey levels there, at most this for an opaque mark."""
    logo_chance: float = 1e-4
    """...and with `logo_min_shots` views or more, a mark whose grey levels change (not opaque)
    keeps its edges in more views than chance would give a picture as busy as its surroundings:
    the binomial chance of as many views at the ring's share of edges is at most this. Short
    busy pieces (5-7 views, two moving shots split into several views) otherwise found
    chance blobs: 4 of 6 views at a ring share of 0.15 is a chance of 0.006 (real copies,
    docs/quality.md); the real marks measured 8e-16 to 1e-5."""
    logo_margin: float = 0.35
    """A logo lies in a corner: wholly within this share of the picture's width of its left or
    right edge and of its height of its top or bottom edge (channel marks and watermarks sit in
    corners, where they hide the least)."""
    logo_contrast: float = 0.5
    """A logo's edges stay put in at least this much larger a share of the views than the
    edges around it (measured on real anime: marks 0.54-0.73, still backgrounds at most 0.46)."""
    spread_max_frames: int = 7200
    """A film with fewer key frames than `samples` and at most this many frames (5 minutes at
    24 fps) is sampled from one decoding pass over it instead (short pieces often have one or
    two key frames); a longer one keeps its key frames."""
    picture_text_share: float = 0.002
    """A sampled frame whose picture holds text lines outside the subtitle bands and logos
    covering at least this share of it (found at the bands' scale, `scale_for`, or the close
    look's 352 rows when fewer) marks a stretch
    of the film whose clips the quality stage looks at closely (stages/burned_in/picture_text.py;
    off with `quality.close_text_width` = 0): staff credits and lyrics over the picture read
    0.01-0.06 there (docs/quality.md)."""
    picture_text_seconds: float = 1.5
    """...looking at the middle of sampled frames this many seconds apart or more (a short film
    samples one a second; credits and lyrics stay longer): the middle rows cost as much again
    as the zones. At 2 s, a lyric edit's 14 s (15 samples, one in three looked at) lost the
    stretch of its second clip."""
    clip_frames: list[int] = field(default_factory=lambda: [0, 5, 10, 15])
    """Frames of each clip (0-15) looked at inside the film's subtitle bands: a subtitle on
    screen for 0.7 s or more anywhere in the clip is on one of them."""
    clip_min_scale: float = 1.25
    """The clip pass enlarges the band at least this much over the clip's pixels: a two-word
    14-pixel English line over sky read 0.003 at 1.0 and 0.045 at 1.25 (docs/quality.md)."""

    player_zone: float = 0.15
    """Share of the picture's height, from the bottom and from the top, where a web player's
    interface is looked for (stages/burned_in/player_bars.py)..."""
    player_step: int = 24
    """...as rows where the grey level steps by at least this much from the row above..."""
    player_width: float = 0.6
    """...across at least this share of the picture's width (a progress line, a panel's edge)..."""
    player_min_views: int = 2
    """...at the same row in pictures of at least this many views (0: not looked for)."""
    player_margin: float = 0.03
    """The rows cropped away reach this share of the height beyond the rule, towards the
    middle (the controls and time codes beside the progress line)."""
    edge_frames: list[int] = field(default_factory=lambda: [0, 15])
    """Frames of each clip whose top and bottom edges are looked at for rare overlay text (a
    note, a sign's caption: too rare to make a band; stages/burned_in/edge_text.py). A line on screen for
    2 s or more that the clip shows at all is on its first or its last frame. Empty: not
    looked at."""
    edge_top: float = 0.12
    """Share of the clip's height, from the top, looked at for rare text (a note sits at the
    very top)..."""
    edge_bottom: float = 0.15
    """...and from the bottom (a caption's one line, with its margin; two-line subtitles come
    often enough to make a band)."""
    edge_scale: list[float] = field(default_factory=lambda: [0.5, 1.0])
    """The clip's pixels to the detector's for the edges: the film pass's scale (the smallest
    subtitle, `min_text_pixels` or `min_text_share` of the source, reaches `detector_pixels`:
    0.56 for a 360 to 540-line source, 0.84 for 720 and 1080), kept within these bounds."""

    def validate(self) -> None:
        if len(self.edge_scale) != 2 or not 0 < self.edge_scale[0] <= self.edge_scale[1]:
            raise ConfigError(
                f"overlays.edge_scale={self.edge_scale}: give [low, high], 0 < low <= high"
            )
        if self.min_text_pixels < 1 or self.detector_pixels < 1:
            raise ConfigError("overlays.min_text_pixels and detector_pixels must be at least 1")
        if not self.clip_frames or any(p < 0 for p in self.clip_frames):
            raise ConfigError(f"overlays.clip_frames={self.clip_frames}: give frame positions")
        if not 0 < self.logo_chance <= 1:
            raise ConfigError(f"overlays.logo_chance={self.logo_chance}: give more than 0, up to 1")
        for name in ("bottom_zone", "top_zone", "edge_top", "edge_bottom"):
            if not 0 <= getattr(self, name) <= 0.5:
                raise ConfigError(f"overlays.{name}={getattr(self, name)}: give 0 to 0.5")

    @property
    def scale(self) -> float:
        """Source pixels to detector pixels: the smallest subtitle just reaches the detector's
        smallest text (never enlarged)."""
        return min(1.0, self.detector_pixels / self.min_text_pixels)

    def scale_for(self, height: int) -> float:
        """`scale` for a picture `height` rows tall: the smallest subtitle is `min_text_pixels`
        or `min_text_share` of the height, whichever is larger (subtitles are drawn in
        proportion to the picture: a 1080-line picture's smallest is 24 pixels, not 12, and
        its zones go to the detector at half the size: a quarter of the work)."""
        smallest = max(self.min_text_pixels, self.min_text_share * height)
        return min(1.0, self.detector_pixels / smallest)


# ----------------------------------------------------------------------------- the film pass

# The middle rows looked at reach this share of the height into each zone: a line across a
# zone's edge is whole in one of the two looks.
MIDDLE_MARGIN = 0.05


@dataclass
class _Line:
    frame: int
    box: Box  # in the crop box's pixels
    edge: int  # the row a band lines up on: the bottom of a bottom-zone line, the top of a top one


class FilmOverlays:
    """`process(luma_frames, crop) -> OverlayRecord` from sampled upright grey frames."""

    def __init__(self, config: OverlayConfig, detector: TextDetector, close_rows: int = 0):
        """`close_rows`: the rows of the quality stage's close look (0: none); the middle of the
        picture is then looked at too, for the stretches whose clips it looks at, never at more
        rows than it has (a 1080-line picture's bands are read at 405 rows, its middle at 352)."""
        config.validate()
        self.config, self.detector, self.close_rows = config, detector, close_rows

    def without_player(
        self, luma_frames: Sequence[np.ndarray], crop: CropBox
    ) -> tuple[CropBox, list[list[int]]]:
        """The crop box with a web player's interface cropped away, and the rows it covered
        (source pixels); the box itself when none is found (stages/burned_in/player_bars.py)."""
        config = self.config
        pictures = _pictures(luma_frames, crop)
        if config.player_min_views < 1 or not pictures:
            return crop, []
        rows = player_rows(
            pictures,
            views(pictures),
            config.player_zone,
            config.player_step,
            config.player_width,
            config.player_min_views,
            config.player_margin,
        )
        if not rows:
            return crop, []
        top = max([y1 for y0, y1 in rows if y0 == 0], default=0)
        bottom = min([y0 for y0, y1 in rows if y1 == crop.h], default=crop.h)
        top, bottom = top + top % 2, bottom - bottom % 2  # even, as the border crop's
        if bottom - top < crop.h // 2:
            return crop, []  # most of the picture: not a player's bar
        box = replace(crop, y=crop.y + top, h=bottom - top, source="detected")
        return box, [[crop.y + y0, crop.y + y1] for y0, y1 in rows]

    def process(
        self,
        luma_frames: Sequence[np.ndarray],
        crop: CropBox,
        player: Sequence[Sequence[int]] = (),
        times: Sequence[float] | None = None,
        end: float = 0.0,
    ) -> OverlayRecord:
        """The record of the overlays inside `crop`; `player`: the player rows that
        `without_player` cropped away, recorded as they are; `times`: each frame's time in
        seconds and `end` the film's length, for the stretches with text over the picture
        (none looked for without them, or without a close detector)."""
        shown = _shown(luma_frames, crop)
        pictures = [picture for _, picture in shown]
        looked = self._middle_looks(len(pictures), end) if times is not None else set()
        found = [self._all_lines(p, i in looked) for i, p in enumerate(pictures)]
        lines = [line for i, p in enumerate(pictures) for line in self._zone_lines(i, p, found[i])]
        bands = self._bands(lines, pictures, crop)
        showing = {
            line.frame for line in lines for band in bands if rows_overlap(line.box, band) > 0.5
        }
        logos = [
            box
            for box in self._logos(pictures)
            if not any(rows_overlap(box, band) > 0.5 for band in bands)  # steady subtitle words
        ]
        spans = []
        if times is not None and looked:
            if len(times) != len(luma_frames):
                raise ValueError(f"{len(times)} sample times for {len(luma_frames)} frames")
            at = {i: times[shown[i][0]] for i in looked}
            spans = self._text_spans(found, pictures, at, end, bands, logos)
        return OverlayRecord(
            subtitle_bands=[[crop.y + y0, crop.y + y1] for y0, y1 in bands],
            subtitle_share=round(len(showing) / len(pictures), 3) if pictures else 0.0,
            logos=[[crop.x + x0, crop.y + y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in logos],
            frames_sampled=len(pictures),
            text_scale=round(self.config.scale_for(crop.h), 3),
            player_rows=[list(rows) for rows in player],
            text_spans=spans,
        )

    def _logos(self, pictures: list[np.ndarray]) -> list[Box]:
        return persistent_edges(pictures, self.config) if pictures else []

    def _text_spans(
        self,
        found: list[list[tuple[Box, str, float]]],
        pictures: list[np.ndarray],
        at: dict[int, float],
        end: float,
        bands: list[tuple[int, int]],
        logos: list[Box],
    ) -> list[list[float]]:
        """The stretches with text over the picture (stages/burned_in/picture_text.py), from the
        pictures whose middle was looked at (`at`: their times, by position)."""
        looked = sorted(at)
        shares = [picture_text_share(found[i], pictures[i].shape, bands, logos) for i in looked]
        times = [at[i] for i in looked]
        return text_spans(shares, times, end, self.config.picture_text_share)

    def _middle_looks(self, count: int, seconds: float) -> set[int]:
        """Which of `count` pictures sampled over `seconds` of film have their middle looked
        at: none without a close look (`close_rows`); samples `picture_text_seconds` apart or more."""
        if self.close_rows == 0 or count == 0:
            return set()
        spacing = seconds / count
        stride = (
            max(1, math.ceil(self.config.picture_text_seconds / spacing - 1e-9))
            if spacing > 0
            else 1
        )
        return set(range(0, count, stride))

    def _all_lines(self, picture: np.ndarray, middle: bool) -> list[tuple[Box, str, float]]:
        """The text lines of one frame's bottom and top zones, at the scale where the smallest
        subtitle reaches the detector's smallest text, each with its zone's name and that scale;
        and, when `middle`, of the rows between the zones (with a margin each side: a line
        across a zone's edge), named "middle", at `_middle_scale`."""
        height, _ = picture.shape
        scale = self.config.scale_for(height)
        bottom = height - int(height * self.config.bottom_zone)
        top = int(height * self.config.top_zone)
        rows = [(bottom, height, "bottom", scale), (0, top, "top", scale)]
        if middle:
            margin = int(height * MIDDLE_MARGIN)
            middle_rows = (max(0, top - margin), min(height, bottom + margin))
            rows.append((*middle_rows, "middle", self._middle_scale(height)))
        found = []
        for start, stop, zone, at in rows:
            if stop - start < 8:
                continue
            for x0, y0, x1, y1 in text_lines(self.detector, picture[start:stop], at):
                found.append(((x0, y0 + start, x1, y1 + start), zone, at))
        return found

    def _middle_scale(self, height: int) -> float:
        """The bands' scale, or the close look's rows when fewer (a 1080-line picture's bands
        are read at 405 rows, its middle at 352: what the close look sees of a clip)."""
        return min(self.config.scale_for(height), self.close_rows / height)

    def _zone_lines(
        self, index: int, picture: np.ndarray, found: list[tuple[Box, str, float]]
    ) -> list[_Line]:
        """Subtitle-like lines of one frame's bottom and top zones (of `found`, its lines): at
        least as wide as tall, their middle within `centre` of the picture's (subtitles are
        centred)."""
        width = picture.shape[1]
        centred = (width / 2, self.config.centre * width)
        lines = []
        for box, zone, _ in found:
            if zone == "middle" or not subtitle_like(box, centred, []):
                continue
            lines.append(_Line(index, box, box[3] if zone == "bottom" else box[1]))
        return lines

    def _bands(
        self, lines: list[_Line], pictures: list[np.ndarray], crop: CropBox
    ) -> list[tuple[int, int]]:
        """Rows (y0, y1) of the crop box where subtitles sit: lines whose aligned edge (bottom or
        top) lies within a third of a line's height of the group's first, in enough different
        pictures (a long still shot sampled three times is one picture); groups that touch (a
        two-line subtitle) are one band."""
        needed = max(self.config.band_min_frames, self.config.band_min_share * len(pictures))
        thumbnails = [cv2.resize(p, (32, 18), interpolation=cv2.INTER_AREA) for p in pictures]
        groups: list[list[_Line]] = []
        for line in sorted(lines, key=lambda line: line.edge):
            tolerance = (line.box[3] - line.box[1]) / 3
            if groups and line.edge - groups[-1][0].edge <= tolerance:
                groups[-1].append(line)
            else:
                groups.append([line])
        two = self.config.band_two_subtitles
        spans = [
            (min(m.box[1] for m in g), max(m.box[3] for m in g))
            for g in groups
            if _distinct(g, thumbnails) >= needed or (two and _two_subtitles(g, thumbnails))
        ]
        merged: list[list[int]] = []
        for y0, y1 in sorted(spans):
            if merged and y0 <= merged[-1][1] + (y1 - y0) // 2:
                merged[-1][1] = max(merged[-1][1], y1)
            else:
                merged.append([y0, y1])
        return [(max(0, y0), min(crop.h, y1)) for y0, y1 in merged]


def _pictures(luma_frames: Sequence[np.ndarray], crop: CropBox) -> list[np.ndarray]:
    """The sampled frames inside the crop box, those that show no picture (black) left out."""
    return [frame for _, frame in _shown(luma_frames, crop)]


def _shown(luma_frames: Sequence[np.ndarray], crop: CropBox) -> list[tuple[int, np.ndarray]]:
    """(position among the samples, the frame inside the crop box) of the sampled frames that
    show a picture: a 98th-percentile grey above BLACK_PEAK."""
    return [
        (k, f[crop.y : crop.y + crop.h, crop.x : crop.x + crop.w])
        for k, f in enumerate(luma_frames)
        if np.percentile(f[::4, ::4], 98) > BLACK_PEAK
    ]


def _distinct(lines: list[_Line], thumbnails: list[np.ndarray]) -> int:
    """How many of `lines` are different sightings: a line counts when its frame's 32x18
    thumbnail differs from every counted one's by more than 6 grey levels on average, or when
    it spans other columns (another subtitle on the same picture: subtitles change on their own
    timing, a sign in a still shot does not)."""
    counted: list[tuple[np.ndarray, Box]] = []
    for line in lines:
        small = thumbnails[line.frame].astype(np.int16)
        height = line.box[3] - line.box[1]
        if all(
            np.abs(small - picture).mean() > 6
            or abs(line.box[0] - box[0]) + abs(line.box[2] - box[2]) > height
            for picture, box in counted
        ):
            counted.append((small, line.box))
    return len(counted)


def _two_subtitles(lines: list[_Line], thumbnails: list[np.ndarray]) -> bool:
    """Whether two of `lines` differ in their frame's 32x18 thumbnail (by more than 6 grey
    levels on average, `_distinct`'s rule) and in width (by more than a line's height): other
    words over another picture. Text that moves with the picture keeps its width."""
    for k, line in enumerate(lines):
        small = thumbnails[line.frame].astype(np.int16)
        width = line.box[2] - line.box[0]
        height = line.box[3] - line.box[1]
        for other in lines[k + 1 :]:
            if (
                abs(width - (other.box[2] - other.box[0])) > height
                and np.abs(small - thumbnails[other.frame]).mean() > 6
            ):
                return True
    return False


def overlay_sample_plan(film: FilmInfo, config: OverlayConfig, most: int) -> SamplePlan:
    """The frames the film pass and the border crop beside it read: at most `most` (the larger
    of the two passes' `samples`), one per `seconds_per_sample`, from key frames or, for a short
    film with too few key frames, from one decoding pass over it."""
    return sample_plan(
        film, most, config.seconds_per_sample, config.min_samples, config.spread_max_frames
    )


def film_overlays(config) -> FilmOverlays:
    """The film pass of a PipelineConfig: its `overlays` section, with the quality stage's text
    model (`quality.text_model`)."""
    quality = config.quality
    detector = TextDetector(quality.text_model, quality.text_width, quality.text_pixel_probability)
    close_rows = 0
    if quality.close_text_width > 0:
        width = quality.close_text_width
        close_rows = TextDetector(quality.text_model, width, quality.text_pixel_probability).height
    return FilmOverlays(config.overlays, detector, close_rows)


# ----------------------------------------------------------------------------- the clip pass


class OverlayStage(ClipStage):
    """Fills `overlay_subtitle_area` (the largest share of the film's subtitle bands, as the clip
    shows them, that the detector marks as subtitle text, over `clip_frames`) and
    `overlay_logo_share` (the largest share of a film logo's box inside the clip's window). It
    decides nothing: stages/quality/reject.py `own_reasons` does."""

    name = "overlays"

    def __init__(self, config: OverlayConfig):
        config.validate()
        self.config = config
        self.for_film(FilmContext())

    def for_film(self, film: FilmContext) -> None:
        self.film = film
        # the width is the quality stage's (unused here: bands go in at their own size)
        self.detector = TextDetector(film.text_model, 256, film.text_probability)

    def setup(self) -> None:
        overlays = self.film.overlays
        if overlays is not None and (overlays.subtitle_bands or self.config.edge_frames):
            self.detector.load()

    def process(self, clip: Clip) -> Clip:
        overlays = self.film.overlays
        if overlays is None:
            return clip  # the film pass did not run: nothing measured, no reason
        region = (clip.crop_x, clip.crop_y, clip.crop_w, clip.crop_h)
        clip.overlay_logo_share = round(logo_share(overlays.logos, region), 4)
        frames = as_clip_frames(clip.frames).luma()
        area = max(
            self._subtitle_area(clip, frames, overlays, region),
            self._edge_text(clip, frames, overlays.text_scale),
        )
        clip.overlay_subtitle_area = round(area, 5)
        return clip

    def _edge_text(self, clip: Clip, frames: np.ndarray, text_scale: float) -> float:
        """Rare overlay text at the clip's top and bottom edges (stages/burned_in/edge_text.py)."""
        picked = sorted({min(i, len(frames) - 1) for i in self.config.edge_frames})
        if not picked:
            return 0.0
        low, high = self.config.edge_scale
        scale = min(high, max(low, text_scale * clip.crop_h / clip.height))
        zones = edge_zones(clip.height, self.config.edge_top, self.config.edge_bottom)
        middle = self._centred(clip)
        return edge_text_share(self.detector, [frames[i] for i in picked], zones, scale, middle)

    def _centred(self, clip: Clip) -> tuple[float, float]:
        """Where a centred line's middle lies in the clip, and how far from it: on the film
        picture's middle within `centre` of its width, as the film pass's bands are (a note or
        subtitle is centred on the film's picture, which the clip's window need not be); on
        the clip's middle within a quarter of its width when the picture is not known."""
        picture = self.film.picture
        if picture is None:
            return clip.width / 2, clip.width / 4
        region = (clip.crop_x, clip.crop_y, clip.crop_w, clip.crop_h)
        column, width = picture_columns(
            picture, region, (clip.height, clip.width), self.film.resize
        )
        return column, self.config.centre * width

    def _subtitle_area(
        self, clip: Clip, frames: np.ndarray, overlays: OverlayRecord, region: Box4
    ) -> float:
        rows = [
            band
            for band in (
                clip_rows(b, region, (clip.height, clip.width), self.film.resize)
                for b in overlays.subtitle_bands
            )
            if band is not None
        ]
        if not rows:
            return 0.0
        picked = sorted({min(i, len(frames) - 1) for i in self.config.clip_frames})
        # clip pixels to the detector's: the film pass's scale, never below clip_min_scale (the
        # band is thin, so looking closely is cheap, and short lines and busy backgrounds
        # behind small letters need it: docs/quality.md)
        scale = max(self.config.clip_min_scale, overlays.text_scale * clip.crop_h / clip.height)
        found = 0.0
        for y0, y1 in rows:
            # a band the window cuts is padded with black where it meets the frame's edge: the
            # detector finds a line that touches its input's border poorly
            pad = (y1 - y0) // 2
            top, bottom = (pad if y0 == 0 else 0), (pad if y1 == clip.height else 0)
            strips = [
                cv2.copyMakeBorder(
                    frames[i, y0:y1], top, bottom, 0, 0, cv2.BORDER_CONSTANT, value=16
                )
                for i in picked
            ]
            share = band_text_share(self.detector, strips, scale, (top, top + y1 - y0))
            found = max(found, share)
        return found


def band_text_share(
    detector: TextDetector,
    strips: Sequence[np.ndarray],
    scale: float,
    rows: tuple[int, int] | None = None,
) -> float:
    """The largest share of a band strip (one per sampled frame, all one size; `rows` of it
    are the clip's, the rest padding) covered by subtitle-like text lines: lines at least as
    wide as tall whose middle is in the middle half of the strip (subtitles are centred), or
    that hold still across the sampled frames (IoU 0.9: the overlay's own timing, not the
    picture's)."""
    per_frame = [text_lines(detector, strip, scale) for strip in strips]
    height, width = strips[0].shape
    top, bottom = rows or (0, height)
    best = 0.0
    for index, lines in enumerate(per_frame):
        others = [line for k, frame in enumerate(per_frame) if k != index for line in frame]
        area = sum(
            (x1 - x0) * max(0, min(y1, bottom) - max(y0, top))
            for x0, y0, x1, y1 in lines
            if subtitle_like((x0, y0, x1, y1), (width / 2, width / 4), others)
        )
        best = max(best, area / ((bottom - top) * width))
    return best


OVERLAY_COLUMNS = (
    pa.field("overlay_subtitle_area", pa.float32()),
    pa.field("overlay_logo_share", pa.float32()),
)


@register_clip_stage("overlays", settings=OverlayConfig, columns=OVERLAY_COLUMNS, order=45)
def overlay_stage(settings: OverlayConfig) -> ClipStage | None:
    """Before quality and encode (which releases the frames)."""
    return OverlayStage(settings) if settings.enabled else None
