"""Field-coded streams are counted, timed and sampled by the frames they hold (stages/probe.py,
stages/sources/field_coding.py), and a capture that starts mid-GOP loses only what it cannot decode."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest
from conftest import (
    FIELD_FILM_FRAMES,
    field_film_frames,
    field_film_planes,
    local_config,
    make_video,
    soft_telecine_film,
)

from core.video import FrameReader
from pipeline.data.ip import load_ip
from pipeline.running.runner import run_film
from stages.crop import sample_luma_frames
from stages.probe import Probe
from stages.sources.field_coding import FieldPairing


def test_a_capture_of_field_pictures_is_counted_by_its_frames(field_coded_films):
    """228 packets at 50 a second hold 114 frames at 25: the failure of issue 35 was a count of
    228, so every second sample of a window was missing (`decode_gap`, 8 of 16)."""
    capture = field_coded_films["whole"]
    with av.open(str(capture)) as container:
        packets = sum(1 for p in container.demux(video=0) if p.size)
    film = Probe().process(capture)
    assert packets == 2 * len(FIELD_FILM_FRAMES)
    assert film.num_frames == len(FIELD_FILM_FRAMES)
    assert film.field_pictures == packets
    assert film.fps == 25.0
    assert film.duration == pytest.approx(len(FIELD_FILM_FRAMES) / 25)
    assert film.sar == "12:11"
    assert film.warnings == []


def test_every_frame_decodes_where_the_timeline_puts_it(field_coded_films):
    """The fields are lossless (I_PCM), so each decoded frame is its source frame exactly: the
    reader's index k is the film's frame k, read from the start and after a seek."""
    capture = field_coded_films["whole"]
    film = Probe().process(capture)
    source = field_film_frames()
    reader = FrameReader(str(capture), film.frame_pts, threads=1)
    indices = []
    for index, frame in reader.frames(0, film.num_frames):
        indices.append(index)
        if index % 17 == 0:
            luma = frame.to_ndarray()[: frame.height]
            assert np.array_equal(luma, field_film_planes(source[index])[0]), index
    assert indices == list(range(film.num_frames))
    assert reader.corrupt_packets == reader.unmatched_frames == 0
    later = FrameReader(str(capture), film.frame_pts, threads=1)
    index, frame = next(later.frames(70, 71))
    assert index == 70
    assert np.array_equal(frame.to_ndarray()[: frame.height], field_film_planes(source[70])[0])


def test_a_capture_that_starts_mid_gop_loses_only_what_it_cannot_decode(field_coded_films):
    """Seven fields missing at the start: three whole frames and a top field. The lone bottom
    field cannot be decoded and is left out, with a warning; every frame after it is kept."""
    film = Probe().process(field_coded_films["mid_gop"])
    assert film.num_frames == len(FIELD_FILM_FRAMES) - 4
    assert any("first 1 frame(s)" in w for w in film.warnings), film.warnings
    reader = FrameReader(str(field_coded_films["mid_gop"]), film.frame_pts, threads=1)
    source = field_film_frames()
    first_index, first = next(reader.frames(0, 1))
    assert first_index == 0
    assert np.array_equal(first.to_ndarray()[: first.height], field_film_planes(source[4])[0])


@pytest.mark.slow  # over 1.5 s (README, "Test time"): two whole runs
def test_the_pipeline_cuts_field_coded_captures_with_no_decode_gap(field_coded_films, tmp_path):
    config = local_config(overlays__enabled=False, motion__enabled=False)
    for name, capture in field_coded_films.items():
        result = run_film(capture, tmp_path / name, config, load_ip(None))
        assert result.ok, result.message
        summary = json.loads((result.film_dir / "summary.json").read_text())
        drops = pd.read_parquet(result.film_dir / "drops.parquet")
        manifest = pd.read_parquet(result.film_dir / "manifest.parquet")
        assert "decode_gap" not in set(drops.reason), drops.detail.tolist()
        # the shots of 61 and 50 frames (2.44 and 2 s): one clip each
        assert len(manifest) == 2, (name, summary["drops"])
        assert summary["film"]["field_pictures"] > 0
        assert summary["frames_decoded"] == summary["film"]["num_frames"]
        assert summary["unmatched_frames"] == summary["corrupt_packets"] == 0


def test_a_progressive_capture_that_starts_mid_gop(tmp_path):
    """An H.264 film whose first 5 packets are cut away, in MPEG-TS: its P frames up to the next
    key frame refer to pictures it does not hold. The timeline starts at the first frame the
    decoder gives, so it holds exactly the frames decoded."""
    source = make_video(tmp_path / "source.mp4", num_frames=60, cuts=(30,))
    cut = tmp_path / "cut.ts"
    with av.open(str(source)) as film, av.open(str(cut), "w") as out:
        stream = out.add_stream_from_template(film.streams.video[0])
        for index, packet in enumerate(film.demux(video=0)):
            if packet.dts is None or index < 5:
                continue
            packet.stream = stream
            out.mux(packet)
    film = Probe().process(cut)
    with av.open(str(cut)) as container:
        decoded = [frame.pts for frame in container.decode(video=0)]
    assert film.frame_pts == decoded
    assert film.num_frames == 60 - 12  # the first key frame after the cut is frame 12
    assert any("first 7 frame(s)" in w for w in film.warnings), film.warnings


def test_mbaff_frames_and_progressive_streams_count_a_frame_a_packet(tmp_path):
    """x264's interlaced coding (MBAFF) codes frames: one packet, one frame, as before; a
    progressive stream's parameters say so, and its packets are never read."""
    path = tmp_path / "mbaff.ts"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 352, 288, "yuv420p"
        stream.options = {"preset": "ultrafast", "x264-params": "interlaced=1:tff=1"}
        for index in range(30):
            picture = np.full((288, 352, 3), 8 * index, np.uint8)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, 25)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    film = Probe().process(path)
    assert (film.num_frames, film.fps, film.field_pictures) == (30, 25.0, 0)
    with av.open(str(make_video(tmp_path / "p.mp4", num_frames=3))) as container:
        progressive = FieldPairing(container.streams.video[0].codec_context.extradata)
    assert progressive.may_hold_fields() is False


