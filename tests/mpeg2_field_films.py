"""MPEG-2 films of field pictures, written bit by bit: what PAL and NTSC broadcast captures
(MPEG-TS) and some DVDs (MPEG-PS) hold.

FFmpeg's MPEG-2 encoder codes frames only, so this writes the stream itself: each frame of a
source film becomes two intra field pictures (picture_structure top, then bottom; or bottom
first), each with its own picture header and picture coding extension. Every block codes only
its DC coefficient (intra_dc_precision 8 bits: the decoded sample is the DC value itself) and
ends at once, so a decoded field is its source field averaged over 8x8 blocks, and a decoded
frame is made of 8-wide, 16-high blocks of interleaved field lines: `mosaic(planes)` says which
samples, so a decoded frame is matched to its source frame.

Syntax written (ISO/IEC 13818-2): 6.2.2.1 sequence header, 6.2.2.3 sequence extension (Main
profile at Main level, 4:2:0, progressive_sequence 0), 6.2.2.6 group of pictures header,
6.2.3 picture header, 6.2.3.1 picture coding extension, 6.2.4 slice (one per macroblock row),
6.2.5 macroblock (type Intra, table B.2; no dct_type in a field picture), 6.2.6 block: DC size
from tables B.12 (luminance) and B.13 (chrominance), its differential (7.2.1), then end of
block ('10', table B.14). The DC predictors restart at 128 at each slice (7.2.1).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

_LUMA_DC_SIZE = [
    "100", "00", "01", "101", "110", "1110", "11110", "111110", "1111110",
]  # fmt: skip
_CHROMA_DC_SIZE = [
    "00", "01", "10", "110", "1110", "11110", "111110", "1111110", "11111110",
]  # fmt: skip
_END_OF_BLOCK = "10"
_FRAME_RATE_CODES = {Fraction(25): 3, Fraction(30000, 1001): 4}  # table 6-4
_TOP, _BOTTOM = 1, 2  # picture_structure


def _start(code: int) -> str:
    return f"{0x000001:024b}{code:08b}"


def _block_codes(sizes: list[str]) -> dict[int, str]:
    """Every DC differential's code (size, then the differential's bits), and end of block."""
    codes = {}
    for diff in range(-255, 256):
        size = abs(diff).bit_length()
        bits = diff if diff > 0 else diff + (1 << size) - 1
        codes[diff] = sizes[size] + (f"{bits:0{size}b}" if size else "") + _END_OF_BLOCK
    return codes


_LUMA_CODES, _CHROMA_CODES = _block_codes(_LUMA_DC_SIZE), _block_codes(_CHROMA_DC_SIZE)


def _bytes(bits: str) -> bytes:
    """Bits zero-padded to a byte boundary (next_start_code's stuffing)."""
    bits += "0" * (-len(bits) % 8)
    return int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""


def _sequence(width: int, height: int, rate: Fraction) -> bytes:
    header = (
        _start(0xB3)
        + f"{width:012b}{height:012b}"
        + "0010"  # aspect_ratio_information 2: a 4:3 picture
        + f"{_FRAME_RATE_CODES[rate]:04b}"
        + f"{15000:018b}1"  # bit_rate_value (6 Mbit/s in 400 bit/s units), marker
        + f"{112:010b}"  # vbv_buffer_size_value (in 16 kbit units)
        + "000"  # constrained_parameters, no quantiser matrices
    )
    extension = (
        _start(0xB5)
        + "0001"  # sequence extension
        + "01001000"  # Main profile, Main level
        + "0"  # progressive_sequence: frames may be interlaced
        + "01"  # chroma_format 4:2:0
        + "0000"  # size extensions
        + f"{0:012b}1{0:08b}"  # bit_rate_extension, marker, vbv_buffer_size_extension
        + "0"  # low_delay: the stream may hold B pictures (it does not)
        + "00" + "00000"  # frame_rate_extension_n, _d
    )  # fmt: skip
    return _bytes(header) + _bytes(extension)


def _group() -> bytes:
    time_code = "0" + "00000" + "000000" + "1" + "000000" + "000000"  # 00:00:00 picture 0
    return _bytes(_start(0xB8) + time_code + "1" + "0")  # closed_gop, no broken_link


def _field(planes, temporal_reference: int, structure: int) -> bytes:
    """One intra field picture: its header, its coding extension and a slice per macroblock row."""
    header = _start(0x00) + f"{temporal_reference:010b}" + "001" + f"{0xFFFF:016b}" + "0"
    extension = (
        _start(0xB5)
        + "1000"  # picture coding extension
        + "1111" * 4  # f_codes: unused in an intra picture
        + "00"  # intra_dc_precision: 8 bits
        + f"{structure:02b}"
        + "0"  # top_field_first: 0 in a field picture
        + "0"  # frame_pred_frame_dct: 0 in a field picture
        + "0"  # concealment_motion_vectors
        + "0"  # q_scale_type
        + "0"  # intra_vlc_format: table B.14
        + "0"  # alternate_scan
        + "0"  # repeat_first_field
        + "0"  # chroma_420_type (equals progressive_frame)
        + "0"  # progressive_frame
        + "0"  # composite_display_flag
    )  # fmt: skip
    parity = int(structure == _BOTTOM)
    luma, cb, cr = (_block_means(plane[parity::2]) for plane in planes)
    slices = b"".join(_slice(row, luma, cb, cr) for row in range(cb.shape[0]))
    return _bytes(header) + _bytes(extension) + slices


def _block_means(plane: np.ndarray) -> np.ndarray:
    rows, cols = plane.shape[0] // 8, plane.shape[1] // 8
    means = plane.reshape(rows, 8, cols, 8).astype(np.float64).mean(axis=(1, 3))
    return np.clip(np.rint(means), 1, 254).astype(int)


def _slice(row: int, luma: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> bytes:
    """Macroblock row `row`: each macroblock Intra (address increment '1', type '1'), its four
    luminance blocks in raster order, then Cb and Cr, each a DC differential."""
    bits = [_start(row + 1), f"{8:05b}", "0"]  # quantiser_scale_code 8, no extra_bit_slice
    previous = {"y": 128, "cb": 128, "cr": 128}
    for col in range(cb.shape[1]):
        bits.append("11")
        y = luma[2 * row : 2 * row + 2, 2 * col : 2 * col + 2].reshape(-1)
        for name, values, codes in (("y", y, _LUMA_CODES), ("cb", [cb[row, col]], _CHROMA_CODES),
                                    ("cr", [cr[row, col]], _CHROMA_CODES)):  # fmt: skip
            for value in values:
                bits.append(codes[int(value) - previous[name]])
                previous[name] = int(value)
    return _bytes("".join(bits))


def mosaic(planes) -> np.ndarray:
    """The luma plane a frame decodes to: each field's 8x8 block means, lines interleaved."""
    luma = planes[0]
    out = np.empty_like(luma)
    for parity in (0, 1):
        means = _block_means(luma[parity::2])
        out[parity::2] = np.repeat(np.repeat(means, 8, axis=0), 8, axis=1)
    return out


def elementary_stream(
    frames: list[tuple], rate: Fraction, gop: int = 12, bottom_first: bool = False
) -> list[bytes]:
    """The pictures of an MPEG-2 video elementary stream, one bytes per field picture: frames
    given as (Y, U, V) planes, sizes multiples of 16 wide and 32 high; a sequence header and a
    group of pictures header before each group's first field; a sequence end code after the
    last."""
    height, width = frames[0][0].shape
    order = (_BOTTOM, _TOP) if bottom_first else (_TOP, _BOTTOM)
    pictures = []
    for index, planes in enumerate(frames):
        number = index % gop
        head = _sequence(width, height, rate) + _group() if number == 0 else b""
        pictures.append(head + _field(planes, number, order[0]))
        pictures.append(_field(planes, number, order[1]))
    pictures[-1] += _bytes(_start(0xB7))
    return pictures


def write_field_pictures(
    path: Path, pictures: list[bytes], rate: Fraction, gop: int = 12, skip_fields: int = 0
) -> Path:
    """Write `elementary_stream`'s pictures: a raw elementary stream (.m2v) as is, or in MPEG-TS
    (.ts), DVD's MPEG-PS (.vob), Matroska (.mkv) or MP4 (.mp4) with a packet per field picture,
    each timed at its field (at twice `rate`), as a capture of field pictures may carry them.
    `skip_fields` leaves out the first ones, as a capture that starts in the middle of a group
    of pictures (in a container only)."""
    if path.suffix == ".m2v":
        path.write_bytes(b"".join(pictures))
        return path
    formats = {".ts": "mpegts", ".vob": "vob", ".mkv": "matroska", ".mp4": "mp4"}
    height, width = (int(v) for v in _picture_size(pictures[0]))
    with av.open(str(path), "w", format=formats[path.suffix]) as out:
        stream = out.add_stream("mpeg2video", rate=rate)
        stream.width, stream.height = width, height
        for index, data in enumerate(pictures):
            if index < skip_fields:
                continue
            packet = av.Packet(data)
            packet.stream = stream
            packet.time_base = 1 / (2 * rate)
            packet.pts = packet.dts = index + 2
            packet.is_keyframe = index % (2 * gop) == 0
            out.mux(packet)
    return path


def _picture_size(first: bytes) -> tuple[int, int]:
    """Height and width, from the sequence header the stream starts with."""
    at = first.index(b"\x00\x00\x01\xb3") + 4
    size = int.from_bytes(first[at : at + 3], "big")
    return size & 0xFFF, size >> 12


def remux(source: Path, path: Path, rate: Fraction) -> Path:
    """`ffmpeg -r RATE -i source.m2v -c copy path`: the raw stream demuxed through FFmpeg's
    MPEG-2 parser, each packet it gives copied into MPEG-TS (.ts) or DVD's MPEG-PS (.vob),
    timed by the raw demuxer at `rate`."""
    options = {"framerate": f"{rate.numerator}/{rate.denominator}"}
    with av.open(str(source), format="mpegvideo", options=options) as film:
        with av.open(str(path), "w", format="mpegts" if path.suffix == ".ts" else "vob") as out:
            stream = out.add_stream_from_template(film.streams.video[0])
            for index, packet in enumerate(film.demux(video=0)):
                if packet.size == 0:
                    continue
                packet.stream = stream
                if packet.pts is None:
                    packet.pts = packet.dts = index  # the first: in frames from the start
                    packet.time_base = 1 / rate
                out.mux(packet)
    return path
