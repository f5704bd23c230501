"""Films and datasets in object storage, against a real S3 server (moto) on 127.0.0.1: the same
bytes as a local run, atomic publishing with commit markers, resume, and reading back."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import BIKES, BUNNY, local_config, make_video, nudged, unit_rows, write_embedded_film
from s3server import s3_server

from core import storage
from pipeline.data.ip import load_ip
from pipeline.inspection.explore import open_dataset
from pipeline.running.film_tasks import FilmResult, run_stored_segment
from pipeline.running.runner import run_films

# The tests run the pipeline against a real S3 server (moto): seconds each.
pytestmark = pytest.mark.slow

OUTPUTS = ["manifest.parquet", "drops.parquet", "shards/clips-00000.parquet"]


@pytest.fixture(scope="module")
def s3_env():
    """A local S3 server for the module, with only the standard AWS variables pointing at it."""
    with s3_server() as env, pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield env


def new_bucket() -> str:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    name = f"test-{uuid.uuid4().hex[:12]}"
    fs, _ = storage.filesystem(f"s3://{name}")
    fs.mkdir(name)
    return f"s3://{name}"


@pytest.fixture
def bucket(s3_env):
    """A fresh bucket on the local S3 server."""
    return new_bucket()


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The two films cut on local disk: what the S3 runs must reproduce byte for byte."""
    out = tmp_path_factory.mktemp("local")
    results = run_films([BIKES, BUNNY], out, local_config(), load_ip(None))
    assert all(r.ok for r in results)
    return out


@dataclass
class StoredRun:
    films: list[str]  # the films' URLs
    out: str  # the dataset's URL
    results: list[FilmResult]


@pytest.fixture(scope="module")
def s3_dataset(s3_env) -> StoredRun:
    """The two films put in a bucket and cut into a dataset in it, once for the module (cutting
    bigbuckbunny_5s is most of a run's cost): the tests that only read the dataset read this one,
    and a test that changes it works on a copy (`copy_dataset`) in its own bucket."""
    shared = new_bucket()
    films = put_films(shared)
    out = f"{shared}/dataset"
    results = run_films(films, out, local_config(), load_ip(None))
    assert all(r.ok for r in results), [r.message for r in results]
    return StoredRun(films, out, results)


def copy_dataset(source: str, target: str) -> str:
    """Copy every object under `source` to the same key under `target` (server-side copies)."""
    fs, root = storage.filesystem(source)
    for found in fs.find(root):
        fs.copy(found, storage.filesystem(target)[1] + found[len(root) :])
    return target


def put_films(bucket: str) -> list[str]:
    urls = [f"{bucket}/films/{BIKES.name}", f"{bucket}/films/series/{BUNNY.name}"]
    for local, url in zip([BIKES, BUNNY], urls):
        storage.upload(local, url)
    return urls


def assert_same_outputs(remote_out: str, local_out) -> None:
    folders = sorted(p.name for p in local_out.iterdir() if p.is_dir())
    besides = ["dataset.json", "quality.json", "quality_index.parquet"]
    assert storage.list_names(remote_out) == sorted([*folders, *besides])
    fs, _ = storage.filesystem(remote_out)
    for folder in folders:
        for name in OUTPUTS:
            remote = fs.cat_file(storage.filesystem(f"{remote_out}/{folder}/{name}")[1])
            assert remote == (local_out / folder / name).read_bytes(), f"{folder}/{name}"
        assert "work" not in storage.list_names(f"{remote_out}/{folder}")


