"""Manual review: the rules (pipeline/data/review.py), the server and its API
(pipeline/inspection/review_server.py), persistence across restarts and pipeline reruns, the trainer, and
the page itself in headless Chromium (tests/browser.py)."""

from __future__ import annotations

import html
import http.client
import json
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ARTIFACTS, rewrite_film
from PIL import Image

from core.film import REVIEW_FILE, FilmFolder
from core.shards import replace_column
from core.vocabulary import REJECT_REASONS, REVIEW
from pipeline.cli import main as cli_main
from pipeline.data.review import ReviewError, ReviewStore, effective_quality, read_reviews
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.review_server import ReviewApp, ReviewServer, check_fields
from stages.captioning.parsing import ParseError, parse_state
from trainer.shared.data import ClipCatalog, clip_samples, game_sequences

SHEET = ["Sintel", "Scales"]  # manifests/sintel.yaml's protagonists
VALID_STATE = (
    "<S>girl</S><MD>rides a bike</MD><EV>street</EV><MA>quickly</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"
)


# ---------------------------------------------------------------- films and a running server


def _captioned(row: dict) -> dict:
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


def _sintel_summary(summary: dict) -> dict:
    return {**summary, "ip": "sintel", "film": {**summary["film"], "ip": "sintel"}}


@pytest.fixture(scope="module")
def captioned_film(film_dir, tmp_path_factory) -> Path:
    """The bikes film folder with its clips captioned, rewritten once for the module."""
    folder = tmp_path_factory.mktemp("captioned") / "bikes"
    return rewrite_film(film_dir, folder, _captioned, _sintel_summary)


@pytest.fixture
def film(captioned_film, tmp_path) -> Path:
    """A captioned copy of the bikes film folder, for one test to review (a file copy: 1 ms
    where rewriting the shards took 27)."""
    return Path(shutil.copytree(captioned_film, tmp_path / "data" / "bikes"))


@pytest.fixture
def server(film):
    running = _start(film)
    yield running
    _stop(running)


def _start(path: Path) -> ReviewServer:
    server = ReviewServer(ReviewApp(path), port=0)
    # a short poll: shutdown() waits up to one poll interval (0.5 s by default) per test
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def _stop(server: ReviewServer) -> None:
    server.shutdown()
    server.server_close()


def _request(server, method, path, body=None, headers=None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=data, headers=sent)
    answer = connection.getresponse()
    payload = answer.read()
    connection.close()
    return answer.status, json.loads(payload) if payload else {}


def _post(server, body, **headers) -> tuple[int, dict]:
    return _request(server, "POST", "/api/review", body, headers)


def _clips(server, query: str = "") -> dict:
    status, data = _request(server, "GET", "/api/clips" + (f"?{query}" if query else ""))
    assert status == 200, data
    return data


def _one_of_each(clips: int) -> dict[str, int]:
    """The review counts after one rejection and one corrected acceptance."""
    return {"clips": clips, "reviewed": 2, "accepted": 1, "rejected": 1, "corrected": 1, "stale": 0}


def _manifest(film: Path) -> dict[str, dict]:
    rows = pq.read_table(film / "manifest.parquet").to_pylist()
    return {row["clip_id"]: row for row in rows}


# ---------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    "field, value, tag",
    [
        ("subject", "young girl", "S"),
        ("environment", "snowy forest", "EV"),
        ("adverb", "run", "MA"),
        ("motion_description", "run 2 km", "MD"),
        ("motion_description", "very " * 9 + "run", "MD"),
        ("social", 2, "SC"),
        ("entertainment", "yes", "ET"),
        ("stamina", 0, "ST"),
    ],
)
def test_a_correction_the_caption_parser_would_refuse_is_refused(field, value, tag):
    """One rule per field: a value is out of domain for a person exactly when it is for the model."""
    with pytest.raises(ReviewError, match=f"^{field}") as refused:
        check_fields({field: value}, SHEET)
    with pytest.raises(ParseError) as parsed:
        start, end = VALID_STATE.index(f"<{tag}>"), VALID_STATE.index(f"</{tag}>")
        parse_state(VALID_STATE[: start + len(tag) + 2] + str(value) + VALID_STATE[end:])
    # the same problem, named by field for a person and by tag for the model
    assert str(refused.value).removeprefix(field) == str(parsed.value).removeprefix(f"<{tag}>")


def test_corrections_in_domain_are_normalised_as_the_parser_does():
    fields = {
        "subject": " boy ",
        "adverb": "Slowly",
        "motion_description": "walks   past",
        "social": "1",
        "stamina": 1,
        "characters": ["Scales", " Sintel "],
    }
    assert check_fields(fields, SHEET) == {
        "subject": "boy",
        "adverb": "slowly",
        "motion_description": "walks past",
        "social": 1,
        "stamina": 1,
        "characters": ["Scales", "Sintel"],
    }
    assert check_fields({"characters": [], "subject": None}, SHEET) == {
        "characters": [],
        "subject": None,
    }


