"""Clip splitting: consecutive 2-second windows from each scene's start, 16 frames each.

Frames arrive in display order, each flagged when it starts a scene (the detector's cuts, and the
segment's first frame). Window k of a scene starting at time t_s covers [t_s + 2k, t_s + 2k + 2);
its 16 samples are the frames shown at t_s + 2k + m/8 (m = 0..15), i.e. the last frame whose start
time is not after that instant. Times come from the probe's timeline, so this is exact for any
source frame rate, variable ones included. A window is emitted only once its last frame arrived
with no scene start inside it, so a clip never holds frames from both sides of a cut. Windows cut
short (a scene's tail under 2 s, the end of a segment or film) are dropped and reported.

Frames flagged `in_transition` (a fade or dissolve between shots, stages/scenes/) form a scene of
their own in which no window opens: the shot before ends where the transition starts, the shot
after starts where it ends, and each transition is reported once as a `transition` drop.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import cv2
import numpy as np

from core.film import Drop, OverlayRecord, SourceScale, WindowRecord
from core.frames import ClipFrames, block_mean, chroma_region, i420_planes, into
from core.record import Clip, make_clip_id
from core.settings import Settings, check_choice
from stages.base import Frame
from stages.crop import CropBox
from stages.probe import FilmInfo

EPS = 1e-6
_BLACK_Y, _GREY_UV = 16, 128  # black in limited-range YUV: what pad mode's bars are made of
RESIZE_MODES = ("center_crop", "pad", "stretch")
IMAGE_FORMATS = ("jpeg", "png")


@dataclass
class ClipConfig(Settings):
    seconds: float = 2.0
    """Length of a clip window in seconds (paper: 2 s)."""
    num_frames: int = 16
    """Frames sampled uniformly in a window (paper: 16, so 8 fps)."""
    height: int = 480
    width: int = 720
    resize: str = "center_crop"
    """How the cropped picture becomes height x width: center_crop (to the target aspect, then
    resize), pad (letterbox with black), or stretch (distorts; for comparison only)."""
    crf: int = 20
    """x264 constant rate factor of the stored clip video (lower is better and larger)."""
    preset: str = "ultrafast"
    """x264 preset of the stored clip video. Measured on the sample's clips: ultrafast 72 ms and
    264 KiB per clip, superfast 124 ms and 220 KiB, veryfast 273 ms and 145 KiB, all about 47 dB
    PSNR at crf 20 (see README "Benchmark")."""
    image_format: str = "jpeg"
    """Encoding of first_frame: jpeg or png."""
    avoid_overlays: bool = True
    """center_crop: move the window inside the crop box, where the box is wider or taller than
    the clips, away from the film's burned-in subtitle bands and logos (stages/burned_in/overlays.py);
    False keeps it centred. Films without overlays keep the centred window either way."""
    min_source_height: int = 0
    """A film whose clips show fewer source rows than this (the crop, cut to the clip's aspect
    as the picture is shown: a 480x360 film shows 480x320, upscaled 1.5 times; a 720x480 DVD
    of 4:3 in 8:9 pixels shows 426 rows) gives no clips: each window becomes a
    `small_source` drop naming the upscale. 480 refuses every upscaled film at the default
    720x480. 0 keeps them all; summary.json, the console line and the report name the upscale
    either way."""

    def validate(self) -> None:
        check_choice("clips", "resize", self.resize, RESIZE_MODES)
        check_choice("clips", "image_format", self.image_format, IMAGE_FORMATS)

    @property
    def clip_fps(self) -> float:
        return self.num_frames / self.seconds


@dataclass
class _Window:
    start_time: float
    start_frame: int
    end_frame: int  # exclusive
    sample_indices: list[int]
    fits: bool  # False when the source ends inside the window: it can only become a drop
    samples: dict[int, np.ndarray] = field(default_factory=dict)


def output_region(
    crop: CropBox, config: ClipConfig, aspect: float = 1.0
) -> tuple[int, int, int, int]:
    """The source rectangle (x, y, w, h, stored pixels) whose pixels a clip shows. `aspect` is
    the width over the height of one source pixel (FilmInfo.pixel_aspect): center_crop cuts the
    box to the clip's aspect as the picture is shown, so a 720x480 box of 32:27 pixels (a 16:9
    picture) gives a 608x480 region, which the clip's resize widens back to 3:2."""
    config.validate()
    if config.resize != "center_crop":
        return crop.x, crop.y, crop.w, crop.h
    target = config.width / config.height
    # aspect 1.0 leaves every product below as it was: square films keep their regions exactly
    if crop.w * aspect / crop.h > target:
        w = min(crop.w, int(round(crop.h * target / aspect / 2)) * 2)
        return crop.x + (crop.w - w) // 2, crop.y, w, crop.h
    h = min(crop.h, int(round(crop.w * aspect / target / 2)) * 2)
    return crop.x, crop.y + (crop.h - h) // 2, crop.w, h


