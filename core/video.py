"""Media bytes in and out: H.264 clips, still images, and frame-accurate film decoding.

PyAV bundles FFmpeg (with libx264), so nothing here needs a system ffmpeg.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Collection, Generator, Iterable, Iterator
from contextlib import contextmanager

import av
import cv2
import numpy as np
from av.video.reformatter import VideoReformatter

from core.frames import ClipFrames, as_clip_frames


def encode_mp4(
    frames: ClipFrames | np.ndarray,
    fps: float,
    crf: int = 20,
    preset: str = "ultrafast",
    threads: int = 1,
) -> bytes:
    """Encode a clip's frames (`ClipFrames`, or N x H x W x 3 RGB uint8) as an H.264 (yuv420p)
    mp4 held in memory. The I420 planes go to x264 as they are: no conversion on the way.

    One thread per encoder: the pipeline already runs one encoder per CPU.
    """
    frames = as_clip_frames(frames)
    count, height, width = frames.shape
    if height % 2 or width % 2:
        raise ValueError(f"H.264 in yuv420p needs even sizes, got {height}x{width}")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        rate = _rate(fps)
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        # Reproducible bytes: x264's output depends on its thread count, and its B-frame
        # lookahead read uninitialised memory here (the same frames gave different bytes once a
        # process had run a while; with bf=0 they never did in 30 tries). P-frames only also
        # lets a 16-frame clip decode without reordering.
        stream.options = {"crf": str(crf), "preset": preset, "threads": str(threads), "bf": "0"}
        stream.codec_context.thread_count = threads
        pictures = (
            av.VideoFrame.from_ndarray(frames.i420(index), format="yuv420p")
            for index in range(count)
        )
        mux_pictures(container, stream, pictures, rate)
    return buffer.getvalue()


def mux_pictures(container, stream, pictures: Iterable[av.VideoFrame], rate) -> None:
    """Encode `pictures` in order into `stream` of `container`, picture i at time i / rate
    (explicit timestamps: the encoder's rate control reads them), then flush the encoder."""
    for index, picture in enumerate(pictures):
        picture.pts, picture.time_base = index, 1 / rate
        for packet in stream.encode(picture):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def decode_mp4(data: bytes) -> np.ndarray:
    """Decode an in-memory video to N x H x W x 3 RGB uint8 frames."""
    with av.open(io.BytesIO(data), mode="r") as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    if not frames:
        raise ValueError("video bytes hold no decodable frame")
    return np.stack(frames)


def encode_image(frame: np.ndarray, fmt: str = "jpeg", quality: int = 95) -> bytes:
    """RGB uint8 H x W x 3 to PNG or JPEG bytes."""
    return encode_bgr_image(
        cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2BGR), fmt, quality
    )


def encode_bgr_image(bgr: np.ndarray, fmt: str = "jpeg", quality: int = 95) -> bytes:
    """BGR uint8 H x W x 3 (OpenCV's order) to PNG or JPEG bytes."""
    if fmt == "png":
        ok, data = cv2.imencode(".png", bgr)
    elif fmt in ("jpeg", "jpg"):
        ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    else:
        raise ValueError(f"unknown image format {fmt!r} (png or jpeg)")
    if not ok:
        raise ValueError("image encoding failed")
    return data.tobytes()


def decode_image(data: bytes) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("image bytes are not a decodable PNG or JPEG")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class FrameReader:
    """Decode the frames with source indices first..stop-1 of a film, in order, each once.

    `frame_pts` is the film's presentation timestamps in display order (from the probe), so a
    decoded frame's index is found from its pts, which stays exact across seeks, B-frames and
    variable frame rates. Seeking lands on the key frame before `first`; frames before `first`
    are decoded (the codec needs them) but not yielded. Packets the decoder rejects are counted
    in `corrupt_packets` and skipped: the caller sees the missing indices as a gap, never as
    silently shifted frames.
    """

    def __init__(self, path: str, frame_pts: list[int], threads: int = 0):
        """`threads`: decoder threads (frame threading above 1); 0 lets FFmpeg choose, which is
        one per core of the machine, in every process that decodes."""
        self.path = path
        self.frame_pts = frame_pts
        self.threads = threads
        self.corrupt_packets = 0
        self.unmatched_frames = 0  # decoded frames whose timestamp the probe did not list
        # CPU seconds of the decoder's own threads (frame threading), which the calling thread's
        # clock does not see
        self.codec_thread_seconds = 0.0

    def frames(
        self, first: int, stop: int, only: Collection[int] | None = None
    ) -> Generator[tuple[int, av.VideoFrame]]:
        """`only`: the caller wants these indices alone, so the decoder skips the packets of the
        other frames that no frame refers to (FFmpeg's skip_frame "nonref", set packet by packet:
        B-frames, mostly). The frames wanted are decoded as they would be otherwise (every frame
        they refer to is); a packet without a known timestamp is decoded."""
        # keyed by int | None: a frame without a timestamp is simply not found (unmatched)
        index_of: dict[int | None, int] = {pts: i for i, pts in enumerate(self.frame_pts)}
        with av.open(self.path) as container, self._codec_threads_timed():
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.codec_context.thread_count = self.threads
            if first > 0:
                container.seek(self.frame_pts[first], stream=stream, backward=True, any_frame=False)
            wanted = None if only is None else set(only)
            skippable = (
                None if wanted is None else {pts for pts, i in index_of.items() if i not in wanted}
            )
            for frame in self._decode(container, stream, skippable):
                index = index_of.get(frame.pts)
                if index is None:
                    self.unmatched_frames += 1
                    continue
                if index < first:
                    continue
                if index >= stop:
                    break
                yield index, frame

    @contextmanager
    def _codec_threads_timed(self) -> Iterator[None]:
        """Adds the decoder threads' CPU to `codec_thread_seconds` as the decoder closes (its
        threads end with it)."""
        try:
            yield
        finally:
            self.codec_thread_seconds += codec_threads_cpu()

    def keyframes(self, count: int, total: int) -> Iterator[tuple[int, av.VideoFrame]]:
        """About `count` of the film's `total` key frames, spread evenly, decoding nothing else.

        The decoder skips every non-key frame and only the chosen key frames are yielded, so
        memory stays at one picture whatever the film's length.
        """
        wanted = {int(i * total / count) for i in range(count)} if total > count else None
        index_of = {pts: i for i, pts in enumerate(self.frame_pts)}
        with av.open(self.path) as container:
            stream = container.streams.video[0]
            stream.codec_context.skip_frame = "NONKEY"
            for ordinal, frame in enumerate(self._decode(container, stream)):
                if frame.pts in index_of and (wanted is None or ordinal in wanted):
                    yield index_of[frame.pts], frame

    def _decode(
        self, container, stream, skippable: set[int | None] | None = None
    ) -> Iterator[av.VideoFrame]:
        """The stream's frames; a packet whose timestamp is in `skippable` is decoded only if
        another frame refers to it (skip_frame "nonref")."""
        for packet in container.demux(stream):
            if skippable is not None:
                skip = packet.pts in skippable
                stream.codec_context.skip_frame = "NONREF" if skip else "DEFAULT"
            try:
                yield from packet.decode()
            except av.error.InvalidDataError:
                self.corrupt_packets += 1