@pytest.mark.parametrize(
    "fields, problem",
    [
        (
            {"characters": ["Bob"]},
            r"\['Bob'\] not on the reference sheet \(protagonists: Sintel, Scales\)",
        ),
        ({"characters": ["Sintel", "Sintel"]}, "repeated name"),
        ({"characters": "Sintel"}, "must be a list of names"),
        ({"instruction": "anything"}, r"fields \['instruction'\] cannot be corrected"),
        ({"social": True}, "social must be one of"),
    ],
)
def test_character_lists_and_unknown_fields_are_refused(fields, problem):
    with pytest.raises(ReviewError, match=problem):
        check_fields(fields, SHEET)


def test_the_decision_wins_over_the_automatic_flags():
    assert effective_quality(None, None, None) == (True, [])  # flags not computed yet
    assert effective_quality(False, ["text"], None) == (False, ["text"])
    assert effective_quality(False, ["text", "blur"], "accept") == (True, [])
    assert effective_quality(True, [], "reject") == (False, ["review"])
    assert effective_quality(False, ["text"], "reject") == (False, ["text", "review"])


# ---------------------------------------------------------------- the API


def test_decisions_are_written_to_review_parquet_and_the_manifest(film, server):
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    assert len(ids) >= 3
    status, answer = _post(server, {"clip_id": ids[0], "decision": "reject", "note": "a sign"})
    assert status == 200 and answer["clip"]["usable"] is False
    fields = {"subject": "boy", "characters": ["Scales"], "adverb": "slowly"}
    status, answer = _post(server, {"clip_id": ids[1], "decision": "accept", "fields": fields})
    assert status == 200, answer
    expected = "Character: Scales; Motion: slowly rides a bike; Background: street."
    assert answer["clip"]["instruction"] == expected
    assert answer["clip"]["model"] == {
        "subject": "girl",
        "characters": ["Sintel"],
        "adverb": "quickly",
    }

    reviews = read_reviews(FilmFolder(film))
    assert set(reviews) == {ids[0], ids[1]}
    assert (reviews[ids[0]].decision, reviews[ids[0]].note, reviews[ids[0]].fields) == (
        "reject",
        "a sign",
        {},
    )
    assert reviews[ids[1]].fields == fields
    stored = pq.read_table(film / REVIEW_FILE).to_pylist()
    assert [r["corrected"] for r in stored if r["clip_id"] == ids[1]] == [
        ["characters", "subject", "adverb"]
    ]

    manifest = _manifest(film)
    assert manifest[ids[0]]["review_decision"] == "reject"
    assert (manifest[ids[0]]["usable"], manifest[ids[0]]["reject_reasons"]) == (False, ["review"])
    corrected = manifest[ids[1]]
    assert (corrected["review_decision"], corrected["usable"]) == ("accept", True)
    assert (corrected["subject"], corrected["characters"], corrected["num_characters"]) == (
        "boy",
        ["Scales"],
        1,
    )
    assert corrected["instruction"] == expected
    untouched = manifest[ids[2]]
    assert (untouched["review_decision"], untouched["usable"], untouched["subject"]) == (
        None,
        True,
        "girl",
    )
    # the shards keep the model's own answers
    shard = {r["clip_id"]: r for r in pq.read_table(film / "shards").to_pylist()}
    assert shard[ids[1]]["subject"] == "girl"

    # a later decision keeps earlier corrections; a None field withdraws one, a None note keeps
    status, answer = _post(
        server, {"clip_id": ids[1], "decision": "reject", "fields": {"adverb": None}}
    )
    assert status == 200
    assert read_reviews(FilmFolder(film))[ids[1]].fields == {
        "subject": "boy",
        "characters": ["Scales"],
    }
    assert _manifest(film)[ids[1]]["adverb"] == "quickly"


def test_clips_come_a_page_at_a_time_and_follow_new_decisions(film, server):
    every = [c["clip_id"] for c in _clips(server)["clips"]]
    assert len(every) >= 3
    page = _clips(server, "offset=1&limit=2")
    assert [c["clip_id"] for c in page["clips"]] == every[1:3]
    assert (page["matched"], page["total"], page["offset"], page["limit"]) == (
        len(every),
        len(every),
        1,
        2,
    )
    assert _clips(server, f"offset={len(every)}&limit=5")["clips"] == []
    # the listing is built once and kept, but a decision shows in the next page asked for
    _post(server, {"clip_id": every[0], "decision": "reject"})
    rejected = _clips(server, "decision=reject&limit=1")
    assert [c["clip_id"] for c in rejected["clips"]] == [every[0]] and rejected["matched"] == 1
    status, answer = _request(server, "GET", "/api/clips?limit=-1")
    assert status == 400 and "limit must be a whole number" in answer["error"]