Box = tuple[int, int, int, int]  # x, y, w, h in source pixels
SUBTITLE_BANDS, LOGOS = "subtitle_bands", "logos"  # OverlayRecord's keys, kept in WindowRecord


def place_window(
    crop: CropBox, config: ClipConfig, overlays: OverlayRecord | None, aspect: float = 1.0
) -> WindowRecord:
    """The part of the crop box every clip of a film shows. `output_region` sizes it and
    centres it; where the box is wider (or taller) than the clips' aspect, the window may slide
    along that side. It goes where it shows the fewest rows of subtitle band, then where it
    shows no logo at all, then as near the centre as it can: a 4:3 film's window rises clear of
    a bottom subtitle band, a 16:9 film's slides sideways off a corner logo. Subtitles come
    first (a band is rows across the picture; a clip that shows a line is lost). A logo is on
    every frame, so a window that still shows one of them saves no clip: the window moves for
    logos only where it leaves them all, which also keeps it centred where the logo pass
    mistook steady picture edges for several logos. With no overlay (or `clips.avoid_overlays`
    off) it stays centred, so such films keep their clip ids. `aspect`: the source pixels'
    width over height (output_region); the window is 3:2 as shown, its box in stored pixels."""
    centred = output_region(crop, config, aspect)
    found = _overlay_boxes(crop, overlays)
    region = centred
    if config.avoid_overlays and any(found.values()):

        def cost(candidate: Box) -> tuple:
            bands = sum(_shown_rows(candidate, box) for box in found[SUBTITLE_BANDS])
            logos = any(_shown_area(candidate, box) for box in found[LOGOS])
            distance = abs(candidate[0] - centred[0]) + abs(candidate[1] - centred[1])
            return bands, logos, distance, candidate

        region = min(_slides(crop, centred), key=cost)
    before = {k: [b for b in boxes if _shown_area(centred, b)] for k, boxes in found.items()}
    after = {k: [b for b in boxes if _shown_area(region, b)] for k, boxes in found.items()}
    x, y, w, h = region
    return WindowRecord(
        x=x,
        y=y,
        w=w,
        h=h,
        centred=list(centred),
        avoided=_as_overlays({k: [b for b in before[k] if b not in after[k]] for k in found}),
        shown=_as_overlays(after),
    )


def _overlay_boxes(crop: CropBox, overlays: OverlayRecord | None) -> dict[str, list[Box]]:
    """The overlays as boxes; a subtitle band spans the crop box's width."""
    if overlays is None:
        return {SUBTITLE_BANDS: [], LOGOS: []}
    bands = [(crop.x, y0, crop.w, y1 - y0) for y0, y1 in overlays.subtitle_bands]
    logos = [(x, y, w, h) for x, y, w, h in overlays.logos]
    return {SUBTITLE_BANDS: bands, LOGOS: logos}


def _slides(crop: CropBox, centred: Box) -> list[Box]:
    """Every window of the centred one's size inside the crop box."""
    x, y, w, h = centred
    if w < crop.w:
        return [(left, y, w, h) for left in range(crop.x, crop.x + crop.w - w + 1)]
    if h < crop.h:
        return [(x, top, w, h) for top in range(crop.y, crop.y + crop.h - h + 1)]
    return [centred]


def _shown_area(region: Box, box: Box) -> int:
    """Pixels of `box` that reach a clip cut from `region`."""
    x0, y0, x1, y1 = _reach(region)
    bx, by, bw, bh = box
    return max(0, min(x1, bx + bw) - max(x0, bx)) * max(0, min(y1, by + bh) - max(y0, by))


def _shown_rows(region: Box, band: Box) -> int:
    """Rows of a subtitle band that reach a clip cut from `region` (a line of text runs across
    the picture: what counts is how much of its height the window shows)."""
    _, y0, _, y1 = _reach(region)
    _, by, _, bh = band
    return max(0, min(y1, by + bh) - max(y0, by))