def test_films_in_s3_to_a_dataset_in_s3(s3_dataset, bucket, local_reference):
    films, out, results = s3_dataset.films, s3_dataset.out, s3_dataset.results
    assert all(r.ok for r in results), [r.message for r in results]
    assert_same_outputs(out, local_reference)
    summary = json.loads(storage.read_text(f"{results[0].film_dir}/summary.json"))
    assert summary["film"]["path"] == films[0] and summary["complete"]
    overview = json.loads(storage.read_text(f"{out}/dataset.json"))
    assert overview["films"] == 2 and overview["clips"] == sum(
        r.summary.clips_written for r in results
    )
    # the reruns work on a copy: each ends with the folder's quality pass, which publishes
    out = copy_dataset(out, f"{bucket}/dataset")
    # a second run finds both films committed and cuts nothing
    again = run_films(films, out, local_config(), load_ip(None))
    assert all("already complete" in r.message for r in again)
    # the folder's thresholds are read from the bucket: a threshold changed there decides
    thresholds = json.loads(storage.read_text(f"{out}/quality.json"))
    thresholds["thresholds"]["text_max_area"] = -1.0  # every clip shows text
    changed = local_reference.parent / "quality.json"
    changed.write_text(json.dumps(thresholds))
    storage.upload(changed, f"{out}/quality.json")
    run_films(films, out, local_config(), load_ip(None))
    assert not open_dataset(out).manifest["usable"].any()


def test_uncommitted_leftovers_are_never_trusted(s3_dataset, bucket, local_reference):
    """A crash leaves objects without their commit marker: a segment part with no DONE.json, a
    shard with no summary.json (publishing a film removes its summary.json first and uploads it
    last). The rerun redoes them and ends with the clean run's bytes."""
    out = copy_dataset(s3_dataset.out, f"{bucket}/dataset")
    bikes_folder = next(p.name for p in local_reference.iterdir() if p.name.startswith("bikes"))
    storage.remove(f"{out}/{bikes_folder}/summary.json")  # its publishing cut short by a crash
    garbage = local_reference.parent / "garbage.parquet"
    garbage.write_bytes(b"not parquet: a half-written upload")
    storage.upload(garbage, f"{out}/{bikes_folder}/work/segment-00000/part-00000.parquet")
    storage.upload(garbage, f"{out}/{bikes_folder}/shards/clips-00000.parquet")
    storage.upload(garbage, f"{out}/{bikes_folder}/shards/clips-00007.parquet")
    results = run_films(s3_dataset.films, out, local_config(), load_ip(None))
    assert all(r.ok for r in results), [r.message for r in results]
    assert results[0].summary.segments_reused == 0  # bikes was cut again, from scratch
    assert_same_outputs(out, local_reference)
    assert storage.list_names(f"{out}/{bikes_folder}/shards") == ["clips-00000.parquet"]


def test_committed_segments_are_reused(bucket, tmp_path):
    """Segments whose DONE.json was published before an interruption are not cut again. (The
    film is a short one in two segments: what it shows is not in question.)"""
    from pipeline.running.film_tasks import PrepareJob, prepare_film, segment_job

    film = make_video(tmp_path / "short.mp4", size=(144, 256), cuts=(60,), num_frames=120, seed=5)
    films = [f"{bucket}/films/{film.name}"]
    storage.upload(film, films[0])
    out = f"{bucket}/dataset"
    config = local_config(run__segment_seconds=3)
    plan = prepare_film(PrepareJob(films[0], out, config, load_ip(None)))
    first = plan.segments[0]
    run_stored_segment(segment_job(plan, config, load_ip(None), first))
    assert "DONE.json" in storage.list_names(f"{plan.film_dir}/work/segment-00000")
    [result] = run_films(films, out, config, load_ip(None))
    assert result.ok and result.summary.segments_reused == 1
    assert result.summary.segments == 2


def test_open_dataset_reads_s3_as_one_frame(s3_dataset, local_reference):
    out = s3_dataset.out
    remote, local = open_dataset(out), open_dataset(local_reference)
    assert [f.slug for f in remote.films] == [f.slug for f in local.films]
    assert remote.manifest["clip_id"].tolist() == local.manifest["clip_id"].tolist()
    clip = remote.manifest["clip_id"].iloc[0]
    assert remote.video_bytes(clip) == local.video_bytes(clip)


def test_a_missing_s3_film_is_one_line_and_the_others_run(bucket, tmp_path):
    """The other film is a short one: what it holds is not what is tested, only that it runs."""
    film = make_video(tmp_path / "short.mp4", size=(144, 256), num_frames=72, seed=3)
    other = f"{bucket}/films/series/{film.name}"
    storage.upload(film, other)
    missing = f"{bucket}/films/nope.mp4"
    results = run_films([missing, other], f"{bucket}/dataset", local_config(), load_ip(None))
    assert not results[0].ok and results[0].message == f"{missing}: no such object"
    assert results[1].ok and ": done:" in results[1].message


