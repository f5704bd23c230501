"""The review page's server: a local web page to accept or reject clips and correct captions.

`serve(path, port)` serves, on 127.0.0.1 only, the page (pipeline/review_page.html), the clips'
media by clip id (`/media/<id>.mp4`, the H.264 bytes stored in the shard; `/media/<id>.jpg`, the
stored first frame), and a small JSON API that the page uses and scripts can use:

    GET  /api/clips?film=&usable=&reason=&caption_status=&motion_level=&character=&decision=
         &offset=&limit=   (a page of the matching clips; no limit: all of them)
         and the scores' filters (stages/scores.py): &camera_motion=pan_left&clarity_min=0.5...
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

import functools
import json
import logging
import os
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.film import SHARDS_DIR, FilmFolder
from core.io import write_table_atomic
from core.record import CAPTION_OK
from core.shards import read_table, shard_paths
from pipeline.explore import Dataset, DatasetError, Film, film_ip, open_dataset
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
from stages.base import registered_scores
from stages.captioning.parsing import ParseError, check_character_names, check_state_value
from stages.quality import RejectConfig, quality_measures
from stages.scores import filter_names, matches, passes, score_filter

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
    """The dataset as its shards were when last read; rebuilt when a shard changes. One Arrow
    table holds what the page shows of every clip (no Python object per clip), so that a million
    clips fit in memory and a request filters columns and turns only its page into JSON."""

    signature: tuple
    dataset: Dataset
    table: pa.Table  # every clip's shown columns and its film's slug ("film"): film, clip order
    starts: np.ndarray  # the first row of each film, in the order of `slugs`, then the end
    slugs: list[str]
    thresholds: dict[str, RejectConfig]  # film slug -> the thresholds that decided its clips
    captioned: dict[str, bool]  # film slug -> any clip captioned (else the page locks fields)

    def __post_init__(self) -> None:
        self._index = {slug: index for index, slug in enumerate(self.slugs)}

    def film(self, slug: str) -> Film:
        """A film by slug (Dataset.film looks through every film: a cost per film per call)."""
        return self.dataset.films[self._index[slug]]

    def rows_of(self, slug: str) -> tuple[int, int]:
        index = self._index[slug]
        return int(self.starts[index]), int(self.starts[index + 1])

    def film_at(self, row: int) -> str:
        return self.slugs[int(np.searchsorted(self.starts, row, side="right")) - 1]

    def locate(self, clip_id: str) -> int | None:
        """The row of a clip id, None when it is not under the folder."""
        row = pc.index(self.table.column("clip_id"), clip_id).as_py()
        return None if row < 0 else row

    def row(self, index: int) -> dict:
        return self.table.slice(index, 1).to_pylist()[0]

    def clip_ids(self, slug: str) -> list[str]:
        first, end = self.rows_of(slug)
        return self.table.column("clip_id").slice(first, end - first).to_pylist()


@dataclass
class _Listing:
    """The review state GET /api/clips filters with, for one state of the shards and review
    files: the decisions, the rows they change (`apply_review`, as the page sees them), counts
    and facets. Rows nobody reviewed are filtered on their columns as stored."""

    key: tuple
    reviews: dict[str, dict[str, Review]]  # film slug -> its decisions
    reviewed: dict[int, dict]  # row -> the reviewed clip, for the rows with a decision
    counts: dict[str, dict]
    facets: dict


def _review_stamps(snapshot: _Snapshot) -> tuple:
    """Each film's review.parquet as (size, mtime): a decision, here or elsewhere, changes it."""
    stamps = []
    for slug, film in zip(snapshot.slugs, snapshot.dataset.films):
        path = FilmFolder(film.path).review
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
            if self._signature(self._snapshot.dataset) != self._snapshot.signature:
                self._snapshot = self._read(open_dataset(self.root))
            return self._snapshot

    def _signature(self, dataset: Dataset) -> tuple:
        """The folder's shard files as they are now (each shard's time and size), and the times
        of the folders above the films, which change when a film folder is added or removed.
        One directory listing per film: globbing every shard below the root took 14 ms a
        request at 143 films."""
        root = self.root  # film paths are found under it: no resolving, a cost per film
        folders = {root}
        stamps: list[tuple] = []
        for film in dataset.films:
            path = Path(film.path)
            folders |= {p for p in path.parents if root in p.parents}
            try:
                with os.scandir(path / SHARDS_DIR) as entries:
                    shards = [e for e in entries if e.name.endswith(".parquet")]
                    stamps += sorted(
                        (e.path, e.stat().st_mtime_ns, e.stat().st_size) for e in shards
                    )
            except FileNotFoundError:
                stamps.append((str(path), None, None))
        for folder in sorted(folders):
            try:
                stamps.append((str(folder), folder.stat().st_mtime_ns, None))
            except FileNotFoundError:
                stamps.append((str(folder), None, None))
        return tuple(stamps)

    def _read(self, dataset: Dataset) -> _Snapshot:
        signature = self._signature(dataset)
        parts = [_shown_table(film) for film in dataset.films]
        slugs = [film.slug for film in dataset.films]
        sizes = [part.num_rows for part in parts]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        table = (  # one chunk per column: a page's `take` from 1,430 chunks took 30 ms
            pa.concat_tables(parts, promote_options="permissive").combine_chunks()
            if parts
            else pa.table({"clip_id": pa.array([], pa.string()), "film": pa.array([], pa.string())})
        )
        thresholds = {film.slug: film_thresholds(film.summary) for film in dataset.films}
        ok = (
            pc.equal(_column(table, "caption_status"), CAPTION_OK)
            .fill_null(False)
            .to_numpy(zero_copy_only=False)
        )
        captioned = {
            slug: bool(ok[first:end].any()) for slug, first, end in zip(slugs, starts, starts[1:])
        }
        return _Snapshot(signature, dataset, table, starts, slugs, thresholds, captioned)

    def clips(self, query: dict[str, str]) -> dict:
        """GET /api/clips: a page of the clips passing the filters, with facets and counts."""
        known = _filters()
        unknown = sorted(set(query) - set(known) - set(PAGING))
        if unknown:
            raise ReviewError(f"unknown filters {unknown} (filters: {', '.join(known)})")
        snapshot = self.snapshot()
        if "film" in query and query["film"] not in snapshot.slugs:
            raise ReviewError(
                f"film {query['film']!r} is not under {self.root} "
                f"(films: {', '.join(snapshot.slugs)})"
            )
        offset, limit = _paging(query)
        filters = {k: v for k, v in query.items() if k in known}
        match = _clip_filter(filters)  # checks every filter's value first
        listing = self._listing(snapshot)
        chosen = np.flatnonzero(_matching(snapshot, listing, filters, match))
        page = chosen[offset : None if limit is None else offset + limit]
        rows = snapshot.table.take(pa.array(page, pa.int64())).to_pylist()
        clips = []
        for row in rows:
            slug = row["film"]  # the snapshot's table carries each clip's film slug
            review = listing.reviews[slug].get(row["clip_id"])
            clips.append(_clip_json(slug, row, review, snapshot.thresholds[slug]))
        return {
            "root": str(self.root),
            "total": snapshot.table.num_rows,
            "matched": len(chosen),
            "offset": offset,
            "limit": limit,
            "clips": clips,
            "counts": listing.counts,
            "facets": listing.facets,
            "editable": list(EDITABLE_FIELDS),
            "sheets": {slug: self.sheet(slug, snapshot) for slug in snapshot.slugs},
            "captioned": snapshot.captioned,
        }

    def _listing(self, snapshot: _Snapshot) -> _Listing:
        """The decisions, the reviewed rows, the review counts and the facets: built once per
        state of the shards and the review files."""
        key = (snapshot.signature, _review_stamps(snapshot))
        with self._lock:
            if self._listed is not None and self._listed.key == key:
                return self._listed
        reviews = {slug: self.store(slug).load() for slug in snapshot.slugs}
        reviewed: dict[int, dict] = {}
        counts = {}
        for slug in snapshot.slugs:
            ids = snapshot.clip_ids(slug)
            counts[slug] = review_counts(reviews[slug], ids)
            first, _ = snapshot.rows_of(slug)
            for position, clip_id in enumerate(ids):
                if clip_id in reviews[slug]:
                    row = snapshot.row(first + position)
                    seen = apply_review(row, reviews[slug][clip_id])
                    reviewed[first + position] = {**seen, "film": slug}
        listing = _Listing(key, reviews, reviewed, counts, _facets(snapshot, reviewed))
        with self._lock:
            self._listed = listing
        return listing

    def media(self, clip_id: str, kind: str) -> bytes:
        snapshot = self.snapshot()
        if snapshot.locate(clip_id) is None:
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
        index = snapshot.locate(clip_id) if isinstance(clip_id, str) else None
        slug = snapshot.film_at(index) if index is not None else None
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
        assert slug is not None and index is not None and isinstance(clip_id, str)
        film = snapshot.film(slug)
        table = shard_table(film.folder)  # this film's rows, to rebuild its manifest
        counts = {}

        def rewrite_manifest(reviews: dict[str, Review]) -> None:
            write_table_atomic(reviewed_manifest(table, reviews), film.folder.manifest)
            counts[slug] = review_counts(reviews, snapshot.clip_ids(slug))

        review = self.store(slug).record(clip_id, decision, note, fields, rewrite_manifest)
        clip = _clip_json(slug, snapshot.row(index), review, snapshot.thresholds[slug])
        return {"clip": clip, "counts": counts}

    def store(self, slug: str) -> ReviewStore:
        """The review.parquet of a film (one store per film: it holds the film's lock)."""
        with self._lock:
            if slug not in self._stores:
                self._stores[slug] = ReviewStore(FilmFolder(self._snapshot.film(slug).path))
            return self._stores[slug]

    def sheet(self, slug: str, snapshot: _Snapshot | None = None) -> list[str]:
        """The names a clip of this film may be given: its IP's protagonists."""
        if slug not in self._sheets:
            film = (snapshot or self.snapshot()).film(slug)
            self._sheets[slug] = _protagonists(film, self.ip)
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
    from pipeline.ip import ManifestError

    try:
        return list(_ip_protagonists(ip_name or film_ip(film)))
    except ManifestError:
        named = film.manifest_table.column("characters").to_pylist()
        return sorted({name for names in named if names for name in names})


