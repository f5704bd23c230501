"""Which packets of a field-coded H.264 stream start a frame.

An interlaced H.264 stream may code each field as a picture of its own (PAFF: "field pictures").
A broadcast capture in MPEG-TS then carries one packet per field, each with its own timestamp,
at the field rate (50 a second for PAL), while the decoder gives one frame per pair of fields,
timed by the pair's first field. Counting packets counts every frame twice. What tells a field
from a frame is in the slice header (`field_pic_flag`, `bottom_field_flag`, `frame_num`); the
decoder's rule (H.264 7.4.3, FFmpeg's h264_field_start) then pairs them: a field that follows an
unpaired field of the other parity with the same frame_num is its second field, anything else
starts a frame.

Only the first bytes of each slice are read: no decoding. A stream whose sequence parameter set
says `frame_mbs_only_flag` (every progressive encoder's, x264's without `--interlaced`) has no
field pictures and is not read at all; MBAFF streams (x264's `--interlaced`) code frames, so
each of their packets starts one.
"""

from __future__ import annotations

from dataclasses import dataclass

_SLICE, _IDR, _SPS, _PPS = 1, 5, 7, 8
_HIGH_PROFILES = {100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135}
_HEADER_BYTES = 256  # of each NAL unit: enough for a slice header's first fields and an SPS
_SEARCH_BYTES = 4096  # of a byte-stream packet: its delimiter, SEI and parameter sets, a slice


