"""The review page's server: a local web page to accept or reject clips and correct captions.

`serve(path, port)` serves, on 127.0.0.1 only, the page (pipeline/review_page.html), the clips'
media by clip id (`/media/<id>.mp4`, the H.264 bytes stored in the shard; `/media/<id>.jpg`, the
stored first frame), and a small JSON API that the page uses and scripts can use:

    GET  /api/clips?film=&usable=&reason=&caption_status=&motion_level=&character=&decision=
         &offset=&limit=   (a page of the matching clips; no limit: all of them)
    POST /api/review  {"clip_id": "...", "decision": "accept"|"reject", "note": "...",
                       "fields": {"subject": "girl", "characters": ["Sintel"], ...}}

A decision is written to the film's review.parquet and its manifest.parquet is rebuilt before the
answer goes out (pipeline/review.py holds the rules of decisions; every corrected field is checked
here with the caption parser's own domain rules, stages/captioning/parsing.py). Requests are checked before anything is
written: an unknown clip id is a 404, an unknown decision or an out-of-domain field a 400, each
with a message saying what is wrong.

Being a local tool that writes files, it answers only requests addressed to 127.0.0.1 or
localhost at its own port (a DNS-rebinding page cannot reach it), and takes decisions only as
`application/json`, which a page of another origin cannot send without a CORS preflight that this
server never grants.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa

from core.film import FilmFolder
from core.io import write_table_atomic
from core.record import CAPTION_OK
from core.shards import shard_paths
from pipeline.explore import Dataset, DatasetError, Film, open_dataset
from pipeline.manifest import reviewed_manifest, shard_table
from pipeline.quality import film_thresholds
from pipeline.review import (
    ACCEPT,
    DECISIONS,
    EDITABLE_FIELDS,
    QUALITY_COLUMNS,
    REJECT,
    Review,
    ReviewError,
    ReviewStore,
    apply_review,
    check_decision,
    review_counts,
)
from stages.captioning.parsing import ParseError, check_character_names, check_state_value
from stages.quality import RejectConfig, quality_measures

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PAGE = Path(__file__).with_name("review_page.html")
MAX_BODY = 1 << 20  # a decision is a few hundred bytes
MAX_NOTE = 2000
FILTERS = ("film", "usable", "reason", "caption_status", "motion_level", "character", "decision")
PAGING = ("offset", "limit")
UNREVIEWED = "none"  # decision=none lists the clips nobody decided on yet
_MEDIA = re.compile(r"^/media/(?P<clip_id>[0-9a-f]{32})\.(?P<kind>mp4|jpg)$")


class NotFound(LookupError):
    """An unknown clip id or path; answered with 404 and the message."""


@dataclass
class _Snapshot:
    """The dataset as its shards were when last read; rebuilt when a shard changes."""

    signature: tuple
    dataset: Dataset
    tables: dict[str, pa.Table]  # film slug -> shard rows without media (manifest.shard_table)
    rows: dict[str, list[dict]]  # film slug -> the columns the page shows, in clip order
    film_of: dict[str, str]  # clip id -> film slug
    position: dict[str, int]  # clip id -> its index in its film's rows
    thresholds: dict[str, RejectConfig]  # film slug -> the thresholds that decided its clips


@dataclass
class _Listing:
    """What GET /api/clips filters and pages, for one state of the shards and review files."""

    key: tuple
    clips: list[dict]
    counts: dict[str, dict]
    facets: dict


def _review_stamps(snapshot: _Snapshot) -> tuple:
    """Each film's review.parquet as (size, mtime): a decision, here or elsewhere, changes it."""
    stamps = []
    for slug in snapshot.rows:
        path = FilmFolder(snapshot.dataset.film(slug).path).review
        stat = path.stat() if path.is_file() else None
        stamps.append((slug, stat and (stat.st_size, stat.st_mtime_ns)))
    return tuple(stamps)


def _paging(query: dict[str, str]) -> tuple[int, int | None]:
    """(offset, limit) of a request; no limit means every matching clip."""
    limit = query.get("limit")
    return _whole(query.get("offset", "0"), "offset"), None if limit is None else _whole(
        limit, "limit"
    )


def _whole(text: str, name: str) -> int:
    if not text.isdigit():
        raise ReviewError(f"{name} must be a whole number >= 0, got {text!r}")
    return int(text)


