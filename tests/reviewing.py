"""The review tests' material, a pytest plugin (tests/conftest.py names it): a captioned copy of
the bikes film folder for each test, a review server running on it, and the calls its API takes."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import rewrite_film

from pipeline.inspection.review_server import ReviewApp, ReviewServer


def captioned_row(row: dict) -> dict:
    """A clip of the sintel IP as the captioner leaves it."""
    row.update(
        ip="sintel",
        characters=["Sintel"],
        num_characters=1,
        subject="girl",
        motion_description="rides a bike",
        environment="street",
        adverb="quickly",
        social=0,
        entertainment=1,
        stamina=-1,
        caption_status="ok",
        instruction="Character: Sintel; Motion: quickly rides a bike; Background: street.",
    )
    return row


def sintel_summary(summary: dict) -> dict:
    return {**summary, "ip": "sintel", "film": {**summary["film"], "ip": "sintel"}}


@pytest.fixture(scope="module")
def captioned_film(film_dir, tmp_path_factory) -> Path:
    """The bikes film folder with its clips captioned, rewritten once for the module."""
    folder = tmp_path_factory.mktemp("captioned") / "bikes"
    return rewrite_film(film_dir, folder, captioned_row, sintel_summary)


@pytest.fixture
def review_film(captioned_film, tmp_path) -> Path:
    """A captioned copy of the bikes film folder, for one test to review (a file copy: 1 ms
    where rewriting the shards took 27)."""
    return Path(shutil.copytree(captioned_film, tmp_path / "data" / "bikes"))


@pytest.fixture
def review_server(review_film):
    running = start_server(review_film)
    yield running
    stop_server(running)


def start_server(path: Path) -> ReviewServer:
    review_server = ReviewServer(ReviewApp(path), port=0)
    # a short poll: shutdown() waits up to one poll interval (0.5 s by default) per test
    threading.Thread(
        target=review_server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return review_server


def stop_server(review_server: ReviewServer) -> None:
    review_server.shutdown()
    review_server.server_close()


def request_json(review_server, method, path, body=None, headers=None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", review_server.port, timeout=30)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=data, headers=sent)
    answer = connection.getresponse()
    payload = answer.read()
    connection.close()
    return answer.status, json.loads(payload) if payload else {}


def post_review(review_server, body, **headers) -> tuple[int, dict]:
    return request_json(review_server, "POST", "/api/review", body, headers)


def get_clips(review_server, query: str = "") -> dict:
    status, data = request_json(review_server, "GET", "/api/clips" + (f"?{query}" if query else ""))
    assert status == 200, data
    return data


def one_of_each(clips: int) -> dict[str, int]:
    """The review counts after one rejection and one corrected acceptance."""
    return {"clips": clips, "reviewed": 2, "accepted": 1, "rejected": 1, "corrected": 1, "stale": 0}


def manifest_rows(review_film: Path) -> dict[str, dict]:
    rows = pq.read_table(review_film / "manifest.parquet").to_pylist()
    return {row["clip_id"]: row for row in rows}