class HeldFrames:
    """A film's frames decoded once, first to last, and held in memory as the decoder gave them:
    every pass that would decode the film from its start reads them instead (a short film's
    prepare step and its one segment: pipeline/running/film_tasks.py).

    `frames(0, stop)` gives what `FrameReader.frames(0, stop)` gives, the same frames in the same
    order: the frames one decode yields are the same whatever the decoder's threads, and frames
    decoded with `only` are those of a full decode (FrameReader's docstrings). A pass that seeks
    (starts past 0) decodes for itself. The counts are the whole decode's, and
    `codec_thread_seconds` is all of its CPU: none of it is on the reading thread's clock."""

    def __init__(self, frames: list[tuple[int, av.VideoFrame]], reader: FrameReader, cpu: float):
        self.held = frames
        self.corrupt_packets = reader.corrupt_packets
        self.unmatched_frames = reader.unmatched_frames
        self.codec_thread_seconds = cpu + reader.codec_thread_seconds

    @classmethod
    def decode(
        cls, path: str, frame_pts: list[int], threads: int, limit_bytes: int
    ) -> HeldFrames | None:
        """The film's frames, or None when holding them would take more than `limit_bytes`
        (judged from the first frame's planes, and checked as they come)."""
        began = time.thread_time()
        reader = FrameReader(path, frame_pts, threads)
        frames: list[tuple[int, av.VideoFrame]] = []
        size = 0
        decoded = reader.frames(0, len(frame_pts))
        try:
            for index, frame in decoded:
                size += sum(plane.buffer_size for plane in frame.planes)
                if size > limit_bytes or (not frames and size * len(frame_pts) > limit_bytes):
                    return None
                frames.append((index, frame))
        finally:
            decoded.close()  # the container, at once
        return cls(frames, reader, time.thread_time() - began)

    def frames(
        self, first: int, stop: int, only: Collection[int] | None = None
    ) -> Iterator[tuple[int, av.VideoFrame]]:
        """FrameReader.frames from the film's start; `only` is a hint the held frames need not
        take (the caller keeps the indices it wants)."""
        if first != 0:
            raise ValueError("held frames are read from the film's start")
        for index, frame in self.held:
            if index >= stop:
                break
            yield index, frame


def codec_threads_cpu() -> float:
    """CPU seconds so far of this process's FFmpeg codec threads alive now (FFmpeg names them
    `av:CODEC:...`), read from /proc; 0.0 where there is none or no /proc."""
    ticks = 0
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for thread in threads:
        try:
            with open(f"/proc/self/task/{thread}/comm") as comm:
                if not comm.read().startswith("av:"):
                    continue
            with open(f"/proc/self/task/{thread}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def rotate_frame(image: np.ndarray, rotation: int) -> np.ndarray:
    """Turn a decoded frame upright: `rotation` is the container's counter-clockwise angle."""
    return np.ascontiguousarray(np.rot90(image, k=rotation // 90)) if rotation else image


def upright_grey(
    frames: Iterable[tuple[int, av.VideoFrame]], rotation: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Each (index, frame)'s grey picture, exactly as `frame.to_ndarray(format="gray")` gives
    it, turned upright. One converter serves them all: `to_ndarray` builds a new swscale
    context for every frame, which costs twice the conversion itself (0.6 against 0.17 ms a
    640x360 frame, 2.1 against 0.8 at 1280x720)."""
    to_grey = VideoReformatter()
    for index, frame in frames:
        yield index, rotate_frame(to_grey.reformat(frame, format="gray").to_ndarray(), rotation)


def _rate(fps: float):
    from fractions import Fraction

    return Fraction(fps).limit_denominator(1001)
