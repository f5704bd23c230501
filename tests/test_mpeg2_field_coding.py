"""MPEG-2 field pictures are counted, timed and decoded by the frames they make (stages/probe.py,
stages/sources/mpeg2_fields.py): in MPEG-TS and MPEG-PS FFmpeg's parser joins a frame's two
fields into one packet; where a container holds a packet per field, the probe pairs them."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import av
import numpy as np
import pandas as pd
import pytest
from conftest import (
    FIELD_FILM_FRAMES,
    MPEG2_FIELD_RATES,
    field_film_frames,
    field_film_planes,
    local_config,
)
from mpeg2_field_films import mosaic

from core.video import FrameReader
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.probe import Probe
from stages.sources.mpeg2_fields import Mpeg2FieldPairing

FRAMES = len(FIELD_FILM_FRAMES)  # 114 frames, 228 field pictures
PICTURE_START = b"\x00\x00\x01\x00"


def _mosaics() -> np.ndarray:
    return np.stack([mosaic(field_film_planes(rgb)) for rgb in field_film_frames()]).astype(int)


def _label(luma: np.ndarray, mosaics: np.ndarray) -> int:
    """The source frame a decoded frame shows: the one whose mosaic it equals (to 1, the IDCT's
    rounding), and no other. Candidates are compared at one sample per block and field."""
    luma = luma.astype(int)
    samples = (slice(None), slice(4, None, 16), slice(4, None, 8))
    near = np.abs(mosaics[samples] - luma[samples[1:]]).max(axis=(1, 2)) <= 1
    matches = [k for k in np.flatnonzero(near) if np.abs(luma - mosaics[k]).max() <= 1]
    assert len(matches) == 1, matches
    return int(matches[0])


def test_the_raw_stream_holds_two_field_pictures_a_frame_and_decodes(mpeg2_field_films):
    """228 picture headers, each with its own picture coding extension saying top (1) then
    bottom (2); decoded, 114 frames, frame k the 8x8-block mosaic of source frame k."""
    data = mpeg2_field_films["pal.m2v"].read_bytes()
    assert data.count(PICTURE_START) == 2 * FRAMES
    structures = [data[at + 6] & 3 for at in _extensions(data, 8)]
    assert structures == [1, 2] * FRAMES
    mosaics = _mosaics()
    with av.open(str(mpeg2_field_films["pal.m2v"])) as film:
        labels = [_label(f.to_ndarray()[: f.height], mosaics) for f in film.decode(video=0)]
    assert labels == list(range(FRAMES))


def _extensions(data: bytes, kind: int) -> list[int]:
    at, found = data.find(b"\x00\x00\x01\xb5"), []
    while at >= 0:
        if data[at + 4] >> 4 == kind:
            found.append(at)
        at = data.find(b"\x00\x00\x01\xb5", at + 4)
    return found


@pytest.mark.parametrize(
    "name", ["pal.ts", "pal.vob", "pal_copy.ts", "pal_copy.vob", "ntsc.ts", "ntsc_copy.vob"]
)
def test_ts_and_ps_give_a_packet_per_frame(mpeg2_field_films, name):
    """Whether each field has a PES packet of its own or the raw stream was copied in, FFmpeg's
    MPEG-2 parser joins a frame's fields into one packet: 114 packets of two pictures each, and
    the probe counts the 114 frames at the frame rate (the field pictures are 228)."""
    path = mpeg2_field_films[name]
    with av.open(str(path)) as container:
        packets = [bytes(p) for p in container.demux(video=0) if p.size]
    with av.open(str(path)) as container:
        decoded = [frame.pts for frame in container.decode(video=0)]
    film = Probe().process(path)
    assert [p.count(PICTURE_START) for p in packets] == [2] * FRAMES
    assert film.num_frames == len(decoded) == FRAMES
    assert film.frame_pts == decoded
    rate = MPEG2_FIELD_RATES[name.split(".")[0].removesuffix("_copy")]
    assert film.fps == pytest.approx(float(rate))
    assert film.field_pictures == 0  # the parser paired them: nothing left for the probe
    assert film.warnings == []


def test_ps_with_a_pes_packet_per_field_is_timed_a_field_off(mpeg2_field_films):
    """In MPEG-PS a PES packet's timestamp is its first picture's (ISO 13818-1 2.4.3.7); where
    that is a second field and the next frame starts later in the packet, FFmpeg's parser gives
    that frame the field's timestamp: a third of the frames come a field early. The decoder
    gives the same timestamps, so the timeline still matches every decoded frame."""
    film = Probe().process(mpeg2_field_films["pal.vob"])
    steps = Counter(b - a for a, b in zip(film.frame_pts, film.frame_pts[1:]))
    assert set(steps) == {1800, 3600, 5400}  # one, two and three fields of 90 kHz
    assert film.vfr
    assert film.num_frames == FRAMES and film.fps == 25.0


def test_a_packet_per_field_is_paired_into_frames(mpeg2_field_films):
    """Matroska written a field picture per block: 228 packets, which the probe counted as 228
    frames while the decoder gives 114; paired, the timeline is the decoder's, frame k at its
    index from the start and after a seek."""
    path = mpeg2_field_films["pal.mkv"]
    with av.open(str(path)) as container:
        assert sum(1 for p in container.demux(video=0) if p.size) == 2 * FRAMES
    with av.open(str(path)) as container:
        decoded = [frame.pts for frame in container.decode(video=0)]
    film = Probe().process(path)
    assert film.num_frames == FRAMES and film.frame_pts == decoded
    assert (film.fps, film.field_pictures, film.keyframes) == (25.0, 2 * FRAMES, FRAMES)
    mosaics = _mosaics()
    reader = FrameReader(str(path), film.frame_pts, threads=1)
    for index, frame in reader.frames(0, FRAMES):
        if index % 19 == 0:
            assert _label(frame.to_ndarray()[: frame.height], mosaics) == index
    assert reader.corrupt_packets == reader.unmatched_frames == 0
    index, frame = next(FrameReader(str(path), film.frame_pts, threads=1).frames(70, 71))
    assert (index, _label(frame.to_ndarray()[: frame.height], mosaics)) == (70, 70)


def test_a_progressive_mpeg2_sequence_is_not_read(tmp_path):
    """FFmpeg's MPEG-2 encoder writes progressive_sequence 1: the pairing stops at once, so such
    streams keep one frame per packet, their packets unread."""
    encoder = av.CodecContext.create("mpeg2video", "w")
    encoder.width, encoder.height, encoder.pix_fmt = 64, 64, "yuv420p"
    encoder.time_base, encoder.framerate = Fraction(1, 25), Fraction(25)
    picture = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
    packets = [bytes(p) for p in encoder.encode(picture.reformat(format="yuv420p"))]
    packets += [bytes(p) for p in encoder.encode(None)]
    pairing = Mpeg2FieldPairing(None)
    assert pairing.may_hold_fields() is None
    assert pairing.starts_frame(packets[0]) is True
    assert pairing.may_hold_fields() is False


@pytest.mark.slow  # over 1.5 s (README, "Test time"): three whole runs
def test_the_pipeline_cuts_mpeg2_field_pictures_with_no_decode_gap(mpeg2_field_films, tmp_path):
    config = local_config(overlays__enabled=False, motion__enabled=False)
    for name in ("pal.ts", "pal.vob", "pal.mkv"):
        result = run_film(mpeg2_field_films[name], tmp_path / name, config, load_ip(None))
        assert result.ok, result.message
        summary = json.loads((result.film_dir / "summary.json").read_text())
        drops = pd.read_parquet(result.film_dir / "drops.parquet")
        manifest = pd.read_parquet(result.film_dir / "manifest.parquet")
        assert "decode_gap" not in set(drops.reason), drops.detail.tolist()
        assert len(manifest) == 2, (name, summary["drops"])  # the shots of 61 and 50 frames
        assert summary["frames_decoded"] == summary["film"]["num_frames"] == FRAMES
        assert summary["unmatched_frames"] == summary["corrupt_packets"] == 0


def _decoded(path) -> list[int]:
    """The timestamps of the frames the decoder gives, passing over packets it rejects."""
    pts = []
    with av.open(str(path)) as container:
        for packet in container.demux(video=0):
            try:
                pts += [frame.pts for frame in packet.decode()]
            except av.error.InvalidDataError:
                continue
    return pts


def test_a_capture_that_starts_on_a_second_field(mpeg2_field_films):
    """Started on a lone bottom field, in MPEG-TS: FFmpeg's parser pairs each bottom field with
    the next frame's top field, and the decoder rejects those packets ("Invalid frame
    dimensions") until the second group of pictures. The probe passed over them (it rejected
    the film before: `cannot decode its mpeg2video video`); its timeline is the 90 frames
    decoded, with a warning. In Matroska a field a packet, the pairing follows the decoder's
    (shifted, then again in step at the sequence header) but for one frame it never gives."""
    film = Probe().process(mpeg2_field_films["pal_mid.ts"])
    assert film.frame_pts == _decoded(mpeg2_field_films["pal_mid.ts"])
    assert film.num_frames == 90
    assert any("first 19 frame(s)" in w for w in film.warnings), film.warnings
    film = Probe().process(mpeg2_field_films["pal_mid.mkv"])
    decoded = _decoded(mpeg2_field_films["pal_mid.mkv"])
    assert len(decoded) == 110 and set(decoded) < set(film.frame_pts)
    assert film.num_frames == 111
