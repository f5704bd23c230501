"""Field structure (issue 35): the comb rule, the field pass's decision, restoration and the
`combed` reason, on labelled films made from the bundled media (tests/pulldown_films.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import built_once, local_config, read_frames, shard_rows

from core.film import FieldRecord
from core.frames import ClipFrames
from core.video import FrameReader, upright_grey
from stages.probe import Probe
from stages.quality import RejectConfig
from stages.sources.cadence import cadence_name, cycle_kind, stretches
from stages.sources.field_pass import find_fields, probe_runs, sampled_and_probed
from stages.sources.field_restore import FieldRestorer
from stages.sources.fields import (
    TOOTH_LEVELS,
    FieldConfig,
    clip_combing,
    comb_share,
    even_columns,
    teeth,
)
from stages.sources.film_samples import spread_indices, spread_luma_frames

LIMIT = RejectConfig().combed_max_share
WHOLE_ERROR = 6.0  # grey levels: a clip frame within this of one moment in every band is whole


def _film(tmp_path_factory, name: str):
    import pulldown_films

    make = getattr(pulldown_films, name)
    data = built_once(tmp_path_factory, name, lambda folder: _saved(make(folder / f"{name}.mp4")))
    film = pulldown_films.FieldFilm(
        Path(data["path"]), [tuple(x) for x in data["labels"]], None, data["rate"]
    )
    return film, make


def _saved(film) -> dict:
    """The film's moments kept as grey, every fourth column (what `_nearest` compares)."""
    grey = np.stack([cv2.cvtColor(p, cv2.COLOR_RGB2GRAY)[:, ::4] for p in film.pictures])
    np.save(film.path.with_suffix(".npy"), grey)
    return {"path": str(film.path), "labels": film.labels, "rate": float(film.rate)}


def _pictures(film) -> np.ndarray:
    return np.load(film.path.with_suffix(".npy")).astype(np.float32)


def _film_fixture(name: str):
    """A session fixture `name`: the labelled film pulldown_films.`name`_film, built once."""

    @pytest.fixture(scope="session", name=name)
    def built(tmp_path_factory):
        return _film(tmp_path_factory, f"{name}_film")[0]

    return built


telecined = _film_fixture("telecined")
interlaced = _film_fixture("interlaced")
hybrid = _film_fixture("hybrid")
crawl_hybrid = _film_fixture("crawl_hybrid")
held_drawings = _film_fixture("held_drawings")
few_changes = _film_fixture("few_changes")
fine_lines = _film_fixture("fine_lines")


# ------------------------------------------------------------------------------ the comb rule


def test_teeth_found_in_a_weave_of_two_moments_and_not_in_fine_lines():
    import pulldown_films

    moments = pulldown_films.pan_pictures(2, speed=8).mean(axis=3).astype(np.uint8)
    woven = moments[0].copy()
    woven[1::2] = moments[1][1::2]
    assert comb_share(woven) > 10 * LIMIT
    assert comb_share(moments[0]) < LIMIT / 4
    lines = moments[0].copy()
    lines[::4] = 20  # hatching: one row in four
    lines[1::3] = lines[1::3] // 2  # scan lines: one row in three
    assert comb_share(lines) < LIMIT / 4


def _teeth_row_by_row(luma: np.ndarray) -> np.ndarray:
    """The comb rule as docs/sources.md states it, one row at a time (slow, plain): the map of
    tooth pixels of rows 3 to H - 4 of each picture."""
    y = luma.astype(int)
    count, height, width = y.shape
    found = np.zeros((count, max(height - 6, 0), width), bool)
    levels = TOOTH_LEVELS

    def kind(k, r):  # +1 lighter than both neighbours, -1 darker, with its own field agreeing
        here, up, down = y[k, r], y[k, r - 1], y[k, r + 1]
        own = (abs(here - y[k, r - 2]) <= levels) & (abs(here - y[k, r + 2]) <= levels)
        lighter = (here - up > levels) & (here - down > levels) & own
        darker = (here - up < -levels) & (here - down < -levels) & own
        return lighter.astype(int) - darker.astype(int)

    for k in range(count):
        for r in range(3, height - 3):
            before, here, after = kind(k, r - 1), kind(k, r), kind(k, r + 1)
            found[k, r - 3] = (here != 0) & (before == -here) & (after == -here)
    return found


