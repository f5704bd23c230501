"""The review page at film scale: how long one decision takes, against a manifest rebuild.

A 2-hour film has about 3,600 clips, and a person pressing `r` expects the next clip at once. A
decision (POST /api/review) rewrites review.parquet and the film's manifest; it is timed against
`write_manifest` (the rebuild every pipeline pass does) measured in the same run. The film is the
sample's clip rows repeated under new clip ids up to `--clips` (the media bytes are left out: a
decision never reads them).

    python -m bench.review_bench [--clips 3600] [--decisions 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import threading
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from bench.run import OUT, SAMPLE

SOURCE = OUT / "review-source"


def source_film() -> Path:
    """The sample film's folder as the pipeline writes it (made once, then reused)."""
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_film

    config = load_config(None, ["run.executor=local", "run.progress=false"])
    result = run_film(SAMPLE, SOURCE, config, load_ip(None))
    if result.film_dir is None:
        raise SystemExit(f"the sample film could not be cut: {result.message}")
    return Path(result.film_dir)


def make_film(source: Path, clips: int, target: Path) -> Path:
    from core.film import FilmFolder
    from core.shards import ShardWriter
    from pipeline.data.manifest import write_manifest

    shutil.rmtree(target, ignore_errors=True)
    rows = pq.read_table(source / "shards").to_pylist()
    with ShardWriter(target / "shards", "clips") as writer:
        for index in range(clips):
            row = rows[index % len(rows)]
            writer.write(
                {
                    **row,
                    "clip_id": uuid.uuid4().hex,
                    "clip_index": index,
                    "video": b"",
                    "first_frame": b"",
                }
            )
    shutil.copy(source / "summary.json", target / "summary.json")
    write_manifest(FilmFolder(target))
    return target


def measure(film: Path, decisions: int) -> dict[str, float]:
    from core.film import FilmFolder
    from pipeline.data.manifest import write_manifest
    from pipeline.inspection.review_server import ReviewApp, ReviewServer

    rebuilds = []
    for _ in range(5):
        began = time.perf_counter()
        write_manifest(FilmFolder(film))
        rebuilds.append(time.perf_counter() - began)
    server = ReviewServer(ReviewApp(film), 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port)
    began = time.perf_counter()
    connection.request("GET", "/api/clips")
    ids = [c["clip_id"] for c in json.loads(connection.getresponse().read())["clips"]]
    listing = time.perf_counter() - began
    posts = []
    for i in range(decisions):
        body = {
            "clip_id": ids[i * 7 % len(ids)],
            "decision": ["accept", "reject"][i % 2],
            "fields": {"subject": "boy"},
        }
        began = time.perf_counter()
        connection.request(
            "POST", "/api/review", json.dumps(body), {"Content-Type": "application/json"}
        )
        connection.getresponse().read()
        posts.append(time.perf_counter() - began)
    server.shutdown()
    server.server_close()
    return {
        "write_manifest_s": statistics.median(rebuilds),
        "post_review_s": statistics.median(posts),
        "list_clips_s": listing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=3600)
    parser.add_argument("--decisions", type=int, default=30)
    args = parser.parse_args()
    film = make_film(source_film(), args.clips, OUT / "review-film" / "film")
    figures = measure(film, args.decisions)
    ratio = figures["post_review_s"] / figures["write_manifest_s"]
    print(
        f"{args.clips} clips: one decision (POST /api/review) {figures['post_review_s'] * 1000:.0f} ms "
        f"median = {ratio:.2f}x a manifest rebuild from the shards "
        f"({figures['write_manifest_s'] * 1000:.0f} ms); listing every clip "
        f"{figures['list_clips_s'] * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