class ReviewApp:
    """The clips under one film or dataset folder, their decisions, and the API's answers."""

    def __init__(self, path: str | Path, ip: str | None = None):
        self.root = Path(path)
        self.ip = ip
        self._lock = threading.Lock()
        self._snapshot = self._read(open_dataset(self.root))
        self._sheets: dict[str, list[str]] = {}
        self._stores: dict[str, ReviewStore] = {}
        self._listed: _Listing | None = None

    # ---- reading

    def snapshot(self) -> _Snapshot:
        """The current clips: shards rewritten by a pipeline run since are read again."""
        with self._lock:
            if self._signature() != self._snapshot.signature:
                self._snapshot = self._read(open_dataset(self.root))
            return self._snapshot

    def _signature(self) -> tuple:
        return tuple((str(p), p.stat().st_mtime_ns) for p in shard_paths(self.root))

    def _read(self, dataset: Dataset) -> _Snapshot:
        signature = self._signature()
        tables = {film.slug: shard_table(film.folder) for film in dataset.films}
        rows = {}
        for slug, table in tables.items():
            shown = [name for name in _SHOWN_COLUMNS if name in table.column_names]
            rows[slug] = sorted(table.select(shown).to_pylist(), key=lambda r: r["clip_index"])
        film_of = {row["clip_id"]: slug for slug, film_rows in rows.items() for row in film_rows}
        position = {r["clip_id"]: i for film_rows in rows.values() for i, r in enumerate(film_rows)}
        thresholds = {film.slug: film_thresholds(film.summary) for film in dataset.films}
        return _Snapshot(signature, dataset, tables, rows, film_of, position, thresholds)

    def clips(self, query: dict[str, str]) -> dict:
        """GET /api/clips: the clips passing the filters, with facets and review counts."""
        unknown = sorted(set(query) - set(FILTERS) - set(PAGING))
        if unknown:
            raise ReviewError(f"unknown filters {unknown} (filters: {', '.join(FILTERS)})")
        snapshot = self.snapshot()
        if "film" in query and query["film"] not in snapshot.rows:
            raise ReviewError(
                f"film {query['film']!r} is not under {self.root} "
                f"(films: {', '.join(snapshot.rows)})"
            )
        offset, limit = _paging(query)
        match = _clip_filter({k: v for k, v in query.items() if k in FILTERS})
        listing = self._listing(snapshot)
        chosen = [clip for clip in listing.clips if match(clip)]
        return {
            "root": str(self.root),
            "total": len(listing.clips),
            "matched": len(chosen),
            "offset": offset,
            "limit": limit,
            "clips": chosen[offset : None if limit is None else offset + limit],
            "counts": listing.counts,
            "facets": listing.facets,
            "editable": list(EDITABLE_FIELDS),
            "sheets": {slug: self.sheet(slug) for slug in snapshot.rows},
            # a film nobody captioned has no caption fields to correct (the page locks them)
            "captioned": {
                slug: any(r.get("caption_status") == CAPTION_OK for r in rows)
                for slug, rows in snapshot.rows.items()
            },
        }

    def _listing(self, snapshot: _Snapshot) -> _Listing:
        """Every clip's JSON, the review counts and the facets: built once per state of the shards
        and the review files, so a request filters and pages a list instead of rebuilding it."""
        key = (snapshot.signature, _review_stamps(snapshot))
        with self._lock:
            if self._listed is not None and self._listed.key == key:
                return self._listed
        everything, counts = [], {}
        for slug, rows in snapshot.rows.items():
            reviews = self.store(slug).load()
            counts[slug] = review_counts(reviews, (r["clip_id"] for r in rows))
            limits = snapshot.thresholds[slug]
            everything += [
                _clip_json(slug, row, reviews.get(row["clip_id"]), limits) for row in rows
            ]
        listing = _Listing(key, everything, counts, _facets(everything))
        with self._lock:
            self._listed = listing
        return listing

    def media(self, clip_id: str, kind: str) -> bytes:
        snapshot = self.snapshot()
        if clip_id not in snapshot.film_of:
            raise NotFound(f"clip {clip_id!r} is not under {self.root}")
        column = "video" if kind == "mp4" else "first_frame"
        try:
            return snapshot.dataset.media_bytes(clip_id, column)
        except ValueError as exc:  # a failed clip has no media
            raise NotFound(str(exc)) from None

    # ---- deciding

    def review(self, body) -> dict:
        """POST /api/review: check the request, record it, rebuild the film's manifest. Every
        problem of a request is named in one answer (404 when the clip id is the only one)."""
        if not isinstance(body, dict):
            raise ReviewError("the body must be a JSON object {clip_id, decision, note, fields}")
        problems = _Problems()
        unknown = sorted(set(body) - {"clip_id", "decision", "note", "fields"})
        if unknown:
            problems.add(f"unknown keys {unknown} (expected clip_id, decision, note, fields)")
        clip_id = body.get("clip_id")
        snapshot = self.snapshot()
        slug = snapshot.film_of.get(clip_id) if isinstance(clip_id, str) else None
        if slug is None:
            problems.not_found = f"clip_id {clip_id!r} is not a clip under {self.root}"
        with problems.collect():
            decision = check_decision(body.get("decision"))
        note = body.get("note")
        if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
            problems.add(f"note must be text of at most {MAX_NOTE} characters")
        with problems.collect():  # without the clip's film, names are checked against no sheet
            fields = check_fields(body.get("fields") or {}, self.sheet(slug) if slug else None)
        problems.raise_any()
        assert slug is not None and isinstance(clip_id, str)  # raise_any refused the others
        rows, table = snapshot.rows[slug], snapshot.tables[slug]
        film = snapshot.dataset.film(slug)
        counts = {}

        def rewrite_manifest(reviews: dict[str, Review]) -> None:
            write_table_atomic(reviewed_manifest(table, reviews), film.folder.manifest)
            counts[slug] = review_counts(reviews, (r["clip_id"] for r in rows))

        review = self.store(slug).record(clip_id, decision, note, fields, rewrite_manifest)
        row = rows[snapshot.position[clip_id]]
        clip = _clip_json(slug, row, review, snapshot.thresholds[slug])
        return {"clip": clip, "counts": counts}

    def store(self, slug: str) -> ReviewStore:
        """The review.parquet of a film (one store per film: it holds the film's lock)."""
        with self._lock:
            if slug not in self._stores:
                self._stores[slug] = ReviewStore(FilmFolder(self._snapshot.dataset.film(slug).path))
            return self._stores[slug]

    def sheet(self, slug: str) -> list[str]:
        """The names a clip of this film may be given: its IP's protagonists."""
        if slug not in self._sheets:
            self._sheets[slug] = _protagonists(self.snapshot().dataset.film(slug), self.ip)
        return self._sheets[slug]


