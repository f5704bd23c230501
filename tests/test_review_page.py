"""The review page itself, in headless Chromium (tests/browser.py)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import ARTIFACTS, rewrite_film
from PIL import Image
from reviewing import (
    get_clips,
    manifest_rows,
    post_review,
    start_server,
    stop_server,
)

from core.film import REVIEW_FILE, FilmFolder
from core.shards import replace_column
from pipeline.data.review import read_reviews

# ---------------------------------------------------------------- the page in a real browser


@pytest.mark.slow
def test_the_page_rejects_with_the_keyboard_and_saves_a_corrected_field(
    review_film, review_server, chromium
):
    session = chromium.open(review_server.url, width=1280, height=900)
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

    reviews = read_reviews(FilmFolder(review_film))
    assert set(reviews) == {first, second}
    assert (reviews[first].decision, reviews[first].fields) == ("reject", {})
    assert (reviews[second].decision, reviews[second].fields) == ("accept", {"subject": "cyclist"})
    manifest = manifest_rows(review_film)
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

    review_film = rewrite_film(film_dir, tmp_path / "data" / "bikes", plant_text)
    review_server = start_server(review_film)
    try:
        session = chromium.open(
            review_server.url + "?usable=false&decision=none", width=1280, height=900
        )
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
        stop_server(review_server)
    assert not (review_film / REVIEW_FILE).exists()


def test_the_column_filters_pick_what_the_clip_filter_picks(review_film, review_server):
    """The listing filters the stored columns of the rows nobody reviewed as columns; every
    filter must pick exactly the clips that the per-clip filter picks from the whole listing,
    reviewed clips included."""
    from pipeline.inspection.review_app import clip_filter

    ids = [c["clip_id"] for c in get_clips(review_server)["clips"]]
    assert len(ids) == 3
    flags = {
        ids[0]: (False, ["black"], "skipped_unusable", None, ["Sintel"]),
        ids[1]: (False, ["text", "fade"], "pending", 2, []),
        ids[2]: (True, [], "ok", 3, ["Sintel", "Scales"]),
    }
    for shard in (review_film / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        rows = [flags.get(i, (True, [], "ok", 1, ["Scales"])) for i in table["clip_id"].to_pylist()]
        for position, name in enumerate(
            ["usable", "reject_reasons", "caption_status", "motion_level", "characters"]
        ):
            table = replace_column(table, name, [row[position] for row in rows])
        pq.write_table(table, shard)
    fields = {"characters": ["Scales"]}  # the two others stay unreviewed: filtered as columns
    assert (
        post_review(review_server, {"clip_id": ids[2], "decision": "reject", "fields": fields})[0]
        == 200
    )
    everything = get_clips(review_server)["clips"]
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
        answer = get_clips(review_server, "&".join(f"{k}={v}" for k, v in query.items()))
        assert [c["clip_id"] for c in answer["clips"]] == expected, query
        assert answer["matched"] == len(expected)
    facets = get_clips(review_server)["facets"]
    assert "review" in facets["reason"] and {"Sintel", "Scales"} <= set(facets["character"])