def test_filters_select_clips_by_every_field(film, server):
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    _post(server, {"clip_id": ids[0], "decision": "reject"})
    _post(server, {"clip_id": ids[1], "decision": "accept", "fields": {"characters": ["Scales"]}})
    everything = _clips(server)
    assert everything["total"] == len(ids) and len(everything["clips"]) == len(ids)
    assert everything["facets"]["character"] == ["Scales", "Sintel"]
    assert everything["facets"]["reason"] == ["review"]
    assert everything["counts"]["bikes"] == _one_of_each(len(ids))

    def chosen(query):
        return [c["clip_id"] for c in _clips(server, query)["clips"]]

    assert chosen("usable=false") == [ids[0]]
    assert chosen("reason=review") == [ids[0]]
    assert chosen("decision=none") == ids[2:]
    assert chosen("decision=accept") == [ids[1]]
    assert chosen("character=Scales") == [ids[1]]
    assert chosen("film=bikes&usable=true") == ids[1:]
    assert chosen("caption_status=ok") == ids and chosen("caption_status=pending") == []
    level = everything["clips"][0]["motion_level"]
    assert chosen(f"motion_level={level}") == [
        c["clip_id"] for c in everything["clips"] if c["motion_level"] == level
    ]
    for query, problem in [
        ("film=nosuch", "film 'nosuch' is not under"),
        ("usable=maybe", "usable must be true or false"),
        ("motion_level=high", "motion_level must be a level number"),
        ("colour=red", "unknown filters ['colour']"),
    ]:
        status, data = _request(server, "GET", f"/api/clips?{query}")
        assert (status, problem in data["error"]) == (400, True), data


def test_bad_requests_get_a_4xx_and_a_message_and_write_nothing(film, server):
    clip_id = _clips(server)["clips"][0]["clip_id"]
    cases = [
        ({"clip_id": "0" * 32, "decision": "accept"}, {}, 404, "is not a clip under"),
        (
            {"clip_id": clip_id, "decision": "maybe"},
            {},
            400,
            "decision must be one of ['accept', 'reject'], got 'maybe'",
        ),
        ({"clip_id": clip_id}, {}, 400, "decision must be one of"),
        (
            {"clip_id": clip_id, "decision": "accept", "fields": {"stamina": 3}},
            {},
            400,
            "stamina must be one of [1, -1], got 3",
        ),
        (
            {"clip_id": clip_id, "decision": "accept", "fields": {"characters": ["Bob"]}},
            {},
            400,
            "not on the reference sheet",
        ),
        (
            {"clip_id": clip_id, "decision": "accept", "colour": "red"},
            {},
            400,
            "unknown keys ['colour']",
        ),
        ({"clip_id": clip_id, "decision": "accept", "note": 5}, {}, 400, "note must be text"),
        (b"{not json", {}, 400, "not valid JSON"),
        ([clip_id], {}, 400, "must be a JSON object"),
        # a page of another site cannot send JSON without a preflight, nor reach a renamed host
        (
            {"clip_id": clip_id, "decision": "reject"},
            {"Content-Type": "text/plain"},
            415,
            "application/json",
        ),
        (
            {"clip_id": clip_id, "decision": "reject"},
            {"Host": "evil.example:80"},
            403,
            "answers only requests to",
        ),
        (
            {"clip_id": clip_id, "decision": "reject"},
            {"Origin": "http://evil.example"},
            403,
            "not accepted",
        ),
    ]
    for body, headers, status, message in cases:
        got, data = _post(server, body, **headers)
        assert (got, message in data.get("error", "")) == (status, True), (body, data)
    assert not (film / REVIEW_FILE).exists()
    assert _request(server, "GET", "/media/" + "0" * 32 + ".mp4")[0] == 404
    assert _request(server, "GET", "/nosuch")[0] == 404


def test_every_problem_of_a_request_is_named_in_one_answer(film, server):
    clip_id = _clips(server)["clips"][0]["clip_id"]
    body = {
        "clip_id": clip_id,
        "decision": "maybe",
        "note": 5,
        "fields": {"stamina": 3, "subject": "young girl", "characters": ["Bob"], "colour": 1},
    }
    status, data = _post(server, body)
    assert status == 400
    for problem in (
        "decision must be one of",
        "note must be text",
        "stamina must be one of [1, -1], got 3",
        "subject must be one word, got 'young girl'",
        "not on the reference sheet",
        "fields ['colour'] cannot be corrected",
    ):
        assert problem in data["error"], data
    # an unknown clip is a 404 alone, and one problem among others in a 400
    assert _post(server, {"clip_id": "0" * 32, "decision": "accept"})[0] == 404
    status, data = _post(server, {"clip_id": "0" * 32, "decision": "maybe"})
    assert status == 400 and "is not a clip under" in data["error"]
    assert "decision must be one of" in data["error"]
    assert not (film / REVIEW_FILE).exists()