def test_motion_calibrate_rewrites_an_s3_dataset_in_place(s3_dataset, bucket):
    """The command works on a local copy of the committed films and publishes each rewritten
    film back, its summary.json last; the levels file lands beside the dataset."""
    from pipeline.cli import main as cli_main

    out = copy_dataset(s3_dataset.out, f"{bucket}/dataset")
    assert cli_main(["motion-calibrate", out]) == 0
    [levels_file] = storage.list_names(f"{out}/motion_levels")
    version = levels_file.removesuffix(".json")
    dataset = open_dataset(out)
    measured = dataset.manifest.dropna(subset=["motion_scope"])
    assert set(measured["motion_levels_version"]) == {version}
    for film in dataset.films:
        assert film.summary.motion_levels["version"] == version
        assert "work" not in storage.list_names(f"{out}/{film.slug}")


def test_the_trainer_reads_shards_in_s3_in_place(s3_dataset, bucket, local_reference, tmp_path):
    """The trainer's catalog lists the committed films' shards and reads them by byte range,
    without a local copy: the same clips and media bytes as from local disk."""
    from trainer.shared.data import ClipCatalog

    out = copy_dataset(s3_dataset.out, f"{bucket}/dataset")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"an uncommitted film's shard: never read")
    storage.upload(garbage, f"{out}/uncommitted/shards/clips-00000.parquet")
    remote, local = ClipCatalog([out]), ClipCatalog([local_reference])
    assert [r["clip_id"] for r in remote.rows] == [r["clip_id"] for r in local.rows]
    assert all(str(m.shard).startswith(f"{out}/") for m in remote.media)
    last = len(remote) - 1
    assert remote.media_bytes(last, "video") == local.media_bytes(last, "video")


def test_the_report_of_an_s3_dataset_lands_beside_it(s3_dataset, bucket):
    from pipeline.inspection.report import ReportOptions, write_report

    out = copy_dataset(s3_dataset.out, f"{bucket}/dataset")
    written = write_report(out, options=ReportOptions(max_previews=1))
    assert written == f"{out}/report.html"
    page = storage.read_text(written)
    assert page.index('<section id="corpus">') < page.index('<section id="overview">')


def test_film_folders_are_found_at_any_depth_in_a_bucket(bucket, tmp_path):
    from core.film import FilmFolder

    marker = tmp_path / "summary.json"
    marker.write_text("{}")
    for folder in ["out/film-a", "out/series/ep01", "out/series/ep01/work/segment-00000"]:
        storage.upload(marker, f"{bucket}/{folder}/summary.json")
    storage.upload(marker, f"{bucket}/out/series/ep02/shards/clips-00000.parquet")  # uncommitted
    assert FilmFolder.discover(f"{bucket}/out") == [
        f"{bucket}/out/film-a",
        f"{bucket}/out/series/ep01",
    ]
    assert FilmFolder.discover(f"{bucket}/out/film-a") == [f"{bucket}/out/film-a"]


def test_a_film_nested_in_an_s3_dataset_is_in_its_working_copy(s3_dataset, bucket, local_reference):
    """A film folder at any depth under an s3 dataset is mirrored into the pass's working copy
    (it looked one level deep): read by open_dataset, and searched and indexed by the folder's
    quality pass when a run over the dataset ends, its decisions published back where it lies.
    (The run's other film is committed in the dataset already, as s3_dataset cut it: the pass
    runs after every run, whether it cut a film or found it complete.)"""
    out = f"{bucket}/nested"
    [bikes] = [p for p in local_reference.iterdir() if p.name.startswith("bikes")]
    nested = f"{out}/series/season1/{bikes.name}"
    storage.publish_folder(bikes, nested, "summary.json")
    assert [f.slug for f in open_dataset(out).films] == [bikes.name]
    bunny_dir = s3_dataset.results[1].film_dir
    copy_dataset(bunny_dir, f"{out}/{storage.name(bunny_dir)}")
    [result] = run_films(s3_dataset.films[1:], out, local_config(), load_ip(None))
    assert result.ok
    index = storage.open_parquet(f"{out}/quality_index.parquet").read()
    folders = set(index.column("folder").to_pylist())
    assert f"series/season1/{bikes.name}" in folders and len(folders) == 2
    summary = json.loads(storage.read_text(f"{nested}/summary.json"))
    assert summary["quality"]["duplicates_checked"]
    assert sorted(open_dataset(out).manifest["clip_id"]) == sorted(
        open_dataset(local_reference).manifest["clip_id"]
    )