def test_a_packet_without_slices_still_counts(tmp_path: Path):
    assert FieldPairing(None).starts_frame(b"\x00\x00\x00\x01\x09\xf0") is True


def test_soft_telecine_is_counted_by_its_coded_frames(tmp_path):
    """MPEG-2 with repeat_first_field flags (3:2 soft pulldown): 114 coded frames at 23.976,
    shown as 285 fields of 29.97i. The frames held are the coded ones: counted, timed and
    decoded one for one, each at the field it is first shown on."""
    film_path = soft_telecine_film(tmp_path / "soft.ts")
    film = Probe().process(film_path)
    assert film.num_frames == len(FIELD_FILM_FRAMES)
    assert film.fps == pytest.approx(24000 / 1001)
    assert film.warnings == []
    times = film.frame_times()
    fields = [(b - a) * 60000 / 1001 for a, b in zip(times, times[1:])]  # 90 kHz ticks, rounded
    assert [round(n, 2) for n in fields] == [3.0, 2.0] * 56 + [3.0]
    reader = FrameReader(str(film_path), film.frame_pts, threads=1)
    assert [index for index, _ in reader.frames(0, film.num_frames)] == list(range(114))
    assert reader.unmatched_frames == reader.corrupt_packets == 0


def test_key_frames_of_field_pictures_are_sampled_whole(field_coded_films):
    """The border crop and the overlay pass sample key frames, the decoder skipping the other
    pictures: the film's key frames are its IDR frames (MPEG-TS's parser flags every intra
    field key, 228 here), and each sampled frame has both its fields (the source frame)."""
    film = Probe().process(field_coded_films["whole"])
    assert film.keyframes == 10  # 114 frames, an IDR every 12
    planes = sample_luma_frames(film, 48)
    reader = FrameReader(str(field_coded_films["whole"]), film.frame_pts, threads=1)
    whole = {i: f.to_ndarray(format="gray") for i, f in reader.frames(0, film.num_frames)}
    assert len(planes) == 10
    for k, plane in enumerate(planes):
        assert np.array_equal(plane, whole[12 * k]), k
