"""`make bench-scale`: the folder-level work at franchise scale (issue 20), on synthetic folders.

For each N it writes a dataset folder of N clips (films of 700 clips; shards and manifests without
video bytes; every other column realistic: the quality values of the sample film's real clips, in
turn, and random 64-bit frame hashes, a known share of them near-copies of a clip of an earlier
film), then times, each in its own process so its peak memory (max RSS) is its own:
- the quality pass from scratch (no index), again with nothing new, and after adding one film;
- dataset.json; the report's corpus section; one page of the review API; the trainer's catalog.
It checks that the planted copies, and nothing else, are found.

    python -m bench.bench_scale                 # 10k and 100k clips
    python -m bench.bench_scale --million       # 10k, 100k and 1M (minutes: the search is N^2)
    python -m bench.bench_scale --clips 1000000 # one size

It ends with one table: a row per step, a column per size, each cell the step's time and peak
memory (the review row: the request after the first, and the first, table-building one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.film import FilmFacts, FilmFolder, FilmSummary
from core.schema import CLIP_SCHEMA, SCHEMA_VERSION
from pipeline.data.manifest import write_manifest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "sintel_trailer.mp4"
CLIPS_PER_FILM = 700
PLANTED_SHARE = 0.001  # one clip in a thousand is a near-copy of a clip of an earlier film
PLANTED_BITS = 24  # of 256: a mean distance of 6 per frame, within the default 12
TEMPLATE_COLUMNS = [
    "quality_luma_mean",
    "quality_luma_peak",
    "quality_text_area",
    "motion_scope",
    "motion_level",
    "status",
]


def templates() -> pa.Table:
    """Quality values of real clips: the sample film cut once (cached under bench/out)."""
    cache = Path(__file__).resolve().parent / "out" / "scale_templates.parquet"
    if cache.is_file():
        return pq.read_table(cache)
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_films

    with tempfile.TemporaryDirectory() as out:
        config = load_config(None, ["run.executor=local", "run.progress=false"])
        [result] = run_films([SAMPLE], out, config, load_ip(None))
        if not result.ok:
            raise SystemExit(f"bench-scale: the sample film failed: {result.message}")
        table = pa.concat_tables(
            pq.read_table(p, columns=TEMPLATE_COLUMNS)
            for p in sorted(Path(out).glob("*/shards/*.parquet"))
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, cache)
    return table


def film_table(number: int, count: int, template: pa.Table, hashes: np.ndarray) -> pa.Table:
    name = f"film{number:06d}"
    film_id = hashlib.sha256(name.encode()).hexdigest()[:16]
    index = np.arange(count)
    ids = [hashlib.md5(f"{name}/{i}".encode()).hexdigest() for i in range(count)]
    picked = template.take(pa.array(index % len(template)))
    columns = {
        "clip_id": ids,
        "film_id": [film_id] * count,
        "film_name": [name] * count,
        "ip": ["generic"] * count,
        "segment_index": index // 150,
        "scene_index": index // 3,
        "clip_index": index,
        "start_frame": index * 48,
        "end_frame": index * 48 + 46,
        "start_time": index * 2.0,
        "end_time": index * 2.0 + 1.92,
        "frame_indices": pa.array(
            [list(range(48 * i, 48 * i + 46, 3)) for i in range(count)], pa.list_(pa.int64())
        ),
        "crop_x": np.zeros(count, np.int32),
        "crop_y": np.full(count, 58, np.int32),
        "crop_w": np.full(count, 854, np.int32),
        "crop_h": np.full(count, 364, np.int32),
        "height": np.full(count, 480, np.int32),
        "width": np.full(count, 720, np.int32),
        "num_frames": np.full(count, 16, np.int32),
        "fps": np.full(count, 8.0),
        "source_fps": np.full(count, 24.0),
        "usable": np.ones(count, bool),
        "reject_reasons": pa.array([[]] * count, pa.list_(pa.string())),
        "caption_status": ["pending"] * count,
        "quality_hashes": pa.array(list(hashes), pa.list_(pa.int64())),
        "quality_version": ["bench"] * count,
    }
    for column in TEMPLATE_COLUMNS:
        columns[column] = picked.column(column)
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(count, f.type)
        for f in CLIP_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=CLIP_SCHEMA)


def write_folder(root: Path, clips: int, seed: int = 0) -> dict[str, str]:
    """N clips in films of 700 under `root`; the planted copies as {copy clip_id: source}."""
    rng = np.random.default_rng(seed)
    template = templates()
    fit = np.array([s == "ok" for s in template.column("status").to_pylist()])  # refined below
    films = -(-clips // CLIPS_PER_FILM)
    planted: dict[str, str] = {}
    earlier: list[tuple[str, np.ndarray]] = []  # (clip_id, hashes) of some fit clips written
    for number in range(films):
        count = min(CLIPS_PER_FILM, clips - number * CLIPS_PER_FILM)
        hashes = rng.integers(-(2**63), 2**63 - 1, (count, 4), dtype=np.int64)
        table = film_table(number, count, template, hashes)
        fit = _fit(table)
        ids = table.column("clip_id").to_pylist()
        for row in np.flatnonzero(fit):
            if earlier and rng.random() < PLANTED_SHARE:
                source, source_hashes = earlier[int(rng.integers(len(earlier)))]
                hashes[row] = _flip(source_hashes, rng)
                planted[ids[row]] = source
            elif rng.random() < 0.01:
                earlier.append((ids[row], hashes[row].copy()))
        _write_film(root, number, film_table(number, count, template, hashes))
    return planted


def _fit(table: pa.Table) -> np.ndarray:
    from stages.quality import RejectConfig, own_reasons

    return np.array([not reasons for reasons in own_reasons(table, RejectConfig())])


def _flip(hashes: np.ndarray, rng) -> np.ndarray:
    values = hashes.view(np.uint64).copy()
    for position in rng.choice(256, PLANTED_BITS, replace=False):
        values[position // 64] ^= np.uint64(1) << np.uint64(position % 64)
    return values.view(np.int64)


def _write_film(root: Path, number: int, table: pa.Table) -> None:
    folder = FilmFolder(root / f"film{number:06d}")
    folder.shards.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder.shards / "clips-00000.parquet", compression="zstd")
    write_manifest(folder)
    film_id = table.column("film_id")[0].as_py()
    summary = FilmSummary(
        schema_version=SCHEMA_VERSION,
        complete=True,
        film=FilmFacts.from_dict({"film_id": film_id, "film_name": f"film{number:06d}"}),
        ip="generic",
        clips_written=len(table),
        clips_failed=0,
        drops={},
        stage_seconds={},
        fingerprint="bench",
    )
    folder.write_summary(summary)


# ----------------------------------------------------------------------------- the steps


def step(name: str, root: str) -> dict:
    """One measured step, run in this (child) process."""
    began = time.perf_counter()
    detail: dict = {}
    if name in ("pass", "rerun", "add-film"):
        from pipeline.passes.quality import apply_quality
        from stages.quality import RejectConfig

        outcome = apply_quality(Path(root), RejectConfig())
        detail = {"read_films": outcome.read_films, "usable": outcome.usable}
    elif name == "dataset-json":
        from pipeline.data.corpus import write_dataset_summary

        write_dataset_summary(root, [])
    elif name == "report-corpus":
        from pipeline.inspection.explore import open_dataset
        from pipeline.inspection.report_corpus import corpus_section

        corpus_section(open_dataset(root))
    elif name == "review-page":
        from pipeline.inspection.review_server import ReviewApp

        app = ReviewApp(root)
        loaded = time.perf_counter()
        page = {"usable": "false", "offset": "400", "limit": "200"}  # what the page asks for
        answer = app.clips(page)
        detail = {"first_request_s": round(time.perf_counter() - loaded, 3)}
        again = time.perf_counter()
        app.clips(page)
        detail["later_request_s"] = round(time.perf_counter() - again, 3)
        detail["clips_in_answer"] = len(answer.get("clips", []))
    elif name == "catalog":
        from trainer.shared.data import ClipCatalog

        detail = {"clips": len(ClipCatalog([root]))}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return {"seconds": round(time.perf_counter() - began, 2), "peak_gib": round(peak, 2), **detail}


def measure(name: str, root: Path) -> dict:
    load = _load()  # before the step: what it ran beside
    command = [sys.executable, "-m", "bench.bench_scale", "--step", name, str(root)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": load}


def found_duplicates(root: Path) -> dict[str, str]:
    found = {}
    for path in sorted(root.glob("*/shards/*.parquet")):
        table = pq.read_table(path, columns=["clip_id", "duplicate_of"])
        for clip_id, kept in zip(*(table.column(c).to_pylist() for c in table.column_names)):
            if kept:
                found[clip_id] = kept
    return found


STEPS = [
    ("dataset.json", "dataset-json"),
    ("report corpus section", "report-corpus"),
    ("review API, one page", "review-page"),
    ("trainer catalog", "catalog"),
]


def run_size(clips: int, work: Path, skip: list[str]) -> list[tuple[str, dict]]:
    root = work / f"n{clips}"
    began = time.perf_counter()
    planted = write_folder(root, clips)
    print(f"{clips} clips: folder written in {time.perf_counter() - began:.0f} s", flush=True)
    rows = [("pass from scratch", measure("pass", root))]
    found = found_duplicates(root)
    false = {k: v for k, v in found.items() if planted.get(k) != v}
    rows[0][1]["planted"] = len(planted)
    rows[0][1]["found"] = len(found) - len(false)
    rows[0][1]["false_matches"] = len(false)
    rows.append(("pass again, nothing new", measure("rerun", root)))
    rng = np.random.default_rng(99)
    hashes = rng.integers(-(2**63), 2**63 - 1, (CLIPS_PER_FILM, 4), dtype=np.int64)
    number = -(-clips // CLIPS_PER_FILM)
    _write_film(root, number, film_table(number, CLIPS_PER_FILM, templates(), hashes))
    rows.append(("pass after adding a 700-clip film", measure("add-film", root)))
    for label, name in STEPS:
        if name not in skip:
            rows.append((label, measure(name, root)))
    return rows


def cell(label: str, result: dict) -> str:
    """One step's figures in a table cell."""
    if "error" in result:
        return f"failed: {result['error']}"
    text = f"{result['seconds']:.2f} s, {result['peak_gib']:.2f} GiB"
    if "later_request_s" in result:
        text = (
            f"{result['later_request_s'] * 1000:.0f} ms a page (first "
            f"{result['first_request_s']:.2f} s; {result['seconds']:.1f} s with reading), "
            f"{result['peak_gib']:.2f} GiB"
        )
    if "planted" in result:
        text += (
            f"; planted {result['found']} of {result['planted']}, {result['false_matches']} other"
        )
    return text