def test_the_comb_rule_finds_the_pixels_the_rule_names():
    """`teeth` (vectorised, own-field test only where the runs of steps hold) finds exactly the
    pixels of the rule written out row by row, on woven, progressive and random pictures."""
    import pulldown_films

    rng = np.random.default_rng(7)
    moments = pulldown_films.pan_pictures(3, speed=8).mean(axis=3).astype(np.uint8)
    woven = moments[0].copy()
    woven[1::2] = moments[1][1::2]
    noise = rng.integers(0, 256, (2, 40, 33)).astype(np.uint8)
    stripes = noise.copy()
    stripes[:, ::2] = rng.integers(60, 80, stripes[:, ::2].shape)
    stripes[:, 1::2] = rng.integers(150, 170, stripes[:, 1::2].shape)
    patched = moments[0].copy()  # a small woven patch: few runs, tested where they are
    patched[41:121:2, 40:200] = moments[1][41:121:2, 40:200]
    # the others have many runs: their own field is tested over the whole picture
    for pictures in (patched[None], np.stack([woven, moments[2]]), noise, stripes, noise[:, :6]):
        picture, row, column = teeth(pictures)
        found = np.zeros((len(pictures), max(pictures.shape[1] - 6, 0), pictures.shape[2]), bool)
        found[picture, row - 3, column] = True
        assert np.array_equal(found, _teeth_row_by_row(pictures))
    assert len(teeth(woven[None])[0]) > 1000  # the woven pan is full of teeth


def _bikes_luma(count: int = 4) -> np.ndarray:
    """Real frames (bikes.mp4's first `count`) as a clip's luma: a view into its I420 frames."""
    rgb = read_frames(Path(__file__).parent / "media" / "bikes.mp4", 0, count, size=(320, 180))
    return ClipFrames.from_rgb(np.stack(rgb)).luma()


def test_the_comb_rule_on_real_frames_and_a_weave_of_them():
    """`teeth`, one picture at a time, finds the rule's pixels on real frames (few runs: the
    own field tested where they are) and on two of them woven (many: tested everywhere)."""
    luma = _bikes_luma()
    woven = luma[0].copy()
    woven[1::2] = luma[3][1::2]
    for pictures in (np.ascontiguousarray(luma), np.stack([woven, luma[1]])):
        picture, row, column = teeth(pictures)
        found = np.zeros((len(pictures), pictures.shape[1] - 6, pictures.shape[2]), bool)
        found[picture, row - 3, column] = True
        assert np.array_equal(found, _teeth_row_by_row(pictures))
    assert len(teeth(woven[None])[0]) > 500


def test_even_columns_are_every_other_column():
    """`even_columns` (pairs of pixels read as 16-bit numbers, cast to 8 bits) gives numpy's
    `luma[:, :, ::2]` on a clip's luma (a view into its I420 frames), and the same where it
    falls back (an odd width, a picture read every other row)."""
    luma = _bikes_luma()
    assert not np.array_equal(luma[:, :, ::2], luma[:, :, 1::2])  # the test can tell them apart
    for pictures in (luma, luma[:, :, :-1], luma[:, ::2], luma[:, :, 1:-1]):
        got = even_columns(pictures)
        assert got.flags.c_contiguous and got.dtype == np.uint8
        assert np.array_equal(got, pictures[:, :, ::2])


@pytest.mark.slow  # builds and decodes the labelled films (seconds each)
def test_the_labelled_films_hold_what_they_say(telecined, interlaced, fine_lines):
    """3:2 telecine combs two frames in five; a woven moment pair combs every frame."""
    combed = telecined.combed_frames()
    assert 0.38 < len(combed) / len(telecined.labels) < 0.42
    assert {i % 5 for i in combed} == {2, 3}
    assert interlaced.combed_frames() == list(range(len(interlaced.labels)))
    assert fine_lines.combed_frames() == []


@pytest.mark.slow  # builds the labelled films (seconds each)
def test_the_held_drawing_films_hold_what_they_say(held_drawings, few_changes):
    """Drawings held 3, 2 and 4 fields comb a frame at every place of the cycle of five (its
    bottom field the next drawing); the few-changes film combs two frames."""
    combed = held_drawings.combed_frames()
    assert {i % 5 for i in combed} == {0, 1, 2, 3, 4}
    assert all(bottom - top in (0, 1) for top, bottom in held_drawings.labels)
    assert few_changes.combed_frames() == [12, 35]