def test_a_refused_post_leaves_a_kept_alive_connection_usable(film, server):
    """A POST refused before its body is read (foreign origin, content type, path, host) must
    not leave that body to be parsed as the next request of the same connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    clip_id = _clips(server)["clips"][0]["clip_id"]
    body = json.dumps({"clip_id": clip_id, "decision": "reject"}).encode()
    refusals = [
        ("/api/review", {"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
        ("/api/review", {"Content-Type": "text/plain"}, 415),
        ("/api/nosuch", {"Content-Type": "application/json"}, 404),
        ("/api/review", {"Content-Type": "application/json", "Host": "evil.example:80"}, 403),
    ]
    sockets = set()
    for path, headers, status in refusals:
        connection.request("POST", path, body=body, headers=headers)
        answer = connection.getresponse()
        assert (answer.status, answer.getheader("Connection")) == (status, None)
        answer.read()
        sockets.add(id(connection.sock))
        connection.request("GET", "/api/clips")
        answer = connection.getresponse()
        assert answer.status == 200
        assert json.loads(answer.read())["total"] == 3
    connection.request(
        "POST", "/api/review", body=body, headers={"Content-Type": "application/json"}
    )
    answer = connection.getresponse()
    assert answer.status == 200, answer.read()
    answer.read()
    assert len(sockets) == 1  # one connection all along
    # a body too long to read away is refused and the connection closed, not left dirty
    connection.putrequest("POST", "/api/review")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(10 << 20))
    connection.endheaders()
    answer = connection.getresponse()
    assert (answer.status, answer.getheader("Connection")) == (413, "close")
    connection.close()
    assert read_reviews(FilmFolder(film))[clip_id].decision == "reject"


def test_media_are_the_stored_bytes_served_by_clip_id(film, server):
    clip_id = _clips(server)["clips"][0]["clip_id"]
    row = next(r for r in pq.read_table(film / "shards").to_pylist() if r["clip_id"] == clip_id)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("GET", f"/media/{clip_id}.mp4")
    answer = connection.getresponse()
    assert (answer.status, answer.getheader("Content-Type"), answer.read()) == (
        200,
        "video/mp4",
        row["video"],
    )
    connection.request("GET", f"/media/{clip_id}.mp4", headers={"Range": "bytes=100-199"})
    answer = connection.getresponse()
    assert answer.status == 206 and answer.read() == row["video"][100:200]
    assert answer.getheader("Content-Range") == f"bytes 100-199/{len(row['video'])}"
    connection.request("GET", f"/media/{clip_id}.jpg")
    answer = connection.getresponse()
    assert (answer.getheader("Content-Type"), answer.read()) == ("image/jpeg", row["first_frame"])
    connection.close()


@pytest.mark.slow
def test_concurrent_posts_never_lose_a_decision(film, server):
    """Every thread corrects another field of the same clips at once: each read-modify-write of
    review.parquet must see the others' or a correction is lost."""
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    corrections = {
        "subject": "boy",
        "environment": "road",
        "adverb": "slowly",
        "motion_description": "walks past",
        "social": 1,
        "entertainment": 0,
        "stamina": 1,
        "characters": ["Scales"],
    }
    start = threading.Barrier(len(ids) * len(corrections))
    answers = []

    def post(clip_id, field):
        start.wait()
        answers.append(
            _post(
                server,
                {"clip_id": clip_id, "decision": "accept", "fields": {field: corrections[field]}},
            )[0]
        )

    threads = [threading.Thread(target=post, args=(i, f)) for i in ids for f in corrections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * len(threads)
    reviews = read_reviews(FilmFolder(film))
    assert {clip_id: reviews[clip_id].fields for clip_id in ids} == {
        clip_id: corrections for clip_id in ids
    }
    assert all(row["subject"] == "boy" and row["stamina"] == 1 for row in _manifest(film).values())


def _correct_in_turn(film: Path, clip_id: str, fields: dict, start) -> None:
    start.wait()
    store = ReviewStore(FilmFolder(film))
    for name, value in fields.items():
        store.record(clip_id, "accept", fields={name: value})


def test_two_processes_writing_one_review_file_lose_nothing(film):
    """Two review servers on one folder: the file lock keeps each one's corrections."""
    import multiprocessing

    clip_id = pq.read_table(film / "shards", columns=["clip_id"]).column(0)[0].as_py()
    halves = [
        {"subject": "boy", "environment": "road", "adverb": "slowly", "social": 1},
        {"motion_description": "walks past", "entertainment": 0, "stamina": 1, "characters": []},
    ]
    context = multiprocessing.get_context("fork")
    start = context.Barrier(len(halves))
    workers = [
        context.Process(target=_correct_in_turn, args=(film, clip_id, half, start))
        for half in halves
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    assert read_reviews(FilmFolder(film))[clip_id].fields == {**halves[0], **halves[1]}


def test_decisions_survive_a_server_restart_and_show_in_the_notebook_api(film):
    server = _start(film)
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    _post(server, {"clip_id": ids[0], "decision": "reject", "note": "text on screen"})
    _post(server, {"clip_id": ids[1], "decision": "accept", "fields": {"environment": "road"}})
    _stop(server)

    server = _start(film)
    clips = {c["clip_id"]: c for c in _clips(server)["clips"]}
    _stop(server)
    assert clips[ids[0]]["review"]["note"] == "text on screen" and clips[ids[0]]["usable"] is False
    assert clips[ids[1]]["environment"] == "road" and clips[ids[1]]["model"] == {
        "environment": "street"
    }
    dataset = open_dataset(film.parent)
    state = dataset.review_state.loc["bikes"].to_dict()
    assert state == _one_of_each(len(ids))
    manifest = dataset.manifest.set_index("clip_id")
    assert manifest.loc[ids[0], "review_decision"] == "reject"
    assert manifest.loc[ids[1], "environment"] == "road"


@pytest.mark.slow
def test_the_report_shows_the_review_state(film, server):
    from pipeline.inspection.report import ReportOptions, build_report

    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    _post(server, {"clip_id": ids[0], "decision": "reject"})
    _post(server, {"clip_id": ids[1], "decision": "accept", "fields": {"subject": "boy"}})
    page = build_report(open_dataset(film), ReportOptions(max_previews=len(ids)))
    assert f"{2} of {len(ids)} clips reviewed: 1 accepted, 1 rejected, 1 corrected" in page
    assert "rejected in review" in page and "accepted in review" in page
    # the rejected clip is listed under its reason, with what the reason means
    assert f"{REVIEW}: 1 clips <small>{html.escape(REJECT_REASONS[REVIEW])}</small>" in page


# ---------------------------------------------------------------- decisions win downstream


def test_the_trainer_reads_decisions_and_corrections(film, server):
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    catalog = ClipCatalog([film])
    assert len(clip_samples(catalog)) == len(ids)
    _post(server, {"clip_id": ids[1], "decision": "reject"})
    fields = {"motion_description": "walks past"}
    _post(server, {"clip_id": ids[2], "decision": "accept", "fields": fields})
    catalog = ClipCatalog([film], include_unusable=True)  # a person's rejection wins even so
    by_id = {row["clip_id"]: i for i, row in enumerate(catalog.rows)}
    assert ids[1] not in by_id and catalog.rejected_in_review == 1
    assert [catalog.rows[s[0]]["clip_id"] for s in clip_samples(catalog)] == [ids[0], ids[2]]
    row = catalog.rows[by_id[ids[2]]]
    assert row["motion_description"] == "walks past"
    assert (
        row["instruction"] == "Character: Sintel; Motion: quickly walks past; Background: street."
    )
    # the rejected clip's gap ends the game sequence it was in: none spans it
    sequences = game_sequences(catalog.rows, max_turns=3)
    assert sequences and all(len(seq) == 1 for seq in sequences)


def test_an_accepted_clip_is_usable_whatever_the_automatic_flags_said(film, server):
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    for shard in (film / "shards").glob("*.parquet"):  # flags as the quality stage writes them
        table = pq.read_table(shard)
        table = replace_column(table, "usable", [False] * len(table))
        pq.write_table(replace_column(table, "reject_reasons", [["text"]] * len(table)), shard)
    _post(server, {"clip_id": ids[0], "decision": "accept"})
    clips = {c["clip_id"]: c for c in _clips(server)["clips"]}
    auto = clips[ids[0]]["auto"]
    assert clips[ids[0]]["usable"] is True
    assert (auto["usable"], auto["reject_reasons"]) == (False, ["text"])
    assert {m["reason"]: m["decided"] for m in auto["measures"]}["text"] is True
    assert clips[ids[1]]["usable"] is False and clips[ids[1]]["reject_reasons"] == ["text"]
    catalog = ClipCatalog([film])
    assert [catalog.rows[s[0]]["clip_id"] for s in clip_samples(catalog)] == [ids[0]]


def test_captioning_follows_the_review_and_leaves_the_automatic_flags_in_the_shards(film, server):
    from captioning import ScriptedEngine, answer_well

    from core.record import CAPTION_OK, SKIPPED_UNUSABLE
    from pipeline.data.ip import load_ip
    from pipeline.passes.caption_films import caption_film
    from stages.captioning.stage import CaptionConfig

    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    automatic = {ids[0]: False, ids[1]: False, ids[2]: True}
    for shard in (film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        flags = [automatic[i] for i in table.column("clip_id").to_pylist()]
        table = replace_column(table, "usable", flags)
        reasons = [[] if usable else ["text"] for usable in flags]
        pq.write_table(replace_column(table, "reject_reasons", reasons), shard)
    _post(server, {"clip_id": ids[0], "decision": "accept"})
    _post(server, {"clip_id": ids[2], "decision": "reject"})

    config = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96)
    caption_film(film, config, load_ip("sintel"), engine=ScriptedEngine(answer_well))
    shard = {r["clip_id"]: r for r in pq.read_table(film / "shards").to_pylist()}
    assert [shard[i]["caption_status"] for i in ids] == [
        CAPTION_OK,
        SKIPPED_UNUSABLE,
        SKIPPED_UNUSABLE,
    ]
    assert {i: shard[i]["usable"] for i in ids} == automatic  # the shards keep the automatic flags
    manifest = _manifest(film)
    assert [manifest[i]["usable"] for i in ids] == [True, False, False]


def test_an_accept_makes_an_uncaptioned_rejected_clip_pending(film, server):
    """An accepted clip that the quality stage had rejected will be captioned: the manifest and
    the page say `pending`, as re-thresholding does; a rejected uncaptioned clip says skipped."""
    from core.record import CAPTION_PENDING, SKIPPED_UNUSABLE

    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    statuses = {ids[0]: SKIPPED_UNUSABLE, ids[1]: CAPTION_PENDING, ids[2]: CAPTION_PENDING}
    for shard in (film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        clip_ids = table.column("clip_id").to_pylist()
        table = replace_column(table, "usable", [i != ids[0] for i in clip_ids])
        table = replace_column(table, "caption_status", [statuses[i] for i in clip_ids])
        pq.write_table(table, shard)
    status, answer = _post(server, {"clip_id": ids[0], "decision": "accept"})
    assert (status, answer["clip"]["caption_status"]) == (200, CAPTION_PENDING)
    assert _post(server, {"clip_id": ids[1], "decision": "reject"})[0] == 200
    manifest = _manifest(film)
    assert [manifest[i]["caption_status"] for i in ids] == [
        CAPTION_PENDING,
        SKIPPED_UNUSABLE,
        CAPTION_PENDING,
    ]


@pytest.mark.slow
def test_a_rerun_a_recaption_and_a_recalibration_keep_every_decision(bikes_dataset, tmp_path):
    """The real pipeline's film folder: decisions and corrections survive the three rewrites."""
    from captioning import ScriptedEngine, answer_well
    from conftest import BIKES, local_config

    from core.shards import shard_paths
    from pipeline.commands.motion_calibrate import rewrite_films
    from pipeline.data.ip import load_ip
    from pipeline.passes.caption_films import caption_film
    from pipeline.running.runner import run_film
    from stages.captioning.stage import CaptionConfig
    from stages.motion_levels import MotionLevels

    out = tmp_path / "data"
    film = Path(shutil.copytree(bikes_dataset, out / bikes_dataset.name))
    server = _start(film)
    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    _post(server, {"clip_id": ids[0], "decision": "reject", "note": "blurred"})
    _post(
        server,
        {
            "clip_id": ids[1],
            "decision": "accept",
            "fields": {"subject": "cyclist", "environment": "road"},
        },
    )
    _stop(server)
    before = read_reviews(FilmFolder(film))

    def check(after_what: str) -> None:
        assert read_reviews(FilmFolder(film)) == before, after_what
        manifest = _manifest(film)
        assert set(manifest) == set(ids), after_what
        assert manifest[ids[0]]["review_decision"] == "reject", after_what
        assert manifest[ids[0]]["usable"] is False, after_what
        assert (manifest[ids[1]]["subject"], manifest[ids[1]]["environment"]) == (
            "cyclist",
            "road",
        ), after_what

    ip = load_ip("sintel")
    config = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96)
    caption_film(film, config, ip, engine=ScriptedEngine(answer_well))
    check("re-caption")
    shard = {r["clip_id"]: r for r in pq.read_table(film / "shards").to_pylist()}
    assert shard[ids[1]]["caption_status"] == "ok" and shard[ids[1]]["subject"] != "cyclist"
    manifest = _manifest(film)
    assert manifest[ids[1]]["instruction"].endswith("Background: road.")  # rebuilt from corrections

    # edges between the three clips' scopes: every clip changes level
    scopes = sorted(r["motion_scope"] for r in pq.read_table(film / "shards").to_pylist())
    edges = (scopes[0] / 2, (scopes[0] + scopes[1]) / 2, (scopes[1] + scopes[2]) / 2, scopes[2] * 2)
    rewrite_films(shard_paths(film), MotionLevels(version="test-relevel", edges=edges))
    assert {r["motion_levels_version"] for r in _manifest(film).values()} == {"test-relevel"}
    check("motion re-calibration")

    (film / "summary.json").unlink()  # as if the run had been cut short: the film is cut again
    result = run_film(BIKES, out, local_config(), load_ip(None))
    assert result.ok and result.film_dir == film
    check("rerun of the pipeline")


def test_the_runs_console_counts_follow_the_review(bikes_dataset, tmp_path, caplog):
    """A rerun's `quality:` line and total count usable clips as the manifest does, decisions
    included, and say how many were accepted and rejected by hand."""
    from conftest import BIKES, local_config

    from pipeline.data.ip import load_ip
    from pipeline.running.runner import run_films

    out = tmp_path / "data"
    film = Path(shutil.copytree(bikes_dataset, out / bikes_dataset.name))
    server = _start(film)
    clips = _clips(server)["clips"]
    rejected = [c["clip_id"] for c in clips if c["usable"]][:2]
    for clip_id in rejected:
        _post(server, {"clip_id": clip_id, "decision": "reject"})
    accepted = next(c["clip_id"] for c in clips if c["clip_id"] not in rejected)
    _post(server, {"clip_id": accepted, "decision": "accept"})
    _stop(server)
    usable = sum(row["usable"] for row in _manifest(film).values())
    assert usable == len(clips) - 2

    with caplog.at_level("INFO", logger="pipeline.running.folder_passes"):
        [result] = run_films([BIKES], out, local_config(), load_ip(None))
    assert "already complete" in result.message  # nothing cut again: the decisions stand
    assert f"quality: {usable} usable, 2 rejected (review 2)" in result.message
    assert result.message.endswith("; review: 1 accepted, 2 rejected")
    assert f"quality: {usable} of {len(clips)} clips usable in 1 film(s)" in caplog.text


# ---------------------------------------------------------------- the command line


def test_the_command_names_a_folder_without_clips_and_a_taken_port(film, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli_main(["review", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no film folders found" in err
    server = _start(film)
    try:
        assert cli_main(["review", str(film), "--port", str(server.port)]) == 2
        assert f"cannot listen on port {server.port}" in capsys.readouterr().err
    finally:
        _stop(server)


# ---------------------------------------------------------------- the page in a real browser


@pytest.mark.slow
def test_the_page_rejects_with_the_keyboard_and_saves_a_corrected_field(film, server, chromium):
    session = chromium.open(server.url, width=1280, height=900)
    ids = chromium.wait_until(
        "document.querySelectorAll('#list li').length === 3 && "
        "[...document.querySelectorAll('#list li')].map(li => li.dataset.clip)",
        session,
    )
    first, second = ids[0], ids[1]
    # the first clip is shown, looping its stored video
    chromium.wait_until("document.querySelector('#player').readyState >= 2", session)
    video = chromium.evaluate(
        "(() => { const v = document.querySelector('#player'); return {loop: v.loop, "
        "width: v.videoWidth, height: v.videoHeight, src: v.getAttribute('src')}; })()",
        session,
    )
    assert video == {"loop": True, "width": 720, "height": 480, "src": f"/media/{first}.mp4"}

    chromium.press("r", session)  # reject the first clip, and move on to the second
    chromium.wait_until(
        f"document.querySelector('#list li.current').dataset.clip === '{second}'", session
    )
    chromium.press("e", session)  # edit: the cursor goes to the subject field
    assert chromium.evaluate("document.activeElement.name", session) == "subject"
    chromium.evaluate("document.activeElement.select()", session)
    chromium.type_text("cyclist", session)
    chromium.press("Enter", session)
    chromium.wait_until(
        "document.querySelector('#message').textContent.includes('corrected subject')", session
    )

    # an out-of-domain value is refused with the server's message, and nothing is written
    chromium.evaluate("document.querySelector('#edit').elements.adverb.focus()", session)
    chromium.evaluate("document.activeElement.select()", session)
    chromium.type_text("run", session)
    chromium.press("Enter", session)
    refusal = chromium.wait_until(
        "document.querySelector('#message.error') && document.querySelector('#message').textContent",
        session,
    )
    assert refusal == "adverb 'run' is not an adverb (-ly or a known flat adverb)"
    chromium.press("Escape", session)
    chromium.evaluate("document.querySelector('#edit').elements.adverb.value = 'quickly'", session)
    chromium.screenshot(session, ARTIFACTS / "review-page.png")

    reviews = read_reviews(FilmFolder(film))
    assert set(reviews) == {first, second}
    assert (reviews[first].decision, reviews[first].fields) == ("reject", {})
    assert (reviews[second].decision, reviews[second].fields) == ("accept", {"subject": "cyclist"})
    manifest = _manifest(film)
    assert (manifest[first]["review_decision"], manifest[first]["usable"]) == ("reject", False)
    assert (manifest[second]["subject"], manifest[second]["review_decision"]) == (
        "cyclist",
        "accept",
    )
    text = chromium.evaluate("document.body.innerText", session)
    assert "reviewed 2 of 3: 1 accepted, 1 rejected, 1 corrected" in text
    # no console error but the browser's own note of the one refused request
    assert chromium.console_errors(session) == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    ]
    shot = Image.open(ARTIFACTS / "review-page.png")
    assert shot.width == 1280 and shot.height >= 900


@pytest.mark.slow
def test_the_page_takes_filters_from_its_address_shows_measures_and_keeps_connections_clean(
    film_dir, tmp_path, chromium
):
    """An uncaptioned film with one clip rejected for text: the address's filters select it, the
    automatic flags show each value beside its threshold (the deciding one in bold), the caption
    fields are locked, and a request refused early leaves the browser's kept-alive connection
    usable for the next one."""
    first = {}

    def plant_text(row: dict) -> dict:
        if not first:
            first["id"] = row["clip_id"]
            row.update(usable=False, reject_reasons=["text"], quality_text_area=0.02)
        return row

    film = rewrite_film(film_dir, tmp_path / "data" / "bikes", plant_text)
    server = _start(film)
    try:
        session = chromium.open(server.url + "?usable=false&decision=none", width=1280, height=900)
        chromium.call("Network.enable", session=session)
        chromium.wait_until("document.body.dataset.state === 'ready'", session)
        listed = chromium.evaluate(
            "[...document.querySelectorAll('#list li')].map(li => li.dataset.clip)", session
        )
        assert listed == [first["id"]]
        chosen = chromium.evaluate(
            "({usable: document.querySelector('#filters').elements.usable.value, "
            "decision: document.querySelector('#filters').elements.decision.value})",
            session,
        )
        assert chosen == {"usable": "false", "decision": "none"}
        flags = chromium.evaluate(
            "(() => { const dd = [...document.querySelectorAll('#facts dt')]"
            ".find(dt => dt.textContent === 'automatic flags').nextElementSibling;"
            " return {text: dd.innerText, bold: [...dd.querySelectorAll('b')]"
            ".map(b => b.textContent)}; })()",
            session,
        )
        assert flags["bold"] == ["text area 0.0200 (text: over 0.004)"]
        assert "brightness" in flags["text"] and "(fade: at least 1.6x" in flags["text"]
        locked = chromium.evaluate(
            "({subject: document.querySelector('#edit').elements.subject.disabled, "
            "note: document.querySelector('#edit').elements.note.disabled, "
            "said: !document.querySelector('#uncaptioned').hidden})",
            session,
        )
        assert locked == {"subject": True, "note": False, "said": True}
        chromium.screenshot(session, ARTIFACTS / "review-page-filtered.png")

        # a refused POST (wrong content type), then a GET, as the page's fetches send them
        answers = chromium.evaluate(
            f"""(async () => {{
              const refused = await fetch('/api/review', {{method: 'POST',
                headers: {{'Content-Type': 'text/plain'}},
                body: JSON.stringify({{clip_id: '{first["id"]}', decision: 'reject'}})}});
              await refused.text();
              const next = await fetch('/api/clips?limit=1');
              return [refused.status, next.status, (await next.json()).total];
            }})()""",
            session,
        )
        assert answers == [415, 200, 3]
        connections = [
            e["params"]["response"]["connectionId"]
            for e in chromium.events
            if e.get("sessionId") == session
            and e.get("method") == "Network.responseReceived"
            and "/api/" in e["params"]["response"]["url"]
        ]
        assert len(connections) >= 2 and connections[-1] == connections[-2]  # one connection

        # choosing a filter on the page puts it in the address
        chromium.evaluate(
            "(() => { const s = document.querySelector('#filters').elements.decision;"
            " s.value = ''; s.dispatchEvent(new Event('change', {bubbles: true})); })()",
            session,
        )
        chromium.wait_until("document.body.dataset.state === 'ready'", session)
        assert chromium.evaluate("location.search", session) == "?usable=false"
    finally:
        _stop(server)
    assert not (film / REVIEW_FILE).exists()


def test_the_column_filters_pick_what_the_clip_filter_picks(film, server):
    """The listing filters the stored columns of the rows nobody reviewed as columns; every
    filter must pick exactly the clips that the per-clip filter picks from the whole listing,
    reviewed clips included."""
    from pipeline.inspection.review_app import clip_filter

    ids = [c["clip_id"] for c in _clips(server)["clips"]]
    assert len(ids) == 3
    flags = {
        ids[0]: (False, ["black"], "skipped_unusable", None, ["Sintel"]),
        ids[1]: (False, ["text", "fade"], "pending", 2, []),
        ids[2]: (True, [], "ok", 3, ["Sintel", "Scales"]),
    }
    for shard in (film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        rows = [flags.get(i, (True, [], "ok", 1, ["Scales"])) for i in table["clip_id"].to_pylist()]
        for position, name in enumerate(
            ["usable", "reject_reasons", "caption_status", "motion_level", "characters"]
        ):
            table = replace_column(table, name, [row[position] for row in rows])
        pq.write_table(table, shard)
    fields = {"characters": ["Scales"]}  # the two others stay unreviewed: filtered as columns
    assert _post(server, {"clip_id": ids[2], "decision": "reject", "fields": fields})[0] == 200
    everything = _clips(server)["clips"]
    queries = [
        {"usable": "true"},
        {"usable": "false"},
        {"reason": "text"},
        {"reason": "review"},
        {"caption_status": "pending"},
        {"caption_status": "ok"},
        {"motion_level": "none"},
        {"motion_level": "2"},
        {"character": "Sintel"},
        {"character": "Scales"},
        {"decision": "reject"},
        {"decision": "none"},
        {"film": everything[0]["film"], "usable": "true", "character": "Scales"},
    ]
    for query in queries:
        expected = [c["clip_id"] for c in everything if clip_filter(query)(c)]
        answer = _clips(server, "&".join(f"{k}={v}" for k, v in query.items()))
        assert [c["clip_id"] for c in answer["clips"]] == expected, query
        assert answer["matched"] == len(expected)
    facets = _clips(server)["facets"]
    assert "review" in facets["reason"] and {"Sintel", "Scales"} <= set(facets["character"])