@functools.lru_cache(maxsize=64)
def _ip_protagonists(name: str | None) -> list[str]:
    """An IP's protagonists, its manifest read once per server (not once per film)."""
    from pipeline.ip import load_ip

    return [p.name for p in load_ip(name).protagonists]


def _filters() -> list[str]:
    """The filters GET /api/clips takes: the page's own and every declared score's."""
    return [*FILTERS, *filter_names(registered_scores())]


# What the page shows of a clip (besides its review): the light columns, read once per snapshot.
_SHOWN_COLUMNS = (
    "clip_id film_name clip_index scene_index start_time end_time start_frame end_frame "
    "num_frames fps width height status error motion_scope motion_level caption_status "
    "instruction num_characters"
).split() + [*EDITABLE_FIELDS, *QUALITY_COLUMNS]
_SHOWN_COLUMNS += [score.column for score in registered_scores()]
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
        "scores": [[s.label, s.shown(row.get(s.column))] for s in registered_scores()],
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
    for score, kind, value in _score_conditions(query):
        checks.append(functools.partial(_passes, score.column, kind, value))
    return lambda clip: all(check(clip) for check in checks)


def _passes(column: str, kind: str, value, clip: dict) -> bool:
    return passes(kind, value, clip.get(column))


def _score_conditions(query: dict[str, str]):
    try:
        return score_filter(registered_scores(), query)
    except ValueError as exc:
        raise ReviewError(str(exc)) from None


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