def _reach(region: Box) -> tuple[int, int, int, int]:
    """x0, y0, x1, y1 of the source pixels a clip cut from `region` takes: the region widened
    to even edges, since a chroma sample covers two pixels (core.frames.chroma_region)."""
    x, y, w, h = region
    return x - x % 2, y - y % 2, x + w + (x + w) % 2, y + h + (y + h) % 2


def _as_overlays(boxes: dict[str, list]) -> dict[str, list[list[int]]]:
    """Boxes back in OverlayRecord's terms: subtitle bands as rows [y0, y1]."""
    bands = [[y, y + h] for _, y, _, h in boxes[SUBTITLE_BANDS]]
    return {SUBTITLE_BANDS: bands, LOGOS: [list(box) for box in boxes[LOGOS]]}


def source_scale(region: Box, config: ClipConfig, aspect: float = 1.0) -> SourceScale | None:
    """How many times the clips enlarge the picture they show (`region`, the film's window:
    `fit_frame`'s scale, the larger of the two for center_crop and stretch, the smaller for
    pad), or None when they do not. The picture is taken as shown (`aspect`: a source pixel's
    width over its height), so a 16:9 DVD's 608x480 window of 32:27 pixels, shown 720x480, is
    not upscaled: widening its pixels is the format's own display, and its rows, which hold
    its detail, are kept one for one. A 4:3 DVD's 720x426 window of 8:9 pixels (shown 640x426)
    is upscaled 1.13 times."""
    _, _, w, h = region
    shown_w = w * aspect  # aspect 1.0: w itself, so square films keep their figures exactly
    along = (config.width / shown_w, config.height / h)
    factor = min(along) if config.resize == "pad" else max(along)
    if round(factor, 2) <= 1.0:
        return None
    return SourceScale(factor=round(factor, 3), width=int(round(shown_w)), height=h)


def _refusal(region: tuple, scale: SourceScale | None, config: ClipConfig) -> str | None:
    """Why no window of the film becomes a clip (clips.min_source_height), or None."""
    if region[3] >= config.min_source_height:
        return None
    upscaled = f"{scale.note}: " if scale is not None else ""
    return f"{upscaled}{region[3]} source rows, under clips.min_source_height {config.min_source_height}"


def fit_frame(
    image: np.ndarray,
    region: tuple[int, int, int, int],
    config: ClipConfig,
    size: tuple[int, int] | None = None,
    fill: int = 0,
    out: np.ndarray | None = None,
    aspect: float = 1.0,
) -> np.ndarray:
    """Cut `region` (x, y, w, h) out of a picture (RGB, or one plane) and bring it to `size`
    (w, h; the clip's by default): the one geometry rule every representation goes through.
    The result has square pixels: `aspect` (a source pixel's width over its height) matters
    to pad alone, since center_crop's region already has the clip's shape as shown and
    stretch fills the clip whatever the shape."""
    width, height = size or (config.width, config.height)
    x, y, w, h = region
    picture = image[y : y + h, x : x + w]
    if config.resize != "pad":
        return _resize(picture, width, height, out)
    shown_w = w * aspect
    scale = min(width / shown_w, height / h)
    inner_w, inner_h = int(round(shown_w * scale)), int(round(h * scale))
    if out is None:
        out = np.empty((height, width, *image.shape[2:]), np.uint8)
    out[...] = fill
    top, left = (height - inner_h) // 2, (width - inner_w) // 2
    _resize(picture, inner_w, inner_h, out[top : top + inner_h, left : left + inner_w])
    return out