class _Problems:
    """What is wrong with a request, gathered so that one answer names all of it."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.not_found: str | None = None

    def add(self, message: str) -> None:
        self.messages.append(message)

    @contextmanager
    def collect(self) -> Iterator[None]:
        try:
            yield
        except ReviewError as exc:
            self.add(str(exc))

    def raise_any(self) -> None:
        if self.not_found and not self.messages:
            raise NotFound(self.not_found)
        if self.messages:
            raise ReviewError("; ".join(filter(None, [self.not_found, *self.messages])))


def check_fields(fields, sheet: list[str] | None) -> dict[str, Any]:
    """Corrected caption fields checked against their domains, by the caption parser's own rules;
    `sheet` is the IP's protagonist names, the domain of `characters` (None: unknown, names are
    not checked). A None value withdraws an earlier correction of that field. Every bad field is
    named in the one error."""
    if not isinstance(fields, dict):
        raise ReviewError(f"fields must be an object of field: value, got {fields!r}")
    problems = _Problems()
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        problems.add(f"fields {unknown} cannot be corrected (editable: {list(EDITABLE_FIELDS)})")
    checked: dict[str, Any] = {}
    for name, value in fields.items():
        try:
            if value is None or name in unknown:
                checked[name] = None
            elif name == "characters":
                if sheet is not None:
                    checked[name] = check_character_names(value, sheet)
            else:
                checked[name] = check_state_value(name, value)
        except ParseError as exc:
            problems.add(str(exc))
    problems.raise_any()
    return checked


def _protagonists(film: Film, ip_name: str | None) -> list[str]:
    """The protagonists of the IP named on the command line, else of the film's own IP; when
    that IP's manifest is not at hand, the names the captioner already gave this film's clips
    (they came from the same reference sheet)."""
    from pipeline.ip import ManifestError, load_ip
    from pipeline.report import film_ip

    try:
        return [p.name for p in load_ip(ip_name or film_ip(film)).protagonists]
    except ManifestError:
        named = film.manifest_table.column("characters").to_pylist()
        return sorted({name for names in named if names for name in names})


# What the page shows of a clip (besides its review): the light columns, read once per snapshot.
_SHOWN_COLUMNS = (
    "clip_id film_name clip_index scene_index start_time end_time start_frame end_frame "
    "num_frames fps width height status error motion_scope motion_level caption_status "
    "instruction num_characters"
).split() + [*EDITABLE_FIELDS, *QUALITY_COLUMNS]
# the measured values behind the automatic flags: shown beside their thresholds, not sent raw
_MEASURED = ("quality_luma_mean", "quality_luma_peak", "quality_text_area")
_SHOWN_COLUMNS += _MEASURED


def _clip_json(slug: str, row: dict, review: Review | None, thresholds: RejectConfig) -> dict:
    """A clip as the page sees it: the shown columns as reviewed, what the review changed, and
    the automatic flags with the measured values beside their thresholds."""
    auto_usable = True if row.get("usable") is None else bool(row["usable"])
    auto_reasons = list(row.get("reject_reasons") or [])
    measures = quality_measures(row, thresholds, auto_reasons)
    seen = {k: v for k, v in apply_review(row, review).items() if k not in _MEASURED}
    return {
        "duplicate_of": None,  # until the shards carry the quality columns
        **seen,
        "film": slug,
        "auto": {
            "usable": auto_usable,
            "reject_reasons": auto_reasons,
            "measures": [{"reason": r, "text": t, "decided": d} for r, t, d in measures],
        },
        "model": {name: row.get(name) for name in (review.fields if review else {})},
        "review": review.to_json() if review else None,
        "video": f"/media/{row['clip_id']}.mp4",
        "first_frame": f"/media/{row['clip_id']}.jpg",
    }


def _clip_filter(query: dict[str, str]):
    checks = []
    if "film" in query:
        checks.append(lambda c: c["film"] == query["film"])
    if "usable" in query:
        wanted = _boolean(query["usable"], "usable")
        checks.append(lambda c: c["usable"] == wanted)
    if "reason" in query:
        checks.append(lambda c: query["reason"] in c["reject_reasons"])
    if "caption_status" in query:
        checks.append(lambda c: (c["caption_status"] or "pending") == query["caption_status"])
    if "motion_level" in query:
        level = _level(query["motion_level"])
        checks.append(lambda c: c["motion_level"] == level)
    if "character" in query:
        checks.append(lambda c: query["character"] in (c["characters"] or []))
    if "decision" in query:
        decision = query["decision"]
        if decision not in (*DECISIONS, UNREVIEWED):
            raise ReviewError(f"decision filter must be accept, reject or none, got {decision!r}")
        wanted_decision = None if decision == UNREVIEWED else decision
        checks.append(lambda c: c["review_decision"] == wanted_decision)
    return lambda clip: all(check(clip) for check in checks)


def _boolean(text: str, name: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ReviewError(f"{name} must be true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


def _level(text: str) -> int | None:
    if text == "none":
        return None
    if not text.isdigit():
        raise ReviewError(f"motion_level must be a level number or none, got {text!r}")
    return int(text)


def _facets(clips: list[dict]) -> dict:
    """The values each filter can take, over every clip (the page's drop-down lists)."""
    return {
        "film": sorted({c["film"] for c in clips}),
        "reason": sorted({r for c in clips for r in c["reject_reasons"]}),
        "caption_status": sorted({c["caption_status"] or "pending" for c in clips}),
        "motion_level": sorted({c["motion_level"] for c in clips if c["motion_level"] is not None}),
        "character": sorted({n for c in clips for n in c["characters"] or []}),
        "decision": [ACCEPT, REJECT, UNREVIEWED],
    }


# ---------------------------------------------------------------- HTTP


class ReviewHandler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "animegamer-review"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_HEAD(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _answer(self, handle) -> None:
        self._unread = self._body_length()
        try:
            self._check_host()
            handle()
        except NotFound as exc:
            self._json({"error": str(exc)}, HTTPStatus.NOT_FOUND)
        except ReviewError as exc:
            self._json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except _Refused as exc:
            self._json({"error": str(exc)}, exc.status)
        except Exception as exc:
            log.error("%s %s failed:\n%s", self.command, self.path, traceback.format_exc())
            self._json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.INTERNAL_SERVER_ERROR)
        finally:
            self._discard_body()

    def _body_length(self) -> int | None:
        """The bytes of body the request declares, or None where they cannot be known (chunked,
        a bad Content-Length): then the connection is closed after the answer."""
        if self.headers.get("Transfer-Encoding"):
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None
        return length if length >= 0 else None

    def _discard_body(self) -> None:
        """A request refused before its body was read (a foreign origin, a wrong content type, a
        wrong path) still sent that body: on a kept-alive connection the next request would be
        parsed from it. Read it away, or close the connection where it is too long or unknown."""
        if self._keeps_connection():
            if self._unread:
                self.rfile.read(self._unread)
        else:
            self.close_connection = True
        self._unread = 0

    def _keeps_connection(self) -> bool:
        return self._unread is not None and self._unread <= MAX_BODY

    def _read_body(self) -> bytes:
        if not self._keeps_connection():
            raise _Refused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"send the body with a Content-Length of at most {MAX_BODY} bytes",
            )
        body, self._unread = self.rfile.read(self._unread or 0), 0
        return body

    def _check_host(self) -> None:
        allowed = {f"{HOST}:{self.server.port}", f"localhost:{self.server.port}"}
        if self.headers.get("Host") not in allowed:
            raise _Refused(
                HTTPStatus.FORBIDDEN,
                f"this server answers only requests to {HOST}:{self.server.port}",
            )
        origin = self.headers.get("Origin")
        if origin is not None and origin not in {f"http://{a}" for a in allowed}:
            raise _Refused(HTTPStatus.FORBIDDEN, f"requests from {origin} are not accepted")

    def _get(self) -> None:
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(PAGE.read_bytes(), "text/html; charset=utf-8")
        elif url.path == "/api/clips":
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=False).items()}
            self._json(self.server.app.clips(query))
        elif media := _MEDIA.match(url.path):
            data = self.server.app.media(media["clip_id"], media["kind"])
            kind = "video/mp4" if media["kind"] == "mp4" else "image/jpeg"
            self._send_media(data, kind)
        elif url.path == "/favicon.ico":
            self._send(b"", "image/x-icon", HTTPStatus.NO_CONTENT)
        else:
            raise NotFound(f"no such page: {url.path}")

    def _post(self) -> None:
        if urlsplit(self.path).path != "/api/review":
            raise NotFound(f"no such endpoint: POST {self.path}")
        if self.headers.get_content_type() != "application/json":
            raise _Refused(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "send the decision as Content-Type: application/json",
            )
        try:
            body = json.loads(self._read_body() or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ReviewError(f"the body is not valid JSON ({exc})") from None
        self._json(self.server.app.review(body))

    def _send_media(self, data: bytes, kind: str) -> None:
        """Whole, or the one byte range a media element asks for (browsers seek with ranges)."""
        ranged = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range") or "")
        if not ranged or not (ranged[1] or ranged[2]):
            self._send(data, kind, extra={"Accept-Ranges": "bytes"})
            return
        size = len(data)
        start, end = ranged[1], ranged[2]
        first = int(start) if start else max(0, size - int(end))
        last = min(int(end), size - 1) if start and end else size - 1
        if first >= size or first > last:
            self._send(
                b"",
                kind,
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                {"Content-Range": f"bytes */{size}"},
            )
            return
        self._send(
            data[first : last + 1],
            kind,
            HTTPStatus.PARTIAL_CONTENT,
            {"Accept-Ranges": "bytes", "Content-Range": f"bytes {first}-{last}/{size}"},
        )

    def _json(self, data, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(json.dumps(data, default=str).encode(), "application/json", status)

    def _send(
        self, data: bytes, kind: str, status: HTTPStatus = HTTPStatus.OK, extra: dict | None = None
    ) -> None:
        self.send_response(status)
        if not self._keeps_connection():
            self.send_header("Connection", "close")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def log_error(self, format: str, *args) -> None:
        log.warning("%s " + format, self.address_string(), *args)


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 resets connections when a page or a script sends a
    # burst of requests (thumbnails, parallel decisions)
    request_queue_size = 128

    def __init__(self, app: ReviewApp, port: int = DEFAULT_PORT):
        super().__init__((HOST, port), ReviewHandler)
        self.app = app

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"


def make_server(path: str | Path, port: int = DEFAULT_PORT, ip: str | None = None) -> ReviewServer:
    """The server for a film or dataset folder (port 0: any free port); `serve_forever()` runs it."""
    return ReviewServer(ReviewApp(path, ip), port)


__all__ = ["DEFAULT_PORT", "DatasetError", "ReviewApp", "ReviewServer", "make_server"]
