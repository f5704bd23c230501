"""Manual review: the rules (pipeline/data/review.py), the server and its API
(pipeline/inspection/review_server.py), persistence across restarts, and the `review` command."""

from __future__ import annotations

import html
import http.client
import json
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from reviewing import (
    get_clips,
    manifest_rows,
    one_of_each,
    post_review,
    request_json,
    start_server,
    stop_server,
)

from core.film import REVIEW_FILE, FilmFolder
from core.vocabulary import REJECT_REASONS, REVIEW
from pipeline.cli import main as cli_main
from pipeline.data.review import ReviewError, ReviewStore, effective_quality, read_reviews
from pipeline.inspection.explore import open_dataset
from pipeline.inspection.review_server import check_fields
from stages.captioning.parsing import ParseError, parse_state

SHEET = ["Sintel", "Scales"]  # manifests/sintel.yaml's protagonists
VALID_STATE = (
    "<S>girl</S><MD>rides a bike</MD><EV>street</EV><MA>quickly</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"
)


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


def test_decisions_are_written_to_review_parquet_and_the_manifest(review_film, review_server):
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    assert len(ids) >= 3
    status, answer = post_review(
        review_server, {"clip_id": ids[0], "decision": "reject", "note": "a sign"}
    )
    assert status == 200 and answer["clip"]["usable"] is False
    fields = {"subject": "boy", "characters": ["Scales"], "adverb": "slowly"}
    status, answer = post_review(
        review_server, {"clip_id": ids[1], "decision": "accept", "fields": fields}
    )
    assert status == 200, answer
    expected = "Character: Scales; Motion: slowly rides a bike; Background: street."
    assert answer["clip"]["instruction"] == expected
    assert answer["clip"]["model"] == {
        "subject": "girl",
        "characters": ["Sintel"],
        "adverb": "quickly",
    }

    reviews = read_reviews(FilmFolder(review_film))
    assert set(reviews) == {ids[0], ids[1]}
    assert (reviews[ids[0]].decision, reviews[ids[0]].note, reviews[ids[0]].fields) == (
        "reject",
        "a sign",
        {},
    )
    assert reviews[ids[1]].fields == fields
    stored = pq.read_table(review_film / REVIEW_FILE).to_pylist()
    assert [r["corrected"] for r in stored if r["clip_id"] == ids[1]] == [
        ["characters", "subject", "adverb"]
    ]

    manifest = manifest_rows(review_film)
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
    shard = {r["clip_id"]: r for r in pq.read_table(review_film / "shards").to_pylist()}
    assert shard[ids[1]]["subject"] == "girl"

    # a later decision keeps earlier corrections; a None field withdraws one, a None note keeps
    status, answer = post_review(
        review_server, {"clip_id": ids[1], "decision": "reject", "fields": {"adverb": None}}
    )
    assert status == 200
    assert read_reviews(FilmFolder(review_film))[ids[1]].fields == {
        "subject": "boy",
        "characters": ["Scales"],
    }
    assert manifest_rows(review_film)[ids[1]]["adverb"] == "quickly"


def test_clips_come_a_page_at_a_time_and_follow_new_decisions(review_film, review_server):
    every = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    assert len(every) >= 3
    page = get_clips(review_server, "offset=1&limit=2")
    assert [c["clip_id"] for c in page["clips"]] == every[1:3]
    assert (page["matched"], page["total"], page["offset"], page["limit"]) == (
        len(every),
        len(every),
        1,
        2,
    )
    assert get_clips(review_server, f"offset={len(every)}&limit=5")["clips"] == []
    # the listing is built once and kept, but a decision shows in the next page asked for
    post_review(review_server, {"clip_id": every[0], "decision": "reject"})
    rejected = get_clips(review_server, "decision=reject&limit=1")
    assert [c["clip_id"] for c in rejected["clips"]] == [every[0]] and rejected["matched"] == 1
    status, answer = request_json(review_server, "GET", "/api/clips?limit=-1")
    assert status == 400 and "limit must be a whole number" in answer["error"]


def test_filters_select_clips_by_every_field(review_film, review_server):
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    post_review(review_server, {"clip_id": ids[0], "decision": "reject"})
    post_review(
        review_server,
        {"clip_id": ids[1], "decision": "accept", "fields": {"characters": ["Scales"]}},
    )
    everything = get_clips(review_server)
    assert everything["total"] == len(ids) and len(everything["clips"]) == len(ids)
    assert everything["facets"]["character"] == ["Scales", "Sintel"]
    assert everything["facets"]["reason"] == ["review"]
    assert everything["counts"]["bikes"] == one_of_each(len(ids))

    def chosen(query):
        return [c["clip_id"] for c in get_clips(review_server, query)["clips"]]

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
        status, data = request_json(review_server, "GET", f"/api/clips?{query}")
        assert (status, problem in data["error"]) == (400, True), data


def test_bad_requests_get_a_4xx_and_a_message_and_write_nothing(review_film, review_server):
    clip_id = get_clips(review_server)["clips"][0]["clip_id"]
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
        got, data = post_review(review_server, body, **headers)
        assert (got, message in data.get("error", "")) == (status, True), (body, data)
    assert not (review_film / REVIEW_FILE).exists()
    assert request_json(review_server, "GET", "/media/" + "0" * 32 + ".mp4")[0] == 404
    assert request_json(review_server, "GET", "/nosuch")[0] == 404