def fit_i420(
    planes: tuple[np.ndarray, np.ndarray, np.ndarray],
    region: tuple[int, int, int, int],
    config: ClipConfig,
    aspect: float = 1.0,
) -> np.ndarray:
    """Fit a source frame's Y, U, V planes into one (H * 3/2) x W I420 array, each plane scaled
    once, straight into place (`aspect`: fit_frame's)."""
    height, width = config.height, config.width
    if height % 2 or width % 2:
        raise ValueError(f"clips.height and clips.width must be even, got {height}x{width}")
    out = np.empty((height * 3 // 2, width), np.uint8)
    targets = i420_planes(out, height, width)
    fill = (_BLACK_Y, _GREY_UV, _GREY_UV)
    regions = (region, chroma_region(region), chroma_region(region))
    for plane, area, target, value in zip(planes, regions, targets, fill):
        fit_frame(plane, area, config, (target.shape[1], target.shape[0]), value, target, aspect)
    return out


class _Once:
    """A value computed on first use only: a frame is converted at most once, whichever
    windows sample it."""

    def __init__(self, make):
        self._make, self._value, self._done = make, None, False

    def __call__(self):
        if not self._done:
            self._value, self._done = self._make(), True
        return self._value


def _resize(image: np.ndarray, width: int, height: int, out: np.ndarray | None) -> np.ndarray:
    if image.shape[1] == width and image.shape[0] == height:
        if out is None:
            return np.ascontiguousarray(image)
        out[...] = image
        return out
    shrinking = width * height < image.shape[0] * image.shape[1]
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    if shrinking:
        image = _shrink_by_whole_factor(image, width, height)
    if out is None:
        return cv2.resize(image, (width, height), interpolation=interpolation)
    return into(cv2.resize(image, (width, height), dst=out, interpolation=interpolation), out)


def _shrink_by_whole_factor(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Average k x k blocks first when the picture is at least k times the target (a 1080p film's
    frames into 720x480): OpenCV's area resize by a whole factor is a plain block mean, nine times
    faster than its general case, which then has only the rest to do. At most k - 1 edge pixels
    of the source are left out; pictures under twice the target size are untouched."""
    factor = min(image.shape[1] // width, image.shape[0] // height)
    return block_mean(image, factor) if factor >= 2 else image


class ClipSplitter:
    """A frame-level stage: `process(frame)` returns the Clips and Drops the frame completes, for
    one film segment; `finish(end)` closes the last scene.

    `frame.planes()` is called only for sampled frames, so the other two thirds of the frames are
    never touched. Each sample is fitted once into I420 (then passed through `to_bt601`, which
    brings a source of another colour matrix to the one clips are stored in); a clip carries its
    samples as `ClipFrames`.
    """

    def __init__(
        self,
        config: ClipConfig,
        film: FilmInfo,
        region: Box,
        ip: str,
        segment_index: int,
        is_last_segment: bool,
        to_bt601: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.config, self.film, self.ip = config, film, ip
        self.to_bt601 = to_bt601 or (lambda i420: i420)
        self.segment_index = segment_index
        self.is_last_segment = is_last_segment
        self.region = region  # the film's window (place_window): what every clip shows
        scale = source_scale(region, config, film.pixel_aspect)
        self.refusal = _refusal(region, scale, config)
        # start time of every frame, plus the end of the last one, so a window that ends exactly
        # with the film still fits
        self.times = film.frame_times() + [film.duration]
        self.scene_index = -1
        self.in_transition = False  # the open scene is a transition span: no windows in it
        self.scene_start_time = 0.0
        self.scene_clips = 0
        self.clip_count = 0
        self.window: _Window | None = None
        self.previous: tuple[int, _Once] | None = None  # the last frame of the open scene
        self.scenes: list[list[int]] = []  # [start_frame, end_frame_exclusive]

    def process(self, frame: Frame) -> list[Clip | Drop]:
        index = frame.index
        out: list[Clip | Drop] = []
        if frame.starts_scene or self.scene_index < 0 or frame.in_transition != self.in_transition:
            out += self._close_scene(index)
            self._open_scene(index, frame.in_transition)
        out += self._close_passed_windows(index)
        fitted = _Once(
            lambda: self.to_bt601(
                fit_i420(frame.planes(), self.region, self.config, self.film.pixel_aspect)
            )
        )
        shown = (index, fitted)
        if frame.is_flash and self.previous is not None:
            shown = self.previous  # a one-frame flash is not sampled: the frame before it is
        self.previous = shown
        self._take_samples(index, shown)
        window = self.window
        if window is not None and window.fits and index == window.end_frame - 1:
            out += self._close_window()
            # When the 2-s boundary falls inside this frame (23.976 fps, say), the frame on
            # screen at the next window's start is this one: it is that window's first sample.
            self._take_samples(index, shown)
        return out

    def _take_samples(self, index: int, shown: tuple[int, _Once]) -> None:
        """Take frame `index` for the samples due at it; `shown` is the frame stored in its
        place (itself, or the frame before a flash), whose index the clip records."""
        window = self.window
        if window is None or not window.fits or self.refusal is not None:
            return
        for m, sample in enumerate(window.sample_indices):
            if sample == index:
                window.sample_indices[m], window.samples[m] = shown[0], shown[1]()

    def finish(self, end: int) -> list[Clip | Drop]:
        """End of the segment (`end` is its exclusive end frame)."""
        reason = "scene_tail" if self.is_last_segment else "segment_tail"
        return self._close_scene(end, reason)

    # -- windows -------------------------------------------------------------------------------

    def _open_scene(self, index: int, transition: bool = False) -> None:
        self.scene_index += 1
        self.scene_clips = 0
        self.previous = None  # never show a frame of the scene before in place of a flash
        self.scene_start_time = self.times[index]
        self.scenes.append([index, index])
        self.in_transition = transition
        if transition:
            self.window = None
        else:
            self._open_window(self.scene_start_time)

    def _open_window(self, start_time: float) -> None:
        end_time = start_time + self.config.seconds
        step = self.config.seconds / self.config.num_frames
        samples = [
            bisect.bisect_right(self.times, start_time + m * step + EPS) - 1
            for m in range(self.config.num_frames)
        ]
        self.window = _Window(
            start_time=start_time,
            start_frame=samples[0],  # the frame on screen when the window starts
            end_frame=bisect.bisect_left(self.times, end_time - EPS),
            sample_indices=samples,
            fits=end_time <= self.times[-1] + EPS,
        )

    def _close_passed_windows(self, index: int) -> list:
        """Frames skipped by the decoder can jump past a window's last frame: close it then (it
        still becomes a clip if all its samples arrived)."""
        out = []
        while self.window is not None and self.window.fits and index >= self.window.end_frame:
            out += self._close_window()
        return out

    def _close_window(self) -> list[Clip | Drop]:
        window = self.window
        assert window is not None  # called only while a window is open
        out: list[Clip | Drop]
        if self.refusal is not None:
            out = [self._drop(window, "small_source", self.refusal)]
        elif len(window.samples) < self.config.num_frames:
            out = [
                self._drop(
                    window,
                    "decode_gap",
                    f"{len(window.samples)} of {self.config.num_frames} sampled frames decoded",
                )
            ]
        else:
            out = [self._make_clip(window)]
        self.scenes[-1][1] = window.end_frame
        self._open_window(window.start_time + self.config.seconds)
        return out

    def _close_scene(self, stop_index: int, reason: str = "scene_tail") -> list:
        if self.scene_index < 0:
            return []
        self.scenes[-1][1] = stop_index
        if self.in_transition:
            start = self.scenes[-1][0]
            times = self.times
            return [
                Drop(
                    reason="transition",
                    start_frame=start,
                    end_frame=stop_index,
                    start_time=times[start],
                    end_time=times[stop_index],
                )
            ]
        window, self.window = self.window, None
        if window is None or window.start_frame >= stop_index:
            return []
        if self.scene_clips == 0 and reason == "scene_tail":
            reason = "short_scene"
        drop = self._drop(window, reason, "")
        drop.end_frame = stop_index
        drop.end_time = self.times[stop_index]
        return [drop]

    def _drop(self, window: _Window, reason: str, detail: str) -> Drop:
        return Drop(
            reason=reason,
            start_frame=window.start_frame,
            end_frame=window.end_frame,
            start_time=window.start_time,
            end_time=window.start_time + self.config.seconds,
            detail=detail,
        )

    def _make_clip(self, window: _Window) -> Clip:
        cfg, film = self.config, self.film
        frames = ClipFrames(np.stack([window.samples[m] for m in range(cfg.num_frames)]))
        indices = list(window.sample_indices)
        clip = Clip(
            clip_id=make_clip_id(
                film.film_id, indices, self.region, (cfg.height, cfg.width), cfg.resize
            ),
            film_id=film.film_id,
            film_name=film.film_name,
            ip=self.ip,
            segment_index=self.segment_index,
            scene_index=self.scene_index,
            clip_index=self.clip_count,
            start_frame=window.start_frame,
            end_frame=window.end_frame,
            start_time=window.start_time,
            end_time=window.start_time + cfg.seconds,
            frame_indices=indices,
            crop_x=self.region[0],
            crop_y=self.region[1],
            crop_w=self.region[2],
            crop_h=self.region[3],
            height=cfg.height,
            width=cfg.width,
            num_frames=cfg.num_frames,
            fps=cfg.clip_fps,
            source_fps=film.fps,
            frames=frames,
        )
        self.clip_count += 1
        self.scene_clips += 1
        return clip