def test_the_semantic_index_goes_with_the_quality_pass_so_a_rerun_on_s3_is_incremental(
    bucket, tmp_path, monkeypatch
):
    """OUT/similar_index/ is copied into the quality pass's working copy and published back: a
    pass on another node (a fresh scratch folder) reads only the new film's shards, finds its
    copy of an old clip, and leaves the old films' blocks in the store as they were; a changed
    film's old block is removed from the store once the new index names its new one."""
    from pipeline.passes import similar
    from pipeline.running.folder_passes import quality_pass

    rng = np.random.default_rng(0)
    a, b, c = unit_rows(rng, 12), unit_rows(rng, 12), unit_rows(rng, 12)
    b[3] = nudged(a[5], 0.97, rng)
    c[0] = nudged(a[5], 0.99, rng)
    out = f"{bucket}/dataset"

    def put(name: str, rows) -> None:
        folder = write_embedded_film(tmp_path / "films" / name, name, rows)
        storage.publish_folder(folder, f"{out}/{name}", "summary.json")

    read = []
    real_read_block = similar.read_block
    monkeypatch.setattr(similar, "read_block", lambda k, f: read.append(k) or real_read_block(k, f))
    config = local_config(reject__similar_min_cosine=0.95)
    index_dir = f"{out}/{similar.INDEX_DIR}"

    def blocks() -> dict[str, str]:
        fs, root = storage.filesystem(index_dir)
        found = fs.find(root, detail=True).items()
        return {k.rsplit("/", 1)[1]: v["ETag"] for k, v in found if k.endswith(".npy")}

    def pairs() -> set[tuple[str, str]]:
        table = storage.open_parquet(f"{index_dir}/{similar.PAIRS_FILE}").read()
        return set(
            zip(table.column("first_folder").to_pylist(), table.column("second_folder").to_pylist())
        )

    put("film_a", a)
    put("film_b", b)
    monkeypatch.setenv("ANIMEGAMER_SCRATCH", str(tmp_path / "node1"))
    quality_pass([], out, config)
    assert sorted(read) == ["film_a", "film_b"] and pairs() == {("film_a", "film_b")}
    first = blocks()
    assert len(first) == 2

    put("film_c", c)
    monkeypatch.setenv("ANIMEGAMER_SCRATCH", str(tmp_path / "node2"))  # another node
    read.clear()
    quality_pass([], out, config)
    assert read == ["film_c"]  # the old films' embeddings came from the fetched index
    assert pairs() == {("film_a", "film_b"), ("film_a", "film_c"), ("film_b", "film_c")}
    second = blocks()
    assert len(second) == 3 and {k: second[k] for k in first} == first

    b[3] = unit_rows(rng, 1)[0]  # film_b cut again: a clip more, and no copy any more
    put("film_b", np.vstack([b, unit_rows(rng, 1)]))
    monkeypatch.setenv("ANIMEGAMER_SCRATCH", str(tmp_path / "node1"))  # its copy is outdated
    stray = storage.scratch_dir(out) / "mirror" / similar.INDEX_DIR / "left-by-a-failed-pass.npy"
    stray.write_bytes(b"not in the store")
    read.clear()
    quality_pass([], out, config)
    assert read == ["film_b"] and pairs() == {("film_a", "film_c")}
    assert not stray.exists()  # the copy is the store's
    third = blocks()
    assert len(third) == 3 and len(set(third) - set(second)) == 1  # b's old block is gone
