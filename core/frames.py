"""Pixels in memory, kept in the decoder's YUV 4:2:0 planes from decoding to encoding.

A decoded film frame is read as three plane views (`yuv_planes`, no copy). Only the frames a clip
samples are cropped and scaled, plane by plane, straight into the layout the encoder takes
(`fit_i420`); nothing is converted to RGB on the way. Every consumer asks a `ClipFrames` for the
representation it needs, and each one is computed once, on first request:

    frames.i420(k)        frame k as an (H * 3/2) x W I420 array (x264's and OpenCV's layout)
    frames.luma()         N x H x W luma planes (limited range 16-235), a view, no copy
    frames.grey((h, w))   N grey frames at h x w, full range 0-255 (what RGB-to-grey gives)
    frames.rgb()          N x H x W x 3 RGB uint8 (frames.rgb_frame(k): frame k alone)

The planes are BT.601, limited range, like every H.264 stream without a colour tag; `fit_i420`
brings other sources there. A `ClipFrames` built from RGB arrays (`ClipFrames.from_rgb`, for tests
and decoded clips) answers the same questions, from its RGB.
"""

from __future__ import annotations

from functools import cache

import av
import cv2
import numpy as np
from av.video.reformatter import Colorspace, VideoReformatter

# Limited-range luma (16-235) to the full 0-255 grey of the decoded picture. Rounded down, as
# FFmpeg's YUV-to-RGB conversion does: grey then matches, level for level, the RGB-to-grey of the
# frames motion levels were calibrated on (rounding to nearest shifted it by +0.5 on average).
_FULL_RANGE_LUT = np.clip((np.arange(256) - 16) * 255 // 219, 0, 255).astype(np.uint8)
_BT601 = (5, 6)  # AVColorSpace values of BT.601 (BT470BG, SMPTE170M)
_UNTAGGED = 2  # AVCOL_SPC_UNSPECIFIED: decoders assume BT.601 at this size, as we do
_JPEG_RANGE = 2  # AVCOL_RANGE_JPEG: full-range samples


class ClipFrames:
    """The N sampled frames of a clip, held as I420 (or as RGB when built from RGB)."""

    def __init__(self, i420: np.ndarray):
        """`i420`: N x (H * 3/2) x W uint8, each frame's Y, U and V planes one after another."""
        if i420.ndim != 3 or i420.dtype != np.uint8 or i420.shape[1] % 3:
            raise ValueError(f"expected N x (H * 3/2) x W uint8 I420 frames, got {i420.shape}")
        self._i420: np.ndarray | None = i420
        self._rgb: np.ndarray | None = None
        self._grey: dict[tuple[int, int], list[np.ndarray]] = {}
        self.count, self.height, self.width = len(i420), i420.shape[1] * 2 // 3, i420.shape[2]
        self.memo: dict[str, object] = {}
        """What one stage measured on the frames that a later stage reads again (the motion
        stage's flow, which camera motion fits): kept as long as the frames are."""

    @classmethod
    def from_rgb(cls, rgb: np.ndarray) -> ClipFrames:
        """Frames given as N x H x W x 3 RGB uint8 (tests, clips decoded from a shard): every
        representation is then made from the RGB, I420 only when asked for (BT.601 by OpenCV,
        which decoders assume for untagged H.264)."""
        rgb = np.asarray(rgb)
        if rgb.ndim != 4 or rgb.shape[-1] != 3 or rgb.dtype != np.uint8:
            raise ValueError(
                f"expected N x H x W x 3 uint8 RGB frames, got {rgb.shape} {rgb.dtype}"
            )
        frames = cls.__new__(cls)
        frames._i420, frames._rgb, frames._grey, frames.memo = None, rgb, {}, {}
        frames.count, frames.height, frames.width = rgb.shape[:3]
        return frames

    def __len__(self) -> int:
        return self.count

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.count, self.height, self.width

    def i420(self, k: int) -> np.ndarray:
        return self._planar()[k]

    def luma(self) -> np.ndarray:
        """N x H x W luma, limited range."""
        return self._planar()[:, : self.height]

    def grey(self, size: tuple[int, int]) -> list[np.ndarray]:
        """The frames as full-range grey at `size` (h, w): INTER_AREA when shrinking."""
        if size not in self._grey:
            if self._rgb is not None:
                grey = [resize(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), size) for f in self._rgb]
            else:
                grey = [cv2.LUT(resize(y, size), _FULL_RANGE_LUT) for y in self.luma()]
            self._grey[size] = grey
        return self._grey[size]

    def rgb(self) -> np.ndarray:
        """N x H x W x 3 RGB uint8 (converted once, then kept)."""
        if self._rgb is None:
            # each frame converted straight into its place: converting into new arrays and
            # stacking them cost three times as much (the copy, and memory new to the process)
            rgb = np.empty((*self.shape, 3), np.uint8)
            for frame, place in zip(self._planar(), rgb):
                into(cv2.cvtColor(frame, cv2.COLOR_YUV2RGB_I420, dst=place), place)
            self._rgb = rgb
        return self._rgb

    def rgb_frame(self, k: int) -> np.ndarray:
        """Frame k alone as H x W x 3 RGB (a stage that looks at one or two frames should not pay
        for sixteen)."""
        if self._rgb is not None:
            return self._rgb[k]
        return cv2.cvtColor(self.i420(k), cv2.COLOR_YUV2RGB_I420)

    def first_bgr(self) -> np.ndarray:
        """Frame 0 as BGR, the order OpenCV's image encoders take."""
        if self._rgb is not None:
            return cv2.cvtColor(self._rgb[0], cv2.COLOR_RGB2BGR)
        return cv2.cvtColor(self.i420(0), cv2.COLOR_YUV2BGR_I420)

    def _planar(self) -> np.ndarray:
        if self._i420 is None:
            rgb = self.rgb()
            if self.height % 2 or self.width % 2:
                raise ValueError(f"I420 needs even sizes, got {self.height}x{self.width}")
            self._i420 = np.stack(
                [cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2YUV_I420) for f in rgb]
            )
        return self._i420