def table(results: dict[int, list[tuple[str, dict]]]) -> str:
    sizes = list(results)
    labels = list(dict.fromkeys(label for rows in results.values() for label, _ in rows))
    lines = [
        "| step | " + " | ".join(f"{n:,} clips" for n in sizes) + " |",
        "|---" * (len(sizes) + 1) + "|",
    ]
    for label in labels:
        cells = [cell(label, dict(results[n]).get(label, {"error": "skipped"})) for n in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, action="append", help="sizes (default 10k, 100k)")
    parser.add_argument("--million", action="store_true", help="10k, 100k and 1,000,000 clips")
    parser.add_argument("--work", type=Path, help="where the folders go (default: a temp dir)")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[s for _, s in STEPS],
        help="leave a step out",
    )
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("root", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(step(args.step, args.root)))
        return 0
    sizes = args.clips or [10_000, 100_000, *([1_000_000] if args.million else [])]
    results: dict[int, list[tuple[str, dict]]] = {}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for clips in sizes:
            results[clips] = []
            for label, result in run_size(clips, Path(work), args.skip):
                print(f"{clips:,} clips, {label}: {json.dumps(result)}", flush=True)
                results[clips].append((label, result))
    print(table(results))
    return 0


def _load() -> str:
    """The load average now (this machine is shared: every figure says what it ran beside)."""
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
