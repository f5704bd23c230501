"""Media bytes in and out: H.264 clips, still images, and frame-accurate film decoding.

PyAV bundles FFmpeg (with libx264), so nothing here needs a system ffmpeg.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import cv2
import numpy as np


def encode_mp4(
    frames: np.ndarray, fps: float, crf: int = 20, preset: str = "ultrafast", threads: int = 1
) -> bytes:
    """Encode N x H x W x 3 RGB uint8 frames as an H.264 (yuv420p) mp4 held in memory.

    One thread per encoder: the pipeline already runs one encoder per CPU.
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"expected N x H x W x 3 uint8 frames, got {frames.shape} {frames.dtype}")
    height, width = frames.shape[1:3]
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
        for index, frame in enumerate(frames):
            picture = _i420_frame(frame)
            # explicit timestamps: the encoder's rate control reads them
            picture.pts, picture.time_base = index, 1 / rate
            for packet in stream.encode(picture):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def _i420_frame(rgb: np.ndarray) -> av.VideoFrame:
    """RGB to a yuv420p frame with OpenCV (BT.601, which decoders assume for untagged H.264).
    Measured here on 480x720 clips: 7 ms per clip against 55 ms for the encoder's own swscale
    conversion, and a closer round trip (mean error 1.2 against 5.1 grey levels)."""
    yuv = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2YUV_I420)
    return av.VideoFrame.from_ndarray(yuv, format="yuv420p")


def decode_mp4(data: bytes) -> np.ndarray:
    """Decode an in-memory video to N x H x W x 3 RGB uint8 frames."""
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    if not frames:
        raise ValueError("video bytes hold no decodable frame")
    return np.stack(frames)


def encode_image(frame: np.ndarray, fmt: str = "jpeg", quality: int = 95) -> bytes:
    """RGB uint8 H x W x 3 to PNG or JPEG bytes."""
    bgr = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2BGR)
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
        self.path = path
        self.frame_pts = frame_pts
        self.threads = threads  # decoder threads; 0 lets FFmpeg use every core
        self.corrupt_packets = 0
        self.unmatched_frames = 0  # decoded frames whose timestamp the probe did not list

    def frames(self, first: int, stop: int) -> Iterator[tuple[int, av.VideoFrame]]:
        index_of = {pts: i for i, pts in enumerate(self.frame_pts)}
        with av.open(self.path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.codec_context.thread_count = self.threads
            if first > 0:
                container.seek(self.frame_pts[first], stream=stream, backward=True, any_frame=False)
            for frame in self._decode(container, stream):
                index = index_of.get(frame.pts)
                if index is None:
                    self.unmatched_frames += 1
                    continue
                if index < first:
                    continue
                if index >= stop:
                    break
                yield index, frame

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

    def _decode(self, container, stream) -> Iterator[av.VideoFrame]:
        for packet in container.demux(stream):
            try:
                yield from packet.decode()
            except av.error.InvalidDataError:
                self.corrupt_packets += 1


def rotate_frame(image: np.ndarray, rotation: int) -> np.ndarray:
    """Turn a decoded frame upright: `rotation` is the container's counter-clockwise angle."""
    return np.ascontiguousarray(np.rot90(image, k=rotation // 90)) if rotation else image


def _rate(fps: float):
    from fractions import Fraction

    return Fraction(fps).limit_denominator(1001)