def into(result: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out`, holding `result`: what an OpenCV call given `dst=out` returned (it writes in place
    where `out` has the result's shape and type, and returns a new array where it cannot)."""
    if result is not out:
        out[...] = result
    return out


def as_clip_frames(frames) -> ClipFrames:
    """Accept a ClipFrames or N x H x W x 3 RGB uint8 frames."""
    return frames if isinstance(frames, ClipFrames) else ClipFrames.from_rgb(frames)


# ----------------------------------------------------------------------------- decoded frames


class PlaneSource:
    """Reads one segment's decoded frames: upright yuv420p planes for the frames clips sample, and
    the small BGR picture scene detection looks at, for every frame.

    8-bit limited-range yuv420p, the format of nearly every film, is read in place. Other formats
    (full range, 10 bits, 4:2:2, ...) are converted by swscale, with one context kept for the
    whole segment (a context per frame cost more than the conversion), on the calling thread.
    """

    def __init__(self, rotation: int, small_size: tuple[int, int], small_box: tuple[int, ...]):
        """`small_size`: (w, h) of the whole decoded frame at detection size; `small_box`: the
        picture's box (x0, y0, x1, y1) in that frame once upright."""
        self.rotation = rotation
        self.small_size = small_size
        self.small_box = small_box
        self.matrix = _UNTAGGED  # colour matrix of the last frame read for its planes
        self._to_planes = VideoReformatter()
        self._to_small = VideoReformatter()
        self._to_bt601 = VideoReformatter()

    def planes(self, frame: av.VideoFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frame's Y, U, V planes, upright, 8-bit limited range (views where possible)."""
        self.matrix = frame.colorspace
        if frame.format.name != "yuv420p" or frame.color_range == _JPEG_RANGE:
            frame = self._to_planes.reformat(
                frame, format="yuv420p", dst_color_range="MPEG", threads=1
            )
        y, u, v = yuv_planes(frame)
        if not self.rotation:
            return y, u, v
        turns = self.rotation // 90
        y, u, v = (np.ascontiguousarray(np.rot90(p, k=turns)) for p in (y, u, v))
        return y, u, v

    def small_bgr(self, frame: av.VideoFrame) -> np.ndarray:
        """The cropped picture at detection size, in BGR as PySceneDetect expects.

        swscale scales the whole frame, filtering as it shrinks. OpenCV's bilinear resize of the
        planes (a third cheaper; what PySceneDetect applies to frames it decodes itself) samples
        without filtering, and the aliasing moved or lost 6 of the sample film's 12 cuts."""
        width, height = self.small_size
        small = self._to_small.reformat(
            frame, width=width, height=height, format="bgr24", threads=1
        ).to_ndarray()
        if self.rotation:
            small = np.rot90(small, k=self.rotation // 90)
        x0, y0, x1, y1 = self.small_box
        return np.ascontiguousarray(small[y0:y1, x0:x1])

    def to_bt601(self, i420: np.ndarray) -> np.ndarray:
        """A fitted I420 frame in the BT.601 matrix every untagged clip is read with (a no-op
        unless the source is tagged with another matrix, such as BT.709 in HD films)."""
        if self.matrix in (*_BT601, _UNTAGGED):
            return i420
        frame = av.VideoFrame.from_ndarray(i420, format="yuv420p")
        converted = self._to_bt601.reformat(
            frame, src_colorspace=self.matrix, dst_colorspace=Colorspace.ITU601, threads=1
        )
        return converted.to_ndarray()


def chroma_region(region: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """The chroma samples covering a luma region (x, y, w, h): a region starting on an odd pixel
    starts its chroma half a pixel early, a shift no one can see."""
    x, y, w, h = region
    return x // 2, y // 2, (x + w + 1) // 2 - x // 2, (y + h + 1) // 2 - y // 2


def i420_planes(i420: np.ndarray, height: int, width: int) -> list[np.ndarray]:
    """Views of the Y, U and V planes inside one (H * 3/2) x W I420 frame."""
    quarter = height // 4
    u = i420[height : height + quarter].reshape(height // 2, width // 2)
    v = i420[height + quarter : height + 2 * quarter].reshape(height // 2, width // 2)
    return [i420[:height], u, v]


def yuv_planes(frame: av.VideoFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of a yuv420p frame's three planes, line padding cut off (each view keeps the frame's
    buffer alive)."""
    y, u, v = (
        np.frombuffer(memoryview(p), np.uint8).reshape(p.height, p.line_size)[:, : p.width]
        for p in frame.planes
    )
    return y, u, v


def resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`image` at `size` (h, w): INTER_AREA when shrinking (it averages: no aliasing), linear
    when enlarging; unchanged (not copied) when already that size. Grey frames for motion and
    quality, and MemFlow's input, are all made with it."""
    height, width = size
    if image.shape[:2] == (height, width):
        return image
    shrinking = image.shape[0] * image.shape[1] > height * width
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def block_mean(image: np.ndarray, factor: int) -> np.ndarray:
    """`image` shrunk `factor` times, each pixel the mean of a whole `factor` x `factor` block
    (edge pixels that fill no whole block are left out). OpenCV's area resize by a whole factor
    is a plain block mean, many times faster than by any other factor."""
    rows, cols = max(1, image.shape[0] // factor), max(1, image.shape[1] // factor)
    whole = image[: rows * factor, : cols * factor]
    return cv2.resize(whole, (cols, rows), interpolation=cv2.INTER_AREA)


@cache
def hann_window(height: int, width: int) -> np.ndarray:
    """The Hann window phase correlation weighs a height x width picture with (taking the edges'
    wrap-around away), made once per size and shared: read-only, since every caller gets the
    same array (cv2.phaseCorrelate reads it; it weighs its float32 inputs in place, not this)."""
    window = cv2.createHanningWindow((width, height), cv2.CV_32F)
    window.flags.writeable = False
    return window