def _matching(snapshot: _Snapshot, listing: _Listing, query: dict[str, str], match) -> np.ndarray:
    """Which rows pass the filters (the same filters as `_clip_filter`, which judges the
    reviewed rows): the stored columns are compared as columns, then each reviewed row is judged
    as the page sees it."""
    table, count = snapshot.table, snapshot.table.num_rows
    keep = np.ones(count, bool)
    if "film" in query:
        first, end = snapshot.rows_of(query["film"])
        keep[:first] = keep[end:] = False
    if "usable" in query:
        usable = _column(table, "usable").fill_null(True).to_numpy(zero_copy_only=False)
        keep &= usable == _boolean(query["usable"], "usable")
    if "reason" in query:
        keep &= _contains(_column(table, "reject_reasons"), query["reason"])
    if "caption_status" in query:
        status = _column(table, "caption_status").fill_null("pending")
        keep &= pc.equal(status, query["caption_status"]).to_numpy(zero_copy_only=False)
    if "motion_level" in query:
        level, levels = _level(query["motion_level"]), _column(table, "motion_level")
        same = pc.is_null(levels) if level is None else pc.equal(levels, level).fill_null(False)
        keep &= same.to_numpy(zero_copy_only=False)
    if "character" in query:
        keep &= _contains(_column(table, "characters"), query["character"])
    if "decision" in query:
        keep &= query["decision"] == UNREVIEWED  # what the rows nobody reviewed have
    for score, kind, value in _score_conditions(query):
        keep &= matches(kind, value, _column(table, score.column))
    for row, clip in listing.reviewed.items():
        keep[row] = match(clip)
    return keep


