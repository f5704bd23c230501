"""Probe: the container and stream facts of a film, and its exact frame timeline.

The timeline (every frame's presentation timestamp, in display order) comes from demuxing packets,
which reads the file without decoding it. It makes frame indices exact across seeks, B-frames and
variable frame rates, and it exposes truncated files (fewer packets than the container claims).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av

from core.pixels import pixel_aspect
from stages.sources.field_coding import FieldPairing
from stages.sources.mpeg2_fields import Mpeg2FieldPairing

HASH_CHUNK = 8 * 1024 * 1024
UNDECODABLE_START = 64  # packets the first decoded frame may follow when the decoder rejects some


class FilmError(Exception):
    """An expected problem with an input film: the message names the file and says what is wrong."""


@dataclass
class FilmInfo:
    path: str
    film_id: str
    film_name: str
    width: int  # stored pixels, turned upright (after rotation); `sar` gives their shape
    height: int
    fps: float  # average frame rate
    time_base: str  # the stream's, as "num/den"
    frame_pts: list[int] = field(repr=False)
    num_frames: int
    duration: float  # seconds, from the first frame's start to the last frame's end
    vfr: bool
    rotation: int  # degrees, counter-clockwise, to apply to decoded frames
    codec: str
    keyframes: int
    container_duration: float | None
    has_audio: bool
    warnings: list[str] = field(default_factory=list)
    sar: str = "1:1"  # sample aspect ratio of the stored pixels, "num:den" (width over height)
    field_pictures: int = 0  # fields coded as pictures of their own, paired into the frames

    @property
    def slug(self) -> str:
        return film_slug(self.film_name, self.film_id)

    def frame_times(self) -> list[float]:
        """Start time of every frame in seconds, relative to the first frame."""
        tb, first = Fraction(self.time_base), self.frame_pts[0]
        return [float((pts - first) * tb) for pts in self.frame_pts]

    def frame_time(self, index: int) -> float:
        """One frame's `frame_times` entry, without the whole list (a 2-hour film's is 0.2 s)."""
        return float((self.frame_pts[index] - self.frame_pts[0]) * Fraction(self.time_base))

    @property
    def pixel_aspect(self) -> float:
        """Width over height of one pixel of the upright picture (core/pixels.py)."""
        return pixel_aspect(self.sar, self.rotation)

    def facts(self) -> dict:
        """What summary.json and the report show (everything but the long timeline)."""
        return {k: v for k, v in self.__dict__.items() if k != "frame_pts"} | {"slug": self.slug}


class Probe:
    """`process(path) -> FilmInfo`, or a FilmError naming the file and the problem."""

    def process(self, path: str | Path) -> FilmInfo:
        path = Path(path)
        _check_file(path)
        try:
            container = av.open(str(path))
        except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
            raise FilmError(f"{path}: not a readable video ({_reason(exc)})") from None
        with container:
            if not container.streams.video:
                raise FilmError(f"{path}: the file has no video stream")
            stream = container.streams.video[0]
            rotation, first_pts = _first_frame(path)
            pts, keyframes, fields = _demux_timeline(container, stream, path)
            undecodable = _before_first_frame(pts, first_pts)
            timeline = pts[undecodable:]
            info = _build_info(path, container, stream, timeline, keyframes, rotation, fields)
        _note_timeline(info, undecodable, fields)
        return info


def film_slug(film_name: str, film_id: str) -> str:
    """Folder name of the film's outputs: readable, and unique per content."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", film_name).strip("_.") or "film"
    return f"{stem}-{film_id[:8]}"