class _Bits:
    """An RBSP read bit by bit (emulation prevention bytes removed first)."""

    def __init__(self, data: bytes):
        self.data = _unescape(data)
        self.pos = 0

    def u(self, count: int) -> int:
        value = 0
        for _ in range(count):
            byte = self.data[self.pos >> 3] if self.pos >> 3 < len(self.data) else 0
            value = (value << 1) | ((byte >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return value

    def ue(self) -> int:
        zeros = 0
        while self.u(1) == 0 and zeros < 32:
            zeros += 1
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        value = self.ue()
        return (value + 1) // 2 if value % 2 else -(value // 2)


def _unescape(data: bytes) -> bytes:
    return data.replace(b"\x00\x00\x03", b"\x00\x00")


@dataclass(frozen=True)
class _Sequence:
    frame_mbs_only: bool
    frame_num_bits: int
    separate_colour_planes: bool


@dataclass(frozen=True)
class _Picture:
    field: bool
    bottom: bool
    frame_num: int


def _sequence(nal: bytes) -> tuple[int, _Sequence]:
    bits = _Bits(nal[1:_HEADER_BYTES])
    profile = bits.u(8)
    bits.u(16)  # constraint flags, level
    sps_id = bits.ue()
    separate = False
    if profile in _HIGH_PROFILES:
        chroma_format = bits.ue()
        if chroma_format == 3:
            separate = bool(bits.u(1))
        bits.ue(), bits.ue(), bits.u(1)  # bit depths, lossless bypass
        if bits.u(1):  # scaling matrices follow
            for index in range(12 if chroma_format == 3 else 8):
                if bits.u(1):
                    _skip_scaling_list(bits, 16 if index < 6 else 64)
    frame_num_bits = bits.ue() + 4
    order_type = bits.ue()
    if order_type == 0:
        bits.ue()
    elif order_type == 1:
        bits.u(1), bits.se(), bits.se()
        for _ in range(bits.ue()):
            bits.se()
    bits.ue(), bits.u(1), bits.ue(), bits.ue()  # references, gaps, width, height
    return sps_id, _Sequence(bool(bits.u(1)), frame_num_bits, separate)


def _skip_scaling_list(bits: _Bits, size: int) -> None:
    last = following = 8
    for _ in range(size):
        if following:
            following = (last + bits.se() + 256) % 256
        last = following or last


def _parameter_set_ids(nal: bytes) -> tuple[int, int]:
    bits = _Bits(nal[1:_HEADER_BYTES])
    return bits.ue(), bits.ue()  # pps id, sps id


class FieldPairing:
    """Feed the packets in decode order (`starts_frame`); sequence and picture parameter sets
    come from the codec's extradata (MP4, Matroska) or from the packets (MPEG-TS)."""

    def __init__(self, extradata: bytes | None):
        self.sequences: dict[int, _Sequence] = {}
        self.pictures: dict[int, int] = {}  # pps id -> sps id
        self.length_size = 0  # AVCC's NAL length prefix; 0: Annex B start codes
        self.open_field: _Picture | None = None  # a first field still waiting for its pair
        self.fields = 0  # field pictures seen
        self.idr = False  # the last packet read holds an IDR picture
        if extradata and extradata[0] == 1 and len(extradata) > 6:
            self._read_avcc(extradata)
        elif extradata:
            for nal in _annex_b(extradata):
                self._parameters(nal)

    def may_hold_fields(self) -> bool | None:
        """False when every known sequence codes frames only; None before any is known."""
        if not self.sequences:
            return None
        return not all(s.frame_mbs_only for s in self.sequences.values())

    def starts_frame(self, packet) -> bool:
        """Whether this packet (bytes, or any buffer: an av.Packet is read in place) includes
        the start of a frame (a frame picture, or the first field of a pair); a packet with no
        slice counts as starting one, as before. Only the head of each NAL unit is copied, and
        in a byte stream only the packet's first `_SEARCH_BYTES` are searched for slices unless
        none starts there."""
        view = memoryview(packet)
        if self.length_size:
            return self._starts(_length_prefixed(view, self.length_size))
        head = _annex_b(bytes(view[:_SEARCH_BYTES]))
        found = any(nal and nal[0] & 0x1F in (_SLICE, _IDR) for nal in head)
        return self._starts(head if found else _annex_b(bytes(view)))

    def _starts(self, units: list[bytes]) -> bool:
        starts, sliced, self.idr = False, False, False
        for nal in units:
            kind = nal[0] & 0x1F if nal else 0
            if kind in (_SPS, _PPS):
                self._parameters(nal)
            elif kind in (_SLICE, _IDR):
                picture = self._picture(nal)
                if picture is not None:
                    sliced = True
                    starts |= self._pair(picture)
                    self.idr |= kind == _IDR
        return starts or not sliced

    def _pair(self, picture: _Picture) -> bool:
        if not picture.field:
            self.open_field = None
            return True
        self.fields += 1
        first = self.open_field
        if first and first.bottom != picture.bottom and first.frame_num == picture.frame_num:
            self.open_field = None
            return False
        self.open_field = picture
        return True

    def _picture(self, nal: bytes) -> _Picture | None:
        """The slice's picture, or None for a slice that continues one (first_mb_in_slice > 0)
        or that names parameter sets not seen."""
        bits = _Bits(nal[1:_HEADER_BYTES])
        if bits.ue() != 0:
            return None
        bits.ue()  # slice type
        sps_id = self.pictures.get(bits.ue())
        sequence = self.sequences.get(sps_id) if sps_id is not None else None
        if sequence is None:
            return None
        if sequence.separate_colour_planes:
            bits.u(2)
        frame_num = bits.u(sequence.frame_num_bits)
        if sequence.frame_mbs_only or not bits.u(1):
            return _Picture(False, False, frame_num)
        return _Picture(True, bool(bits.u(1)), frame_num)

    def _parameters(self, nal: bytes) -> None:
        try:
            if nal[0] & 0x1F == _SPS:
                sps_id, sequence = _sequence(nal)
                self.sequences[sps_id] = sequence
            else:
                pps_id, sps_id = _parameter_set_ids(nal)
                self.pictures[pps_id] = sps_id
        except IndexError:
            pass  # a truncated parameter set: the slices naming it are not read

    def _read_avcc(self, extradata: bytes) -> None:
        """ISO 14496-15's avcC: the NAL length size, then the SPS and PPS, each length-prefixed."""
        self.length_size = (extradata[4] & 3) + 1
        pos = 5
        for count_mask in (0x1F, 0xFF):
            if pos >= len(extradata):
                return
            count = extradata[pos] & count_mask
            pos += 1
            for _ in range(count):
                size = int.from_bytes(extradata[pos : pos + 2], "big")
                self._parameters(extradata[pos + 2 : pos + 2 + size])
                pos += 2 + size


def _annex_b(data: bytes) -> list[bytes]:
    """The NAL units of an Annex B byte stream (start codes 00 00 01)."""
    units, start = [], data.find(b"\x00\x00\x01")
    while start >= 0:
        begin = start + 3
        start = data.find(b"\x00\x00\x01", begin)
        end = len(data) if start < 0 else start
        if begin < end:
            units.append(data[begin : min(end, begin + _HEADER_BYTES)])
    return units


def _length_prefixed(data: memoryview, size: int) -> list[bytes]:
    units, pos = [], 0
    while pos + size <= len(data):
        length = int.from_bytes(data[pos : pos + size], "big")
        units.append(bytes(data[pos + size : pos + size + min(length, _HEADER_BYTES)]))
        pos += size + length
    return units