def _column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """A column, or nulls where no shard has it (older shards, uncaptioned films)."""
    if name in table.column_names:
        return table.column(name)
    return pa.chunked_array([pa.nulls(table.num_rows)])


def _contains(lists: pa.ChunkedArray, value: str) -> np.ndarray:
    """Per row: its list holds `value`."""
    found = np.zeros(len(lists), bool)
    if pa.types.is_null(lists.type) or not len(lists):
        return found
    lists = lists.combine_chunks()
    parents = pc.list_parent_indices(lists).to_numpy()
    hits = pc.equal(pc.list_flatten(lists), value).fill_null(False).to_numpy(zero_copy_only=False)
    found[parents[hits]] = True
    return found


def _facets(snapshot: _Snapshot, reviewed: dict[int, dict]) -> dict:
    """The values each filter can take, over every clip as the page sees it (its drop-down
    lists): the stored columns of the rows nobody reviewed, and the reviewed rows."""
    table = snapshot.table
    others = np.ones(table.num_rows, bool)
    others[list(reviewed)] = False
    mask = pa.array(others)

    def stored(name: str, flatten: bool = False) -> set:
        column = _column(table, name).filter(mask)
        if flatten and not pa.types.is_null(column.type):
            column = pc.list_flatten(column)
        return set(pc.unique(column).to_pylist()) - {None}

    clips = reviewed.values()
    scores = registered_scores()
    statuses = {c["caption_status"] or "pending" for c in clips}
    statuses |= set(pc.unique(_column(table, "caption_status").filter(mask)).to_pylist())
    return {
        "film": sorted(snapshot.slugs),
        "reason": sorted(
            stored("reject_reasons", True) | {r for c in clips for r in c["reject_reasons"]}
        ),
        "caption_status": sorted({s or "pending" for s in statuses}),
        "motion_level": sorted(set(pc.unique(_column(table, "motion_level")).to_pylist()) - {None}),
        "character": sorted(
            stored("characters", True) | {n for c in clips for n in c.get("characters") or []}
        ),
        "decision": [ACCEPT, REJECT, UNREVIEWED],
        **{
            s.column: sorted(stored(s.column) | {c.get(s.column) for c in clips} - {None})
            for s in scores
            if not s.is_number
        },
        "scores": [_score_facet(s, _column(table, s.column)) for s in scores],
    }


def _score_facet(score, values: pa.ChunkedArray) -> dict:
    """What the page builds a score's filter from: its name, its labels or its range."""
    facet: dict[str, Any] = {"column": score.column, "label": score.label}
    if not score.is_number:
        return facet | {"labels": list(score.labels)}
    if pa.types.is_null(values.type):
        return facet | {"min": None, "max": None}
    low_high = pc.min_max(values)
    return facet | {"min": low_high["min"].as_py(), "max": low_high["max"].as_py()}


def _shown_table(film: Film) -> pa.Table:
    """What the page shows of a film's clips (the shown columns its shards have), in clip order,
    with the film's slug."""
    parts = []
    for path in shard_paths(film.folder.shards):
        present = set(pq.read_schema(path).names)
        parts.append(read_table(path, columns=[c for c in _SHOWN_COLUMNS if c in present]))
    if not parts:
        return pa.table({"clip_id": pa.array([], pa.string()), "film": pa.array([], pa.string())})
    table = pa.concat_tables(parts, promote_options="permissive")
    if "clip_index" in table.column_names:
        table = table.sort_by("clip_index")
    return table.append_column("film", pa.array([film.slug] * table.num_rows, pa.string()))


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