def test_the_places_of_mended_frames_tell_telecine_from_held_drawings():
    """3:2 keeps to two neighbouring places of five (one edit may move them), 2:3:3:2 to one;
    drawings held 3 fields each comb a frame every third frame, at every place; two frames
    could be either."""
    three_two = [i for i in range(40) if i % 5 in (2, 3)]
    assert cycle_kind(three_two) == "telecined" and cadence_name([three_two]) == "3:2"
    edited = [i for i in range(40) if i % 5 in ((2, 3) if i < 20 else (4, 0))]  # cut at 20
    assert len(stretches(edited)) == 2 and cycle_kind(edited) == "telecined"
    assert cadence_name([edited]) == "broken"
    assert cadence_name([[2, 7, 12, 17]]) == "2:3:3:2"
    held_three = [field // 2 for field in range(3, 120, 3) if field % 2]  # a change between
    assert cycle_kind(held_three) == "interlaced"  # a frame's fields combs it
    assert cycle_kind([12, 35]) == "unsure" and cycle_kind([1, 2]) == "unsure"
    assert cycle_kind([2, 3, 7]) == "telecined"
    assert cycle_kind([]) == "unsure"


# ------------------------------------------------------------------------------ the film pass


@pytest.mark.slow  # builds and decodes the labelled films (seconds each)
@pytest.mark.parametrize(
    ("name", "structure", "order", "cadence"),
    [
        ("telecined", "telecined", "top", "3:2"),
        ("interlaced", "interlaced", "top", None),
        ("hybrid", "hybrid", "top", "3:2"),
        ("fine_lines", "progressive", None, None),
        ("held_drawings", "interlaced", "top", None),
        ("few_changes", "interlaced", "top", None),
    ],
)
def test_field_pass_decides_from_the_pictures(request, name, structure, order, cadence):
    film = request.getfixturevalue(name)
    record = find_fields(Probe().process(film.path), None, FieldConfig())
    assert (record.structure, record.field_order, record.cadence) == (structure, order, cadence)
    if name == "telecined":  # stored with progressive flags: the pictures decided
        assert record.stream_field_order is None
    kinds = [kind for _, _, kind in record.parts]
    if name == "hybrid":  # the film's pictures first, the video-made pan after them
        assert kinds[0] == "telecined" and kinds[-1] == "interlaced"


@pytest.mark.slow  # builds and decodes two films (seconds each)
def test_a_slow_credit_crawl_makes_a_hybrid_and_a_progressive_crawl_does_not(
    crawl_hybrid, tmp_path
):
    """Credits crawling 1.5 pixels a field after telecined film (the real hybrid copies' case):
    the crawl's woven frames show no teeth, so its runs read progressive and the film
    telecined. Their fields are two moments all the same: the bottom field sits half the
    frame's motion from the top one. The same crawl made one moment a frame stays progressive."""
    import pulldown_films

    film = Probe().process(crawl_hybrid.path)
    crawl = 150  # the first crawl frame: 120 film pictures telecined to 150 frames
    frames = FrameReader(str(film.path), film.frame_pts).frames(crawl + 40, crawl + 44)
    assert all(comb_share(f.to_ndarray(format="gray")[:, ::2]) < LIMIT for _, f in frames)
    record = find_fields(film, None, FieldConfig())
    assert (record.structure, record.field_order, record.cadence) == ("hybrid", "top", "3:2")
    kinds = [kind for start, _, kind in record.parts]
    starts = [start for start, _, _ in record.parts]
    assert all(kind == "telecined" for kind, start in zip(kinds, starts) if start + 40 <= crawl)
    assert all(kind == "interlaced" for kind, start in zip(kinds, starts) if start >= crawl)
    progressive = pulldown_films.progressive_crawl_film(tmp_path / "crawl.mp4")
    runs = probe_runs(Probe().process(progressive.path), FieldConfig())
    assert runs and all(run.moving and run.kind == "progressive" for run in runs)


@pytest.mark.parametrize("name", ["bikes", pytest.param("telecined", marks=pytest.mark.slow)])
def test_the_runs_are_the_same_from_one_pass_and_from_a_seek_each(request, name):
    """bikes.mp4 (6 key frames, 250 frames: six runs that overlap) and the telecined film: the
    probed runs show the same whichever way their frames are decoded."""
    from conftest import BIKES

    film = Probe().process(BIKES if name == "bikes" else request.getfixturevalue(name).path)
    seeks = probe_runs(film, FieldConfig(), one_pass=False)
    assert seeks == probe_runs(film, FieldConfig(), one_pass=True)
    assert seeks and all(run.moving for run in seeks)
    if name == "telecined":
        assert any(run.mended for run in seeks)


def test_a_short_films_samples_and_runs_come_from_one_decode():
    """bikes.mp4 (10 s: 10 samples, too few to decide on): the samples and the runs from one
    decode are the spread pass's samples and the runs probed on their own."""
    from conftest import BIKES

    film = Probe().process(BIKES)
    wanted = spread_indices(film, 10)
    shared = sampled_and_probed(film, wanted, FieldConfig())
    assert shared is not None
    samples, indices, runs = shared
    alone = spread_luma_frames(film, 10)
    assert len(samples) == len(alone) == len(wanted) and indices == sorted(wanted)
    assert all(np.array_equal(a, b) for a, b in zip(samples, alone))
    assert runs == probe_runs(film, FieldConfig())
    assert sampled_and_probed(film, spread_indices(film, 12), FieldConfig()) is None  # enough


def test_a_sample_the_one_decode_loses_costs_only_itself(tmp_path):
    """bikes.mp4 with 40 runs of its middle third's bytes overwritten: the one decode gives 9
    of the 10 samples wanted. Each comes with its own index (the overlay pass times its middle
    looks by them), and is the frame of that index."""
    from conftest import BIKES, damaged_copy

    damaged = damaged_copy(BIKES, tmp_path / "damaged.mp4", seed=0)
    film = Probe().process(damaged)
    wanted = spread_indices(film, 10)
    shared = sampled_and_probed(film, wanted, FieldConfig())
    assert shared is not None
    samples, indices, _ = shared
    assert len(samples) == len(indices) == len(wanted) - 1 and set(indices) < wanted
    # every frame decoded in order, as the one pass does (a damaged stream's concealment
    # depends on what was decoded before)
    reader = FrameReader(str(damaged), film.frame_pts, threads=1)
    decoded = dict(upright_grey(reader.frames(0, max(wanted) + 1), film.rotation))
    assert [i for i in sorted(wanted) if i in decoded] == indices
    assert all(np.array_equal(decoded[i], sample) for i, sample in zip(indices, samples))


def test_a_progressive_film_is_decided_on_the_key_frames_alone():
    """The sample film: no key frame combed, no interlace flag: no frame decoded for it."""
    from conftest import SINTEL

    film = Probe().process(SINTEL)
    record = find_fields(film, None, FieldConfig())
    assert record.structure == "progressive" and record.parts == []
    assert record.key_frames_seen >= FieldConfig().key_frames // 2
    assert record.line() == ""


# ------------------------------------------------------------------------------ restoration


@pytest.mark.slow  # builds and decodes the labelled films (seconds each)
def test_telecine_restored_to_its_film_pictures(telecined):
    """Field matching and decimation give back the 23.976 pictures, whole, each once, in order."""
    info = Probe().process(telecined.path)
    record = find_fields(info, None, FieldConfig())
    restorer = FieldRestorer(record, info.time_base, info.fps)
    pictures = _pictures(telecined)
    shown = []
    for index, frame in restorer.frames(
        FrameReader(str(telecined.path), info.frame_pts, 1).frames(0, info.num_frames)
    ):
        grey = frame.to_ndarray(format="gray").astype(np.float32)
        moment, error = _nearest(grey, pictures)
        assert error < WHOLE_ERROR, (index, moment, error)
        shown.append(moment)
    assert len(shown) == len(info.frame_pts) - len(restorer.dropped)
    assert abs(len(shown) - len(pictures)) <= 2  # a cycle cut short at the end keeps its frames
    assert shown == sorted(shown)
    steps = np.abs(np.diff(pictures, axis=0)).mean(axis=(1, 2))  # the source holds still at times
    moved = {k + 1 for k, step in enumerate(steps) if step > 1.0}
    assert not moved - set(shown)  # no picture that moved was left out
    rate = info.fps * len(shown) / info.num_frames
    assert abs(rate - 24000 / 1001) < 0.25


# ------------------------------------------------------------------------------ end to end


def _cut(film, out: Path, **settings):
    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_film

    result = run_film(film.path, out, local_config(**settings), load_ip(None))
    assert result.ok, result.message
    summary = json.loads((Path(result.film_dir) / "summary.json").read_text())
    rows = shard_rows(
        Path(result.film_dir),
        ["usable", "reject_reasons", "combing", "frame_indices"],
    )
    return result, summary, rows


@pytest.mark.slow
def test_telecined_film_cut_whole_and_named(telecined, tmp_path):
    result, summary, rows = _cut(telecined, tmp_path)
    record = FieldRecord.from_dict(summary["fields"])
    assert record.structure == "telecined"
    assert re.search(r"telecined 3:2, restored to 2[34]\.\d{3} fps", result.message)
    assert abs(record.restored_fps - 24000 / 1001) < 0.25
    assert "field_restore" in summary["stage_seconds"]
    usable = [row for row in rows if row["usable"]]
    assert usable and all(row["combing"] <= LIMIT for row in usable)


@pytest.mark.slow
def test_telecined_film_without_restoration_is_caught_as_combed(telecined, tmp_path):
    """The `combed` reason catches the woven frames that no restoration mended."""
    _, summary, rows = _cut(telecined, tmp_path, fields__enabled="false")
    assert summary.get("fields") is None
    combed = [row for row in rows if "combed" in row["reject_reasons"]]
    assert combed, [row["combing"] for row in rows]
    woven = set(telecined.combed_frames())
    for row in rows:
        if row["usable"]:
            assert not woven & set(row["frame_indices"]), row["frame_indices"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["interlaced", "hybrid"])
def test_interlaced_and_hybrid_films_cut_whole(request, name, tmp_path):
    film = request.getfixturevalue(name)
    result, summary, rows = _cut(film, tmp_path)
    assert summary["fields"]["structure"] == name
    if name == "interlaced":
        assert "interlaced, top field first, deinterlaced" in result.message
    usable = [row for row in rows if row["usable"]]
    assert usable and all(row["combing"] <= LIMIT for row in usable)


@pytest.mark.slow
def test_held_drawings_deinterlaced_at_the_streams_rate(held_drawings, tmp_path):
    """Truly interlaced held drawings are not decimated: every frame kept, at 29.97."""
    result, summary, rows = _cut(held_drawings, tmp_path)
    record = FieldRecord.from_dict(summary["fields"])
    assert record.structure == "interlaced" and record.cadence is None
    assert "interlaced, top field first, deinterlaced" in result.message
    assert record.restored_frames == len(held_drawings.labels)
    assert abs(record.restored_fps - 30000 / 1001) < 0.01
    usable = [row for row in rows if row["usable"]]
    assert usable and all(row["combing"] <= LIMIT for row in usable)


@pytest.mark.slow
def test_fine_line_art_is_never_combed(fine_lines, tmp_path):
    result, summary, rows = _cut(fine_lines, tmp_path)
    assert summary["fields"]["structure"] == "progressive"
    assert "telecined" not in result.message and "interlaced" not in result.message
    assert rows and all("combed" not in row["reject_reasons"] for row in rows)
    assert max(row["combing"] for row in rows) < LIMIT / 4


def test_clip_combing_counts_teeth_only_where_the_picture_moves():
    """A still alternating-row pattern (the one progressive picture teeth cannot tell from a
    weave) is left out; the same pattern on moving pictures is counted."""
    rows = np.full((4, 96, 120), 80, np.uint8)
    rows[:, ::2] = 160
    assert clip_combing(rows) == 0.0
    moving = rows.copy()
    moving[1:, :, :60] = 60
    moving[1:, ::2, :60] = 200
    assert clip_combing(moving) > LIMIT


def _nearest(grey: np.ndarray, pictures: np.ndarray) -> tuple[int, float]:
    """The moment a grey frame is nearest to (`pictures`: grey, every fourth column), and its
    error: the largest mean absolute difference over bands of 16 rows (a woven frame is far off
    in the bands that moved)."""
    small = grey[:, ::4]
    candidates = pictures
    height = min(small.shape[0], candidates.shape[1]) // 16 * 16
    diff = np.abs(candidates[:, :height] - small[:height]).reshape(
        len(candidates), -1, 16 * small.shape[1]
    )
    errors = diff.mean(axis=2).max(axis=1)
    best = int(errors.argmin())
    return best, float(errors[best])