def test_every_problem_of_a_request_is_named_in_one_answer(review_film, review_server):
    clip_id = get_clips(review_server)["clips"][0]["clip_id"]
    body = {
        "clip_id": clip_id,
        "decision": "maybe",
        "note": 5,
        "fields": {"stamina": 3, "subject": "young girl", "characters": ["Bob"], "colour": 1},
    }
    status, data = post_review(review_server, body)
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
    assert post_review(review_server, {"clip_id": "0" * 32, "decision": "accept"})[0] == 404
    status, data = post_review(review_server, {"clip_id": "0" * 32, "decision": "maybe"})
    assert status == 400 and "is not a clip under" in data["error"]
    assert "decision must be one of" in data["error"]
    assert not (review_film / REVIEW_FILE).exists()


def test_a_refused_post_leaves_a_kept_alive_connection_usable(review_film, review_server):
    """A POST refused before its body is read (foreign origin, content type, path, host) must
    not leave that body to be parsed as the next request of the same connection."""
    connection = http.client.HTTPConnection("127.0.0.1", review_server.port, timeout=30)
    clip_id = get_clips(review_server)["clips"][0]["clip_id"]
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
    assert read_reviews(FilmFolder(review_film))[clip_id].decision == "reject"


def test_media_are_the_stored_bytes_served_by_clip_id(review_film, review_server):
    clip_id = get_clips(review_server)["clips"][0]["clip_id"]
    row = next(
        r for r in pq.read_table(review_film / "shards").to_pylist() if r["clip_id"] == clip_id
    )
    connection = http.client.HTTPConnection("127.0.0.1", review_server.port, timeout=30)
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
def test_concurrent_posts_never_lose_a_decision(review_film, review_server):
    """Every thread corrects another field of the same clips at once: each read-modify-write of
    review.parquet must see the others' or a correction is lost."""
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
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
            post_review(
                review_server,
                {"clip_id": clip_id, "decision": "accept", "fields": {field: corrections[field]}},
            )[0]
        )

    threads = [threading.Thread(target=post, args=(i, f)) for i in ids for f in corrections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * len(threads)
    reviews = read_reviews(FilmFolder(review_film))
    assert {clip_id: reviews[clip_id].fields for clip_id in ids} == {
        clip_id: corrections for clip_id in ids
    }
    assert all(
        row["subject"] == "boy" and row["stamina"] == 1
        for row in manifest_rows(review_film).values()
    )


def _correct_in_turn(review_film: Path, clip_id: str, fields: dict, start) -> None:
    start.wait()
    store = ReviewStore(FilmFolder(review_film))
    for name, value in fields.items():
        store.record(clip_id, "accept", fields={name: value})


def test_two_processes_writing_one_review_file_lose_nothing(review_film):
    """Two review servers on one folder: the file lock keeps each one's corrections."""
    import multiprocessing

    clip_id = pq.read_table(review_film / "shards", columns=["clip_id"]).column(0)[0].as_py()
    halves = [
        {"subject": "boy", "environment": "road", "adverb": "slowly", "social": 1},
        {"motion_description": "walks past", "entertainment": 0, "stamina": 1, "characters": []},
    ]
    context = multiprocessing.get_context("fork")
    start = context.Barrier(len(halves))
    workers = [
        context.Process(target=_correct_in_turn, args=(review_film, clip_id, half, start))
        for half in halves
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0]
    assert read_reviews(FilmFolder(review_film))[clip_id].fields == {**halves[0], **halves[1]}


def test_decisions_survive_a_server_restart_and_show_in_the_notebook_api(review_film):
    review_server = start_server(review_film)
    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    post_review(review_server, {"clip_id": ids[0], "decision": "reject", "note": "text on screen"})
    post_review(
        review_server, {"clip_id": ids[1], "decision": "accept", "fields": {"environment": "road"}}
    )
    stop_server(review_server)

    review_server = start_server(review_film)
    clips = {c["clip_id"]: c for c in get_clips(review_server)["clips"]}
    stop_server(review_server)
    assert clips[ids[0]]["review"]["note"] == "text on screen" and clips[ids[0]]["usable"] is False
    assert clips[ids[1]]["environment"] == "road" and clips[ids[1]]["model"] == {
        "environment": "street"
    }
    dataset = open_dataset(review_film.parent)
    state = dataset.review_state.loc["bikes"].to_dict()
    assert state == one_of_each(len(ids))
    manifest = dataset.manifest.set_index("clip_id")
    assert manifest.loc[ids[0], "review_decision"] == "reject"
    assert manifest.loc[ids[1], "environment"] == "road"


@pytest.mark.slow
def test_the_report_shows_the_review_state(review_film, review_server):
    from pipeline.inspection.report import ReportOptions, build_report

    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    post_review(review_server, {"clip_id": ids[0], "decision": "reject"})
    post_review(
        review_server, {"clip_id": ids[1], "decision": "accept", "fields": {"subject": "boy"}}
    )
    page = build_report(open_dataset(review_film), ReportOptions(max_previews=len(ids)))
    assert f"{2} of {len(ids)} clips reviewed: 1 accepted, 1 rejected, 1 corrected" in page
    assert "rejected in review" in page and "accepted in review" in page
    # the rejected clip is listed under its reason, with what the reason means
    assert f"{REVIEW}: 1 clips <small>{html.escape(REJECT_REASONS[REVIEW])}</small>" in page


# ---------------------------------------------------------------- the command line


def test_the_command_names_a_folder_without_clips_and_a_taken_port(review_film, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli_main(["review", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no film folders found" in err
    review_server = start_server(review_film)
    try:
        assert cli_main(["review", str(review_film), "--port", str(review_server.port)]) == 2
        assert f"cannot listen on port {review_server.port}" in capsys.readouterr().err
    finally:
        stop_server(review_server)
