"""A corpus: a tree of series folders, an IP per folder, a dry run, OUT/dataset.json, every film
read as one frame, and the report's corpus overview first."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import BIKES, BUNNY, make_video

from pipeline.cli import main
from pipeline.data.corpus import dataset_summary
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.report import build_report

LOCAL = ["--executor", "local", "--quiet"]


@pytest.fixture(scope="module")
def short_film(tmp_path_factory) -> Path:
    """A 5-second film of two scenes at 256x144 that the pipeline cuts into 2 clips, in about a
    CPU-second (bigbuckbunny_5s, 1280x720, takes seven in the overlay pass): the films of a
    corpus, where what is tested is the tree, the IPs, the counts and the overview, not what a
    film shows."""
    folder = tmp_path_factory.mktemp("short")
    return make_video(folder / "short.mp4", size=(144, 256), cuts=(60,), num_frames=120, seed=5)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, short_film):
    """films/series_a/street.mp4 (generic) and films/series_b/ep/short.mp4 under the sintel IP
    named by films/series_b/ip.txt, plus a file that is not a video; cut once. street.mp4 is
    another small film of the kind of short_film (2 clips, and a short scene that short.mp4 does
    not drop for): bikes.mp4 here cost 2.8 CPU-s of cutting where it costs 0.8."""
    root = tmp_path_factory.mktemp("corpus")
    films = root / "films"
    (films / "series_a").mkdir(parents=True)
    (films / "series_b" / "ep").mkdir(parents=True)
    make_video(
        films / "series_a" / "street.mp4", size=(144, 256), cuts=(60, 110), num_frames=120, seed=6
    )
    shutil.copy(short_film, films / "series_b" / "ep" / short_film.name)
    (films / "series_b" / "ip.txt").write_text("sintel\n")
    (films / "series_a" / "notes.txt").write_text("not a film")
    out = root / "out"
    assert main(["dataset", str(films), "--out", str(out), *LOCAL]) == 0
    return films, out


def test_dry_run_lists_films_and_segments_and_cuts_nothing(tmp_path, capsys):
    films = tmp_path / "films"
    films.mkdir()
    shutil.copy(BIKES, films / BIKES.name)
    shutil.copy(BUNNY, films / BUNNY.name)
    out = tmp_path / "out"
    args = ["dataset", str(films), "--out", str(out), "--dry-run", "--set", "run.segment_seconds=6"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{films / BUNNY.name}: ip generic, 5.3 s, 132 frames, 1 segment")
    assert lines[1].startswith(f"{films / BIKES.name}: ip generic, 10.0 s, 250 frames, 2 segment")
    assert "[0, 125), [125, 250)" in lines[1]
    assert lines[-1] == "dry run: 2 film(s), 0.00 h of film, 3 segment(s); nothing was cut"
    assert not out.exists()


def test_a_folder_s_dvd_files_are_taken_and_its_other_files_counted(tmp_path, capsys):
    """A DVD's .vob is a video (it was left out of folders before: a DVD rip's folder held no
    films); a GIF, a subtitle file and a cover are not taken, and the console counts them by
    suffix; ip.txt is the folder's own."""
    films = tmp_path / "films"
    films.mkdir()
    shutil.copy(BIKES, films / BIKES.name)
    vob = films / "VTS_01_1.VOB"
    mpeg2 = ["-c:v", "mpeg2video", "-f", "vob"]
    args = ["ffmpeg", "-v", "error", "-y", "-i", str(BUNNY), "-t", "2", "-an", *mpeg2, str(vob)]
    subprocess.run(args, check=True)
    for name in ("clip.gif", "other.GIF", "episode.ass", "cover.jpg"):
        (films / name).write_bytes(b"not cut")
    (films / "ip.txt").write_text("generic\n")
    out = tmp_path / "out"
    assert main(["dataset", str(films), "--out", str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "left out: 4 files the folders hold that are not named as videos "
        "(.gif 2, .ass 1, .jpg 1); name one to cut it anyway"
    )
    assert any(line.startswith(f"{vob}: ip generic, 2.0 s") for line in lines), lines
    assert lines[-1].startswith("dry run: 2 film(s)")


@pytest.mark.slow
def test_folders_recurse_and_an_ip_file_names_the_ip_of_its_folder(corpus):
    _, out = corpus
    summaries = {
        p.parent.name.split("-")[0]: json.loads(p.read_text()) for p in out.glob("*/summary.json")
    }
    assert sorted(summaries) == ["short", "street"]
    assert summaries["street"]["ip"] == "generic"
    assert summaries["short"]["ip"] == "sintel"


def test_dataset_json_sums_the_films(corpus):
    _, out = corpus
    overview = json.loads((out / "dataset.json").read_text())
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    assert overview["films"] == overview["films_complete"] == 2
    assert overview["clips"] == sum(s["clips_written"] for s in summaries) > 0
    drops: dict[str, int] = {}
    for summary in summaries:
        for reason, count in summary["drops"].items():
            drops[reason] = drops.get(reason, 0) + count
    assert overview["drops"] == dict(sorted(drops.items()))
    assert len({frozenset(s["drops"]) for s in summaries}) == 2  # one film's reasons not all
    hours = sum(s["film"]["duration"] for s in summaries) / 3600
    assert overview["hours_of_film"] == pytest.approx(hours, abs=1e-4)
    assert overview["stage_seconds"]["encode"] > 0
    usable = [
        pq.read_table(p, columns=["usable"]).column("usable").to_pylist()
        for p in sorted(out.glob("*/manifest.parquet"))
    ]
    assert overview["usable_clips"] == sum(v is True for column in usable for v in column)
    assert overview["ips"] == ["generic", "sintel"]
    assert [f["folder"] for f in overview["per_film"]] == sorted(
        p.name for p in out.iterdir() if p.is_dir()
    )


@pytest.mark.slow
def test_a_film_that_fails_is_counted_in_dataset_json(tmp_path, short_film):
    films = tmp_path / "films"
    films.mkdir()
    shutil.copy(short_film, films / short_film.name)
    (films / "broken.mp4").write_bytes(b"not a video at all")
    out = tmp_path / "out"
    assert main(["dataset", str(films), "--out", str(out), *LOCAL]) == 1
    overview = json.loads((out / "dataset.json").read_text())
    # every film is counted once: cut (a folder) or failed before cutting
    assert (overview["films"], overview["films_cut"], overview["films_failed"]) == (2, 1, 1)
    [failed] = overview["failed_films"]
    assert failed["path"] == str(films / "broken.mp4")
    assert failed["error"].startswith(f"{films / 'broken.mp4'}: not a readable video")


def test_usable_clips_are_counted_where_the_column_exists(corpus, tmp_path):
    _, out = corpus
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    film = next(p for p in copy.iterdir() if p.name.startswith("street"))
    table = pq.read_table(film / "manifest.parquet")
    usable = [i % 2 == 0 for i in range(table.num_rows)]
    column = table.schema.get_field_index("usable")
    table = table.set_column(column, "usable", pa.array(usable))
    pq.write_table(table, film / "manifest.parquet")
    every = [
        pq.read_table(p, columns=["usable"]).column("usable").to_pylist()
        for p in copy.glob("*/manifest.parquet")
    ]
    assert dataset_summary(copy)["usable_clips"] == sum(v is True for c in every for v in c)
    assert sum(usable) < table.num_rows  # the rewrite did change the count


def test_open_dataset_reads_every_film_as_one_frame(corpus):
    _, out = corpus
    dataset = open_dataset(out)
    manifest = dataset.manifest
    per_film = [open_dataset(f.path).manifest for f in dataset.films]
    assert len(manifest) == sum(len(m) for m in per_film)
    assert sorted(manifest["ip"].unique()) == ["generic", "sintel"]
    assert dataset.overview["clips"] == len(manifest)


@pytest.mark.slow
def test_the_report_of_a_corpus_starts_with_its_overview(corpus):
    _, out = corpus
    page = build_report(open_dataset(out))
    corpus_at, films_at = page.index('<section id="corpus">'), page.index('<section id="overview">')
    assert corpus_at < films_at < page.index("<h2>short")
    section = page[corpus_at:films_at]
    assert "hours of film" in section and "generic, sintel" in section


@pytest.mark.slow
def test_the_same_film_twice_in_a_corpus_is_cut_once(tmp_path, capsys, short_film):
    """Films run at once, and a film's folder is named by its file name and content: a copy
    under the same name in another folder must not race the original into the same folder."""
    films = tmp_path / "films"
    for series in ("a", "b"):
        (films / series).mkdir(parents=True)
        shutil.copy(short_film, films / series / "ep.mp4")
    out = tmp_path / "out"
    assert main(["dataset", str(films), "--out", str(out), *LOCAL]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ep: done: 2 clips")
    assert lines[1].startswith(
        f"{films / 'b' / 'ep.mp4'}: the same film as {films / 'a' / 'ep.mp4'}"
    )
    folder = lines[1].split("its clips are in ")[1].split(";")[0].rsplit("/", 1)[-1]
    assert [p.name for p in out.iterdir() if p.is_dir()] == [folder]
