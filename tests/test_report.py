"""The HTML report (pipeline/inspection/report.py), built from the shards of a film folder and opened in
headless Chromium (tests/browser.py; the `chromium` fixture is in tests/conftest.py). The
screenshots land in test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import base64
import html
import io
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from browser import Chromium
from conftest import ARTIFACTS, decode_directly, rewrite_film, shard_rows
from PIL import Image

from pipeline.cli import main as cli_main
from pipeline.inspection.explore import DatasetError, open_dataset
from pipeline.inspection.report import ReportOptions, build_report, write_report
from pipeline.inspection.report_data import source_frame_at

LEVEL_EDGES = [1.0, 3.0, 6.0, 12.0]  # the test's own level edges, stored like the motion stage's


# ---------------------------------------------------------------- film variants


def _motion_and_caption(row: dict) -> dict:
    """Fill the motion and caption columns from the clip itself: the mean absolute change between
    consecutive frames stands in for the flow magnitude, and the captions vary with the clip."""
    frames = decode_directly(row["video"]).astype(np.int16)
    scope = float(np.abs(np.diff(frames, axis=0)).mean())
    level = 1 + int(np.searchsorted(LEVEL_EDGES, scope, side="right"))
    rider = ["Rider", "Walker"][row["clip_index"] % 2]
    row.update(
        motion_scope=scope,
        motion_level=level,
        motion_backend="framediff",
        motion_levels_version="test-1",
        characters=[rider],
        num_characters=1,
        subject=rider.lower(),
        motion_description="ride along the street",
        environment=["street", "square"][row["clip_index"] % 2],
        adverb="slowly",
        social=0,
        entertainment=1,
        stamina=-1,
        caption_status="ok",
        instruction=f"Character: {rider}; Motion: riding past <the> camera; "
        f"Background: street {row['clip_index']}.",
    )
    return row


def _without_motion_and_captions(row: dict) -> dict:
    for column in (
        "motion_scope",
        "motion_level",
        "motion_backend",
        "motion_levels_version",
        "characters",
        "num_characters",
        "subject",
        "environment",
        "instruction",
        "caption_status",
    ):
        row[column] = None
    return row


@pytest.fixture(scope="module")
def annotated_film(film_dir, tmp_path_factory) -> Path:
    def add_levels(summary):
        return {**summary, "motion_levels": {"version": "test-1", "edges": LEVEL_EDGES}}

    return rewrite_film(
        film_dir, tmp_path_factory.mktemp("annotated") / "bikes", _motion_and_caption, add_levels
    )


@pytest.fixture(scope="module")
def annotated_page(annotated_film) -> str:
    """The report of the annotated film, built once for the tests that only read it."""
    return build_report(open_dataset(annotated_film))


@pytest.fixture(scope="module")
def bare_film(film_dir, tmp_path_factory) -> Path:
    """The film as the early pipeline writes it, with a summary missing most optional keys."""

    def strip(summary):
        return {"film": {"film_name": summary["film"]["film_name"]}}

    film = rewrite_film(
        film_dir, tmp_path_factory.mktemp("bare") / "bikes", _without_motion_and_captions, strip
    )
    (film / "drops.parquet").unlink()
    return film


PAGE_STATE = """(() => {
  const loaded = img => img.complete && img.naturalWidth > 0;
  const images = [...document.images];
  const links = [...document.querySelectorAll('[src], [href]')]
    .map(e => e.getAttribute('src') || e.getAttribute('href'));
  return {
    previews: images.filter(i => i.classList.contains('preview'))
      .map(i => ({loaded: loaded(i), width: i.naturalWidth, alt: i.alt})),
    plots: images.filter(i => i.classList.contains('plot'))
      .map(i => ({name: i.dataset.plot, loaded: loaded(i)})),
    broken: images.filter(i => !loaded(i)).map(i => i.alt),
    external: links.filter(u => !u.startsWith('data:') && !u.startsWith('#')),
    text: document.body.innerText,
  };
})()"""


def _render(chromium: Chromium, report: Path, screenshot_name: str) -> tuple[dict, list[str]]:
    session = chromium.open(report.resolve().as_uri())
    state = chromium.evaluate(PAGE_STATE, session)
    chromium.screenshot(session, ARTIFACTS / screenshot_name)
    return state, chromium.console_errors(session)


# ---------------------------------------------------------------- tests


@pytest.mark.slow
def test_report_renders_in_headless_chromium(annotated_film, chromium, tmp_path):
    report = write_report(annotated_film, tmp_path / "report.html")
    state, errors = _render(chromium, report, "report-annotated.png")
    manifest = open_dataset(annotated_film).manifest
    assert errors == []
    assert state["broken"] == []
    assert len(state["previews"]) == len(manifest)
    width = ReportOptions().preview_width
    assert all(p["loaded"] and p["width"] == width for p in state["previews"])
    plots = {p["name"] for p in state["plots"] if p["loaded"]}
    assert plots == {"crop", "timeline", "timings", "motion", "captions", "drops", "scores"}
    assert state["external"] == []
    edges = ", ".join(f"{e:g}" for e in LEVEL_EDGES)
    assert f"Level edges, version test-1: {edges}." in state["text"]
    for row in manifest.itertuples():
        assert row.instruction in state["text"]
        assert f"motion level {row.motion_level}" in state["text"]
    shot = Image.open(ARTIFACTS / "report-annotated.png")
    assert shot.width == 1280 and shot.height > 900


@pytest.mark.slow
def test_report_of_an_early_film_renders_and_names_what_is_missing(bare_film, chromium, tmp_path):
    report = write_report(bare_film, tmp_path / "report.html")
    state, errors = _render(chromium, report, "report-bare.png")
    assert errors == []
    assert state["broken"] == []
    assert {p["name"] for p in state["plots"]} == {"crop", "timeline", "scores"}
    text = state["text"]
    assert "Not available: no clip has a motion_scope value yet" in text
    assert "Not available: no clip has caption fields yet" in text
    assert "Not available: no stage_seconds in summary.json" in text
    assert "Not available: no drops.parquet rows and no drop counts in summary.json" in text
    assert "Not available: no scene list in summary.json" in text
    assert text.count("no instruction yet") == 1  # said once, not under every clip
    assert "clips: usable rejected failed" in " ".join(text.split())  # the timeline's key
    # The summary has no source path: the crop is shown on the stored frame, and the page says so.
    assert "The source film is not reachable" in text


class _Sources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.links += [(tag, value) for name, value in attrs if name in ("src", "href")]


@pytest.mark.slow
def test_report_is_self_contained(annotated_page):
    parser = _Sources()
    parser.feed(annotated_page)
    outside = [link for link in parser.links if not link[1].startswith(("data:", "#"))]
    assert parser.links and outside == []
    assert "<script" not in annotated_page.lower()


def test_previews_are_rendered_from_the_shards(annotated_film, annotated_page):
    previews = [
        base64.b64decode(data)
        for data in re.findall(
            r'class="preview" src="data:image/(?:webp|gif);base64,([^"]+)"', annotated_page
        )
    ]
    stored = shard_rows(annotated_film, ["video"])
    assert len(previews) == len(stored)
    firsts = []
    for preview, row in zip(previews, stored):
        frames = decode_directly(row["video"])
        with Image.open(io.BytesIO(preview)) as animation:
            assert animation.n_frames == len(frames)
            shown = np.asarray(animation.convert("RGB"), dtype=np.int16)
        small = cv2.resize(frames[0], shown.shape[1::-1], interpolation=cv2.INTER_AREA)
        firsts.append(small.astype(np.int16))
        assert np.abs(shown - small).mean() < 6  # the same picture, up to WebP's loss
    # ...and not a picture any clip would match: other clips' first frames are far from it.
    assert np.abs(firsts[0] - firsts[1]).mean() > 12


@pytest.mark.slow
def test_preview_count_is_limited_and_evenly_spaced(film_dir):
    manifest = open_dataset(film_dir).manifest
    page = build_report(open_dataset(film_dir), ReportOptions(max_previews=2))
    assert page.count('class="preview"') == 2
    first, last = manifest["clip_id"].iloc[0], manifest["clip_id"].iloc[-1]
    assert f'alt="clip {first}"' in page and f'alt="clip {last}"' in page
    without = build_report(open_dataset(film_dir), ReportOptions(max_previews=0))
    assert 'class="preview"' not in without


def test_crop_box_is_drawn_on_the_source_frame_when_the_film_is_reachable(
    annotated_film, annotated_page
):
    dataset = open_dataset(annotated_film)
    source = dataset.summary.film.path
    assert source is not None and Path(source).is_file()  # the pipeline records where the film is
    assert dataset.summary.crop is not None
    crop = dataset.summary.crop.to_dict()
    assert (
        f"Left: the source frame where the clip starts, with the crop box {crop['w']}x"
        f"{crop['h']} at ({crop['x']}, {crop['y']})"
    ) in annotated_page
    assert 'data-plot="crop"' in annotated_page
    # bikes.mp4 is 2.35:1 and clips are 3:2, so the clips show a centred part of the box: inside
    # it, centred, at the clips' aspect
    clip = dataset.manifest.iloc[0]
    assert abs(crop["w"] / crop["h"] - clip["width"] / clip["height"]) > 0.1
    shown = re.search(r"the clips show its (\d+)x(\d+) part at \((\d+), (\d+)\)", annotated_page)
    w, h, x, y = map(int, shown.groups())
    assert abs(w / h - clip["width"] / clip["height"]) < 0.02
    assert crop["x"] <= x and x + w <= crop["x"] + crop["w"]
    assert crop["y"] <= y and y + h <= crop["y"] + crop["h"]
    assert abs((x - crop["x"]) - (crop["x"] + crop["w"] - x - w)) <= 1
    assert abs((y - crop["y"]) - (crop["y"] + crop["h"] - y - h)) <= 1


def test_facts_and_drop_reasons_come_from_the_film_folder(annotated_film, annotated_page):
    dataset = open_dataset(annotated_film)
    page = annotated_page
    film = dataset.summary.film
    assert f"{film.width}x{film.height}" in page
    drops = dataset.drops
    assert not drops.empty
    for reason, group in drops.groupby("reason"):
        lost = (group["end_time"] - group["start_time"]).sum()
        assert f"<td>{reason}</td><td>{len(group)}</td><td>{lost:.1f} s</td>" in page
    assert html.escape(dataset.manifest["instruction"].iloc[0]) in page


def _film_of_ip(source: Path, target: Path, ip: str) -> Path:
    film_id = target.name

    def relabel(row):
        return {**row, "film_id": film_id, "film_name": film_id, "ip": ip}

    def relabel_summary(summary):
        return {
            **summary,
            "ip": ip,
            "film": {**summary["film"], "film_id": film_id, "film_name": film_id},
        }

    return rewrite_film(source, target, relabel, relabel_summary)


@pytest.mark.slow
def test_dataset_report_covers_every_film_or_one_ip(film_dir, tmp_path):
    root = tmp_path / "data"
    _film_of_ip(film_dir, root / "film-a", "Sintel")
    _film_of_ip(film_dir, root / "film-b", "Bunny")
    clips = len(open_dataset(film_dir).manifest)
    options = ReportOptions(max_previews=1)

    everything = write_report(root, options=options).read_text()
    assert 'id="overview"' in everything
    assert 'id="film-film-a"' in everything and 'id="film-film-b"' in everything
    assert everything.count('class="preview"') == 2
    for film, ip in (("film-a", "Sintel"), ("film-b", "Bunny")):  # each film's row, its clips
        assert re.search(f"{film}</a></td><td>{ip}</td><td>[^<]*</td><td>{clips}</td>", everything)

    options.ip = "Bunny"
    one_ip = write_report(root, options=options)
    assert one_ip == root / "report-Bunny.html"
    page = one_ip.read_text()
    assert 'id="film-film-b"' in page and 'id="film-film-a"' not in page
    options.ip = "Ghibli"
    with pytest.raises(DatasetError, match="no film of IP 'Ghibli'.*Bunny, Sintel"):
        write_report(root, options=options)


@pytest.mark.slow
def test_cli_writes_the_report_and_names_a_folder_without_shards(film_dir, tmp_path, capsys):
    out = tmp_path / "out" / "bikes.html"
    assert cli_main(["report", str(film_dir), "--out", str(out), "--previews", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_text().count('class="preview"') == 1
    (tmp_path / "empty").mkdir()
    assert cli_main(["report", str(tmp_path / "empty")]) == 2
    assert f"{tmp_path / 'empty'}: no film folders found" in capsys.readouterr().err


@pytest.mark.slow
def test_level_edges_come_from_the_clips_version_when_the_summary_lacks_them(
    annotated_film, tmp_path
):
    from stages.motion_levels import DEFAULT_LEVELS, load_levels

    def bundled_version(row):
        return {**row, "motion_levels_version": DEFAULT_LEVELS}

    def without_levels(summary):
        return {k: v for k, v in summary.items() if k != "motion_levels"}

    film = rewrite_film(annotated_film, tmp_path / "bikes", bundled_version, without_levels)
    page = build_report(open_dataset(film), ReportOptions(max_previews=0))
    edges = ", ".join(f"{e:g}" for e in load_levels(DEFAULT_LEVELS).edges)
    assert f"Level edges, version {DEFAULT_LEVELS}: {edges}." in page


def test_the_crop_panel_shows_the_source_frame_where_the_clip_starts(film_dir):
    source = open_dataset(film_dir).summary.film.path
    with av.open(source) as container:
        film = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    for clip in open_dataset(film_dir).manifest.itertuples():
        assert np.array_equal(source_frame_at(source, clip.start_time), film[clip.start_frame])
    assert source_frame_at(str(film_dir / "summary.json"), 1.0) is None  # not a video


def test_crop_figure_uses_the_frame_on_screen_at_the_clip_start(tmp_path):
    """At 23.976 fps, 2.0 s falls between frames 47 (1.960 s) and 48 (2.002 s): the clip starts
    with frame 47, the one on screen, not with the nearer 48."""
    from fractions import Fraction

    import av
    from conftest import make_video

    from pipeline.inspection.report_data import source_frame_at

    film = make_video(tmp_path / "ntsc.mp4", num_frames=72, fps=Fraction(24000, 1001), motion=8)
    with av.open(str(film)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    shown = source_frame_at(str(film), 2.0)
    assert shown is not None and (shown == frames[47]).all()
    assert (source_frame_at(str(film), 0.0) == frames[0]).all()


def test_report_names_a_shard_of_another_schema_version(film_dir, tmp_path, capsys):

    import pyarrow.parquet as pq

    from pipeline.cli import main as cli_main

    copy = tmp_path / "film"
    shutil.copytree(film_dir, copy)
    shard = sorted((copy / "shards").glob("*.parquet"))[0]
    table = pq.read_table(shard)
    pq.write_table(table.replace_schema_metadata({"animegamer.schema_version": "9.0"}), shard)
    (copy / "manifest.parquet").unlink()  # so the report reads the shards themselves
    assert cli_main(["report", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "schema version 9.0 is not compatible" in err and "Traceback" not in err
