"""Field-coded H.264 films, written bit by bit: what a PAL broadcast capture in MPEG-TS holds.

No encoder that PyAV bundles codes field pictures (x264's `--interlaced` codes MBAFF frames, one
packet a frame), so this writes the stream itself. Each frame of a source film becomes two field
pictures (its even rows, then its odd rows: top field first), each an I picture in its own NAL
unit, its own MPEG-TS packet and its own timestamp at the field rate, as a broadcast capture
carries them. Every macroblock is I_PCM (its samples stored raw, H.264 7.3.5), so the decoded
frames equal the source frames exactly: frame k of the film is labelled by its own pixels.

Syntax written (H.264 7.3.2.1 SPS, 7.3.2.2 PPS, 7.3.3 slice header): Main profile, CAVLC,
frame_mbs_only_flag 0 without MBAFF, picture order count type 0, one reference frame; a VUI with
the sample aspect ratio and a timing tick per field. A group of `gop` frames starts with an IDR
top field; its other fields are non-IDR reference I fields.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

_START = b"\x00\x00\x00\x01"


class _BitWriter:
    def __init__(self):
        self.bits: list[int] = []

    def u(self, count: int, value: int) -> None:
        self.bits += [(value >> (count - 1 - i)) & 1 for i in range(count)]

    def ue(self, value: int) -> None:
        value += 1
        self.u(value.bit_length() - 1, 0)
        self.u(value.bit_length(), value)

    def align(self) -> None:
        self.bits += [0] * (-len(self.bits) % 8)

    def rbsp(self) -> bytes:
        """The bits with rbsp_trailing_bits."""
        self.bits.append(1)
        self.align()
        return np.packbits(np.array(self.bits, np.uint8)).tobytes()


def _nal(ref_idc: int, kind: int, payload: bytes) -> bytes:
    escaped = re.sub(b"\x00\x00([\x00-\x03])", b"\x00\x00\x03\\1", payload)
    return _START + bytes([(ref_idc << 5) | kind]) + escaped


def _sequence(width: int, height: int, sar: Fraction, fps: int) -> bytes:
    bits = _BitWriter()
    for count, value in ((8, 77), (8, 0), (8, 30)):  # Main profile, level 3
        bits.u(count, value)
    for value in (0, 0, 0, 4, 1):  # sps id, frame_num 4 bits, poc type 0 (8 bits), 1 reference
        bits.ue(value)
    bits.u(1, 0)  # no frame_num gaps
    bits.ue(width // 16 - 1)
    bits.ue(height // 32 - 1)  # map units are pairs of macroblock rows
    for flag in (0, 0, 1, 0, 1):  # frame_mbs_only, mbaff, direct_8x8, cropping, VUI
        bits.u(1, flag)
    bits.u(1, 1)  # aspect ratio info: extended SAR
    bits.u(8, 255)
    bits.u(16, sar.numerator)
    bits.u(16, sar.denominator)
    bits.u(3, 0)  # no overscan, video signal or chroma location info
    bits.u(1, 1)  # timing: a tick per field
    bits.u(32, 1)
    bits.u(32, 2 * fps)
    bits.u(1, 1)
    bits.u(4, 0)  # no HRD, no pic_struct, no bitstream restriction
    return _nal(3, 7, bits.rbsp())


def _picture_parameters() -> bytes:
    bits = _BitWriter()
    for value in (0, 0):
        bits.ue(value)
    bits.u(2, 0)  # CAVLC, no bottom field POC delta
    for value in (0, 0, 0):  # slice groups, reference counts
        bits.ue(value)
    bits.u(3, 0)  # no weighted prediction
    for value in (0, 0, 0):  # initial QP, QS and chroma offset, each se(0)
        bits.ue(value)
    bits.u(3, 0b100)  # deblocking control present, no constrained intra, no redundant count
    return _nal(3, 8, bits.rbsp())


def _field(planes, frame_num: int, bottom: bool, idr_id: int | None) -> bytes:
    """One field picture: a slice of I_PCM macroblocks holding every other row of the frame."""
    luma, cb, cr = (plane[int(bottom) :: 2] for plane in planes)
    bits = _BitWriter()
    for value in (0, 7, 0):  # first macroblock, I slices only, pps id
        bits.ue(value)
    bits.u(4, frame_num)
    bits.u(1, 1)  # field_pic_flag
    bits.u(1, int(bottom))
    if idr_id is not None:
        bits.ue(idr_id % 2)
    bits.u(8, 2 * frame_num + int(bottom))  # picture order count
    bits.u(2 if idr_id is not None else 1, 0)  # reference marking: defaults
    bits.ue(0)  # slice_qp_delta se(0)
    bits.ue(1)  # deblocking off
    bits.ue(25)  # the first macroblock's type: I_PCM
    bits.align()
    header = np.packbits(np.array(bits.bits, np.uint8)).tobytes()
    rows, cols = luma.shape[0] // 16, luma.shape[1] // 16

    def blocks(plane, size):
        return plane.reshape(rows, size, cols, size).transpose(0, 2, 1, 3).reshape(-1, size * size)

    prefix = np.tile(np.uint8([0x0D, 0x00]), (rows * cols, 1))  # ue(25) and the alignment
    macroblocks = np.concatenate([prefix, blocks(luma, 16), blocks(cb, 8), blocks(cr, 8)], axis=1)
    payload = header + macroblocks.reshape(-1)[2:].tobytes() + b"\x80"
    return _nal(1, 5 if idr_id is not None else 1, payload)


def source_planes(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Y, U, V planes a frame is stored with (limited range, so no byte is zero)."""
    height, width = rgb.shape[:2]
    i420 = np.clip(cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420), 16, 235).astype(np.uint8)
    quarter = height // 4
    chroma = (height // 2, width // 2)
    return (
        i420[:height],
        i420[height : height + quarter].reshape(chroma),
        i420[height + quarter :].reshape(chroma),
    )


def write_field_coded(
    path: Path,
    frames: list[np.ndarray],
    fps: int = 25,
    sar: Fraction = Fraction(1),
    gop: int = 12,
    skip_packets: int = 0,
) -> Path:
    """Write RGB frames (sizes multiples of 16 wide and 32 high) as field pictures in MPEG-TS,
    a packet per field at `2 * fps` packets a second. `skip_packets` leaves out the first ones,
    as a capture that starts in the middle of a group of pictures."""
    height, width = frames[0].shape[:2]
    packets = []
    for index, rgb in enumerate(frames):
        planes = source_planes(rgb)
        number = index % gop
        idr = index // gop if number == 0 else None
        head = (
            _sequence(width, height, sar, fps) + _picture_parameters() if idr is not None else b""
        )
        packets.append((head + _field(planes, number, False, idr), idr is not None))
        packets.append((_field(planes, number, True, None), False))
    with av.open(str(path), "w", format="mpegts") as out:
        stream = out.add_stream("libx264", rate=fps)  # only its codec id and size are used
        stream.width, stream.height = width, height
        for index, (data, key) in enumerate(packets):
            if index < skip_packets:
                continue
            packet = av.Packet(data)
            packet.stream = stream
            packet.time_base = Fraction(1, 2 * fps)
            packet.pts = packet.dts = index + 2
            packet.is_keyframe = key
            out.mux(packet)
    return path


def write_soft_telecine(path: Path, frames: list[np.ndarray], gop: int = 12) -> Path:
    """Write RGB frames as 23.976 fps MPEG-2 with soft 3:2 pulldown, in MPEG-TS, as NTSC DVDs
    hold film: each coded frame is a whole progressive picture, and its repeat_first_field
    flag shows it for three fields instead of two on every other frame (top_field_first
    changing to keep the fields alternating), so 4 frames fill 10 fields of 29.97i. Each packet
    is timed at the field its picture is first shown on.

    FFmpeg's MPEG-2 encoder writes no repeat flags, so the flags are set in its output: the
    sequence extension's progressive_sequence cleared (repeat flags are only read in an
    interlaced sequence), and in each picture coding extension top_field_first,
    repeat_first_field and progressive_frame (ISO 13818-2 6.2.2.3 and 6.2.3.1)."""
    height, width = frames[0].shape[:2]
    encoder = av.CodecContext.create("mpeg2video", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuv420p"
    encoder.time_base, encoder.framerate = Fraction(1001, 24000), Fraction(24000, 1001)
    encoder.options = {"qscale": "3", "g": str(gop), "bf": "0"}
    coded = []
    for index, rgb in enumerate(frames):
        picture = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        picture.pts = index
        coded += [bytes(packet) for packet in encoder.encode(picture)]
    coded += [bytes(packet) for packet in encoder.encode(None)]
    field = 10  # the field each coded frame is first shown on (a start past zero, as captures)
    with av.open(str(path), "w", format="mpegts") as out:
        stream = out.add_stream("mpeg2video", rate=Fraction(30000, 1001))
        stream.width, stream.height = width, height
        for index, data in enumerate(coded):
            packet = av.Packet(_pulldown_flags(data, index))
            packet.stream = stream
            packet.time_base = Fraction(1001, 60000)  # one field
            packet.pts = packet.dts = field
            packet.is_keyframe = index % gop == 0
            out.mux(packet)
            field += 3 if index % 2 == 0 else 2
    return path


def _pulldown_flags(data: bytes, index: int) -> bytes:
    """Frame `index` of a 3:2 cadence: A (top first, 3 fields), B (bottom first, 2), C (bottom
    first, 3), D (top first, 2)."""
    out = bytearray(data)
    at = out.find(b"\x00\x00\x01\xb5")
    while at >= 0:
        kind = out[at + 4] >> 4
        if kind == 1:  # sequence extension: progressive_sequence off
            out[at + 5] &= ~0x08 & 0xFF
        elif kind == 8:  # picture coding extension
            top_first, repeat = index % 4 in (0, 3), index % 2 == 0
            out[at + 7] = (out[at + 7] & ~0x82 & 0xFF) | (0x80 * top_first) | (0x02 * repeat)
            out[at + 8] |= 0x80  # progressive_frame
        at = out.find(b"\x00\x00\x01\xb5", at + 4)
    return bytes(out)
