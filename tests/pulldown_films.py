"""Labelled field-structure films (issue 35), made from the bundled media with FFmpeg's own
filters where it has them, and every frame labelled with the moments its two fields show.

- `telecined_film`: the frames of bigbuckbunny_5s.mp4 taken as 23.976 film pictures, through
  libavfilter's `telecine` (3:2, top field first) to 29.97 frames a second, stored with
  progressive flags (the wrong flags many files carry: the pictures must decide).
- `interlaced_film`: a pan over a still of the same film at 59.94 moments a second, woven two
  moments to a frame (top field first; PyAV's FFmpeg has no `interlace` filter, so the weave is
  done here: even rows from one moment, odd rows from the next), stored with x264's interlaced
  flags.
- `hybrid_film`: the telecined film's first pictures, then an interlaced pan (credits or effects
  made on video): both in one 29.97 stream.
- `crawl_hybrid_film`: the telecined film's first pictures, then credits crawling up over black
  1.5 pixels a field, woven two moments to a frame: a slow crawl, whose frames show no teeth;
  `progressive_crawl_film`: the same crawl with one moment a frame.
- `held_drawings_film`: truly interlaced limited animation: the bundled film's pictures taken as
  drawings, each shown for 3, 2 and 4 fields in turn at 59.94 fields a second (drawings timed
  on fields, no 3:2 cycle), woven two fields to a frame, top field first, with x264's interlaced
  flags. A drawing that changes between a frame's two fields combs it, and a neighbour's field
  mends it, as in telecine, but at every place of the cycle of five.
  `few_changes_film`: five drawings held 21 to 25 fields each: two combed frames in all.
- `fine_lines_film`: progressive 23.976, a pan over a picture full of fine horizontal line art
  (hatching one pixel thick every four rows, thin hair-like strands, dark scan lines every third
  row across the whole picture): nothing in it is combed.

A label is (top, bottom): the index of the moment (a film picture, or a pan position) each
field shows; a frame is whole when both are the same. `pictures` holds every moment as an
RGB array at the film's size, so a test can tell which moment a clip frame shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from core.video import mux_pictures
from stages.sources.field_restore import pulled_frames

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "media" / "bigbuckbunny_5s.mp4"
SIZE = (720, 480)  # w, h: a DVD frame (square pixels here: shapes are another issue's)
FILM_RATE = Fraction(24000, 1001)
VIDEO_RATE = Fraction(30000, 1001)


@dataclass
class FieldFilm:
    path: Path
    labels: list[tuple[int, int]]  # per stored frame: the moments of its top and bottom field
    pictures: np.ndarray  # every moment, N x H x W x 3 RGB
    rate: Fraction

    def combed_frames(self) -> list[int]:
        return [i for i, (top, bottom) in enumerate(self.labels) if top != bottom]


def film_pictures(count: int | None = None) -> np.ndarray:
    """The bundled film's frames at SIZE, RGB."""
    out = []
    with av.open(str(SOURCE)) as container:
        for frame in container.decode(video=0):
            out.append(
                cv2.resize(frame.to_ndarray(format="rgb24"), SIZE, interpolation=cv2.INTER_AREA)
            )
            if count is not None and len(out) == count:
                break
    return np.stack(out)


def pan_pictures(count: int, speed: int = 6) -> np.ndarray:
    """`count` moments of a pan across a still of the bundled film, `speed` pixels a moment."""
    still = film_pictures(40)[-1]
    wide = cv2.resize(still, (SIZE[0] * 2, SIZE[1]), interpolation=cv2.INTER_CUBIC)
    return np.stack(
        [wide[:, k * speed % SIZE[0] : k * speed % SIZE[0] + SIZE[0]] for k in range(count)]
    )