def content_id(path: Path) -> str:
    """A hash of the file's bytes: the same film content gives the same id wherever it lies."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_file(path: Path) -> None:
    if not path.exists():
        raise FilmError(f"{path}: no such file")
    if path.is_dir():
        raise FilmError(f"{path}: is a directory, not a video file")
    if path.stat().st_size == 0:
        raise FilmError(f"{path}: the file is empty")


def _first_frame(path: Path) -> tuple[int, int | None]:
    """Decode one frame: proves the codec is decodable here, reads the display rotation and
    the first decodable frame's timestamp (a capture that starts mid-GOP holds frames before
    it that refer to pictures it does not have). It opens the file on its own: a seek back to
    the start is not exact in every container (in MPEG-TS it can land past the first packet),
    and the timeline must see every packet. Packets the decoder rejects before that frame are
    passed over, up to `UNDECODABLE_START` of them: an MPEG-2 capture of field pictures that
    starts on a frame's second field has its fields paired across frames by FFmpeg's parser
    until the next sequence header, and each such packet fails ("Invalid frame dimensions")."""
    first_error = None
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for ordinal, packet in enumerate(container.demux(stream)):
            try:
                for frame in packet.decode():
                    return int(round(frame.rotation or 0)) % 360, frame.pts
            except av.error.FFmpegError as exc:
                first_error = first_error or exc
            if first_error is not None and ordinal >= UNDECODABLE_START:
                break
    if first_error is not None:
        raise FilmError(
            f"{path}: cannot decode its {stream.codec_context.name} video ({_reason(first_error)})"
        ) from None
    raise FilmError(f"{path}: the video stream has no decodable frame")


def _demux_timeline(container, stream, path: Path) -> tuple[list[int], int, int]:
    """Every frame's timestamp in display order, the key frames, and the field pictures paired
    into frames (stages/sources/field_coding.py: an H.264 stream that codes fields one by one has a
    packet per field; stages/sources/mpeg2_fields.py: so has MPEG-2 in a container written without
    FFmpeg's parser; only a frame's first field starts one). The key frames of a stream of
    field pictures are its IDR frames, the ones a decoder that skips non-key pictures gives
    (FrameReader.keyframes; it decodes their second fields too): a demuxer may flag every intra
    field key, which made the crop's and the overlay pass's key-frame sampling pick 3 frames of
    16 on a test capture."""
    pts, keyframes = [], 0
    fields = _field_pairing(stream)
    try:
        for packet in container.demux(stream):
            if packet.pts is None or packet.size == 0:
                continue  # flush packets carry no frame
            starts = fields is None or fields.starts_frame(packet)
            if fields is not None and fields.fields:
                keyframes += starts and fields.idr
            else:
                keyframes += bool(packet.is_keyframe)
            if not starts:
                continue  # the second field of a frame
            if fields is not None and fields.may_hold_fields() is False:
                fields = None  # progressive after all: no more packets to read
            pts.append(packet.pts)
    except av.error.FFmpegError as exc:
        if not pts:
            raise FilmError(f"{path}: cannot read its packets ({_reason(exc)})") from None
    if not pts:
        raise FilmError(f"{path}: the video stream holds no timestamped frames")
    return sorted(set(pts)), keyframes, fields.fields if fields is not None else 0


def _field_pairing(stream) -> FieldPairing | Mpeg2FieldPairing | None:
    """The pairing of an H.264 or MPEG-2 stream that may code field pictures; None for other
    codecs and for one whose sequence parameters say it codes frames only."""
    codec, extradata = stream.codec_context.name, stream.codec_context.extradata
    pairing: FieldPairing | Mpeg2FieldPairing
    if codec == "h264":
        pairing = FieldPairing(extradata)
    elif codec == "mpeg2video":
        pairing = Mpeg2FieldPairing(extradata)
    else:
        return None
    return None if pairing.may_hold_fields() is False else pairing


def _before_first_frame(pts: list[int], first_pts: int | None) -> int:
    """How many timestamps come before the first frame the decoder gives: frames of a GOP the
    file starts in the middle of, which no decoder can rebuild. None (the decoder gave no
    timestamp) keeps them all."""
    if first_pts is None or first_pts not in pts:
        return 0
    return pts.index(first_pts)


def _note_timeline(info: FilmInfo, undecodable: int, fields: int) -> None:
    info.field_pictures = fields
    if undecodable:
        info.warnings.append(
            f"the file starts inside a group of pictures: its first {undecodable} frame(s) "
            "refer to pictures it does not hold and are left out"
        )


def _build_info(path, container, stream, pts, keyframes, rotation, fields) -> FilmInfo:
    tb = stream.time_base
    deltas = [b - a for a, b in zip(pts, pts[1:])]
    typical = sorted(deltas)[len(deltas) // 2] if deltas else 0
    rate = stream.average_rate or stream.guessed_rate
    if typical:
        # a stream of field pictures may state the field rate: its frames are what it holds
        fps = float(1 / (typical * tb)) if not rate or fields else float(rate)
    else:
        fps = float(rate or 25)
    last_duration = typical or (1 / fps) / tb
    duration = float((pts[-1] - pts[0] + last_duration) * tb)
    width, height = stream.codec_context.width, stream.codec_context.height
    if rotation in (90, 270):
        width, height = height, width
    container_duration = container.duration / av.time_base if container.duration else None
    sar, sar_warning = _sample_aspect(stream)
    info = FilmInfo(
        path=str(path.resolve()),
        film_id=content_id(path),
        film_name=path.stem,
        width=width,
        height=height,
        fps=fps,
        time_base=f"{tb.numerator}/{tb.denominator}",
        frame_pts=pts,
        num_frames=len(pts),
        duration=duration,
        vfr=bool(deltas) and (max(deltas) - min(deltas)) > 0.1 * typical,
        rotation=rotation,
        codec=stream.codec_context.name,
        keyframes=keyframes,
        container_duration=container_duration,
        has_audio=bool(container.streams.audio),
        sar=f"{sar.numerator}:{sar.denominator}",
    )
    if sar_warning:
        info.warnings.append(sar_warning)
    if container_duration and duration < 0.9 * container_duration - 0.5:
        info.warnings.append(
            f"the video stream ends at {duration:.2f} s but the container "
            f"claims {container_duration:.2f} s: the file looks truncated"
        )
    return info


def _sample_aspect(stream) -> tuple[Fraction, str | None]:
    """The stored pixels' aspect: what the video stream itself says (H.264's VUI, MPEG-2's
    sequence header), else what the container says (MP4's pasp box, Matroska's display size,
    through FFmpeg's guess), else square. A disagreement is kept as a warning, since players
    differ in which they follow."""
    own = _valid(stream.codec_context.sample_aspect_ratio)
    container = _valid(stream.sample_aspect_ratio)  # FFmpeg's guess: the container's first
    warning = None
    if own and container and own != container:
        warning = (
            f"the video stream says SAR {own.numerator}:{own.denominator} and the container "
            f"{container.numerator}:{container.denominator}; the stream's is used"
        )
    return own or container or Fraction(1), warning


def _valid(ratio) -> Fraction | None:
    """A usable aspect ratio, or None for FFmpeg's 'unknown' (0:1) and absurd values."""
    if not ratio or ratio.numerator <= 0 or ratio.denominator <= 0:
        return None
    ratio = Fraction(ratio)
    return ratio if Fraction(1, 8) <= ratio <= 8 else None


def _reason(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text.split(":")[-1].strip() if text else type(exc).__name__
