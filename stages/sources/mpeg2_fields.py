"""Which packets of an MPEG-2 stream start a frame, where a container holds a field per packet.

MPEG-2 may code a frame as two field pictures (picture_structure top or bottom in the picture
coding extension, ISO/IEC 13818-2 6.3.10), as some broadcast captures and DVDs do. In MPEG-TS
and MPEG-PS, FFmpeg's MPEG-2 parser joins a frame's two field pictures into one packet, so
packets are frames already. A container written without that parser (Matroska, MP4 muxed a
picture per block) holds a packet per field, while the decoder still gives one frame per pair:
counting packets counted 228 frames where the decoder gives 114 (tests/test_mpeg2_field_coding.py).

The rule is the decoder's (FFmpeg's mpeg_field_start): a field picture that follows an unpaired
field of the other parity is its second field; anything else starts a frame. Only the head of
each packet is read, for its first picture: a packet the parser joined starts with a frame's
first field, and its second field is never looked for. A stream whose sequence extension says
progressive_sequence has no field pictures and is not read further.
"""

from __future__ import annotations

_HEAD_BYTES = 4096  # of a packet: headers, quantiser matrices and its first picture's extension
_PICTURE, _EXTENSION = b"\x00\x00\x01\x00", b"\x00\x00\x01\xb5"
_SEQUENCE_HEADER = b"\x00\x00\x01\xb3"
_SEQUENCE_EXTENSION, _PICTURE_CODING_EXTENSION = 1, 8
_FRAME, _INTRA = 3, 1


class Mpeg2FieldPairing:
    """Feed the packets in decode order (`starts_frame`). The same interface as H.264's
    FieldPairing (stages/sources/field_coding.py): `fields` counts the field pictures this
    pairing joined (none where the demuxer's parser joined them), `idr` says whether the last
    packet read starts an intra frame."""

    def __init__(self, extradata: bytes | None):
        self.progressive: bool | None = None  # progressive_sequence, once a sequence is read
        self.open_bottom: bool | None = None  # the parity of a first field waiting for its pair
        self.fields = 0
        self.idr = False
        if extradata:
            self._sequence(extradata)

    def may_hold_fields(self) -> bool | None:
        """False when the sequence is progressive; None before a sequence extension is read."""
        return None if self.progressive is None else not self.progressive

    def starts_frame(self, packet) -> bool:
        """Whether this packet (bytes, or any buffer: an av.Packet is read in place) starts a
        frame: a frame picture, a first field, or a packet whose picture is out of reach."""
        head = bytes(memoryview(packet)[:_HEAD_BYTES])
        self._sequence(head)
        picture = _first_picture(head)
        structure, self.idr = picture if picture else (_FRAME, False)
        if head.find(_SEQUENCE_HEADER) >= 0 or structure == _FRAME:
            self.open_bottom = None  # the decoder pairs no field across a sequence header
        if structure == _FRAME:
            return True
        bottom = structure == 2
        if self.open_bottom is not None and self.open_bottom != bottom:
            self.open_bottom = None
            self.fields += 2
            return False
        self.open_bottom = bottom
        return True

    def _sequence(self, data: bytes) -> None:
        at = data.find(_EXTENSION)
        while 0 <= at < len(data) - 5:
            if data[at + 4] >> 4 == _SEQUENCE_EXTENSION:
                self.progressive = bool(data[at + 5] & 0x08)
                return
            at = data.find(_EXTENSION, at + 4)


def _first_picture(head: bytes) -> tuple[int, bool] | None:
    """The picture_structure of the packet's first picture, and whether it is intra coded; None
    where its picture coding extension is not in `head`."""
    picture = head.find(_PICTURE)
    extension = head.find(_EXTENSION, picture + 4) if picture >= 0 else -1
    if extension < 0 or len(head) < extension + 7:
        return None
    if head[extension + 4] >> 4 != _PICTURE_CODING_EXTENSION:
        return None
    return head[extension + 6] & 3, (head[picture + 5] >> 3) & 7 == _INTRA