def telecined(pictures: np.ndarray) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
    """libavfilter's `telecine` (pattern 23, top field first) over `pictures` taken at 23.976,
    and each output frame's label, read back from its rows (the filter copies rows exactly)."""
    height, width = pictures.shape[1:3]
    arrays = [frame.to_ndarray(format="rgb24") for frame in _telecine(pictures, width, height)]
    return arrays, [_label(array, pictures, k * 4 // 5) for k, array in enumerate(arrays)]


def _telecine(pictures: Iterable[np.ndarray], width: int, height: int) -> Iterator[av.VideoFrame]:
    """libavfilter's `telecine` (3:2, top field first) over RGB pictures taken at 23.976."""
    graph = av.filter.Graph()
    source = graph.add(
        "buffer",
        f"video_size={width}x{height}:pix_fmt=rgb24:time_base=1001/24000:frame_rate=24000/1001"
        ":pixel_aspect=1/1",
    )
    telecine = graph.add("telecine", "first_field=top:pattern=23")
    sink = graph.add("buffersink")
    source.link_to(telecine)
    telecine.link_to(sink)
    graph.configure()
    for index, picture in enumerate(pictures):
        frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
        frame.pts, frame.time_base = index, Fraction(1001, 24000)
        graph.push(frame)
        yield from pulled_frames(graph)
    graph.push(None)
    yield from pulled_frames(graph)


def hard_telecined_copy(source: Path, path: Path, gop: int = 12) -> Path:
    """A DVD's copy of a progressive film: its frames taken as 23.976 film pictures, through
    `telecine` (3:2, top field first, the pulldown in the pixels) into 29.97 interlaced MPEG-2
    with a key frame every `gop` frames, in an MPEG program stream (as /work/anime/make_dvd.sh
    makes its `_telecine.mpg` copies with the ffmpeg command line)."""
    with av.open(str(source)) as container:
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        pictures = (frame.to_ndarray(format="rgb24") for frame in container.decode(stream))
        with av.open(str(path), "w", format="mpeg") as out:
            coded = out.add_stream("mpeg2video", rate=VIDEO_RATE)
            coded.width, coded.height, coded.pix_fmt = width, height, "yuv420p"
            coded.options = {"qscale": "2", "g": str(gop), "flags": "+ildct+ilme", "top": "1"}
            mux_pictures(out, coded, _telecine(pictures, width, height), VIDEO_RATE)
    return path


def woven(moments: np.ndarray) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
    """Two moments to a frame, top field first: even rows from moment 2k, odd from 2k + 1."""
    frames, labels = [], []
    for k in range(len(moments) // 2):
        frame = moments[2 * k].copy()
        frame[1::2] = moments[2 * k + 1][1::2]
        frames.append(frame)
        labels.append((2 * k, 2 * k + 1))
    return frames, labels


def telecined_film(path: Path) -> FieldFilm:
    pictures = film_pictures()
    frames, labels = telecined(pictures)
    _encode(frames, path, VIDEO_RATE, interlaced=False)
    return FieldFilm(path, labels, pictures, VIDEO_RATE)


def interlaced_film(path: Path, seconds: float = 4.5) -> FieldFilm:
    moments = pan_pictures(int(seconds * 60) // 2 * 2)
    frames, labels = woven(moments)
    _encode(frames, path, VIDEO_RATE, interlaced=True)
    return FieldFilm(path, labels, moments, VIDEO_RATE)


def hybrid_film(path: Path) -> FieldFilm:
    """Telecined film pictures (5 s), then an interlaced pan (3 s)."""
    return _film_then_video(path, pan_pictures(180))


def _film_then_video(path: Path, moments: np.ndarray) -> FieldFilm:
    """The bundled film's first 120 pictures telecined (150 frames), then `moments` woven two
    to a frame (video made at 59.94): moments are numbered on, the video's after the film's
    pictures."""
    pictures = film_pictures(120)
    film_frames, film_labels = telecined(pictures)
    video_frames, video_labels = woven(moments)
    offset = len(pictures)
    labels = film_labels + [(top + offset, bottom + offset) for top, bottom in video_labels]
    _encode(film_frames + video_frames, path, VIDEO_RATE, interlaced=True)
    return FieldFilm(path, labels, np.concatenate([pictures, moments]), VIDEO_RATE)


def crawl_pictures(count: int, speed: float = 1.5) -> np.ndarray:
    """`count` moments of credits crawling up over black, `speed` pixels a moment (1.5: 90
    pixels a second at 59.94 moments, /work/anime/make_dvd.sh's crawl): white DejaVu-like
    lines 70 pixels apart, drawn at twice the size and halved, so that each moment is the page
    moved by exactly `speed`."""
    width, height = SIZE
    page = np.zeros((2 * (height + int(count * speed) + 80), 2 * width, 3), np.uint8)
    for line in range(page.shape[0] // 140):
        text = f"Key animation {line}  (sample crawl)"
        cv2.putText(page, text, (240, 2 * height + 140 * line), cv2.FONT_HERSHEY_DUPLEX, 1.8,
                    (235, 235, 235), 3, cv2.LINE_AA)  # fmt: skip
    shift = int(round(2 * speed))
    return np.stack(
        [
            cv2.resize(page[shift * k : shift * k + 2 * height], SIZE, interpolation=cv2.INTER_AREA)
            for k in range(count)
        ]
    )


def crawl_hybrid_film(path: Path) -> FieldFilm:
    """Telecined film pictures (5 s), then an interlaced credit crawl (4 s) moving 1.5 pixels a
    field: its woven frames have edges a row or two out of place, and no teeth."""
    return _film_then_video(path, crawl_pictures(240))


def progressive_crawl_film(path: Path) -> FieldFilm:
    """The same crawl made progressive at 29.97 (every other moment, 3 pixels a frame): each
    frame one moment, as credits made on film or a computer are."""
    moments = crawl_pictures(240)[::2]
    _encode(list(moments), path, VIDEO_RATE, interlaced=False)
    return FieldFilm(path, [(k, k) for k in range(len(moments))], moments, VIDEO_RATE)


def held_drawings_film(path: Path) -> FieldFilm:
    """Every picture of the bundled film held 3, 2 and 4 fields in turn (6 s at 29.97)."""
    return _held(path, film_pictures(), [3, 2, 4] * 40)


def few_changes_film(path: Path) -> FieldFilm:
    """Five pictures of the bundled film held 25, 25, 21, 25 and 24 fields (2 s): the drawings
    change at fields 25, 50, 71 and 96, two of them between a frame's fields (frames 12, 35)."""
    return _held(path, film_pictures()[::24][:5], [25, 25, 21, 25, 24])


def _held(path: Path, drawings: np.ndarray, holds: list[int]) -> FieldFilm:
    """`drawings[k]` shown for `holds[k]` fields, woven two fields to a frame (top first)."""
    shown = [k for k, fields in enumerate(holds) for _ in range(fields)]
    labels = list(zip(shown[0::2], shown[1::2]))
    frames = []
    for top, bottom in labels:  # as `woven`, without a copy of each drawing for every field
        frame = drawings[top].copy()
        frame[1::2] = drawings[bottom][1::2]
        frames.append(frame)
    _encode(frames, path, VIDEO_RATE, interlaced=True)
    return FieldFilm(path, labels, drawings, VIDEO_RATE)


def fine_lines_film(path: Path, count: int = 120) -> FieldFilm:
    """A progressive pan over a picture drawn full of fine horizontal lines (see the module)."""
    still = film_pictures(60)[-1]
    wide = cv2.resize(still, (SIZE[0] * 2, SIZE[1]), interpolation=cv2.INTER_CUBIC)
    _draw_line_art(wide)
    frames = []
    for k in range(count):
        frame = wide[:, k * 3 : k * 3 + SIZE[0]].copy()
        frame[::3] = (frame[::3] * 0.6).astype(np.uint8)  # scan lines, still on the screen
        frames.append(frame)
    _encode(frames, path, FILM_RATE, interlaced=False, crf=10)
    return FieldFilm(path, [(k, k) for k in range(count)], np.stack(frames), FILM_RATE)


def _draw_line_art(picture: np.ndarray) -> None:
    """Hatching (1-pixel lines every 4 rows) in three patches, and hair: thin curved strands."""
    height, width = picture.shape[:2]
    for x0 in range(40, width - 300, width // 3):
        for y in range(60, 260, 4):
            picture[y, x0 : x0 + 220] = (20, 20, 30)
    rng = np.random.default_rng(7)
    for _ in range(60):
        x0, y0 = int(rng.integers(0, width - 200)), int(rng.integers(280, height - 20))
        xs = np.arange(x0, x0 + 200)
        ys = (y0 + 6 * np.sin((xs - x0) / 40 + rng.uniform(0, 6))).astype(int)
        picture[ys, xs] = (40, 25, 10)


def _encode(frames, path: Path, rate: Fraction, interlaced: bool, crf: int = 14) -> None:
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        options = {"crf": str(crf), "preset": "ultrafast", "bf": "0", "threads": "1"}
        if interlaced:
            options |= {"x264-params": "tff=1", "flags": "+ildct+ilme"}
        stream.options = options
        pictures = (
            av.VideoFrame.from_ndarray(np.ascontiguousarray(a), format="rgb24") for a in frames
        )
        mux_pictures(container, stream, pictures, rate)


def _label(frame: np.ndarray, pictures: np.ndarray, near: int) -> tuple[int, int]:
    """Which pictures (of those within three of `near`) the frame's even and odd rows are."""
    first = max(0, near - 3)
    candidates = pictures[first : near + 4]
    return tuple(
        first
        + int(
            np.abs(candidates[:, parity::2, ::4].astype(np.int16) - frame[parity::2, ::4])
            .mean(axis=(1, 2, 3))
            .argmin()
        )
        for parity in (0, 1)
    )
