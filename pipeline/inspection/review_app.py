"""The review page's application: the clips under a film or dataset folder, filtered and paged
(GET /api/clips), their media, and decisions checked, recorded and applied (POST /api/review).
It knows nothing of HTTP (review_server.py answers the requests with it) and reads the shards
through review_snapshot.py."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.film import FilmFolder
from core.io import write_table_atomic
from pipeline.data.manifest import reviewed_manifest, shard_table
from pipeline.data.review import (
    ACCEPT,
    DECISIONS,
    EDITABLE_FIELDS,
    REJECT,
    Review,
    ReviewError,
    ReviewStore,
    apply_review,
    check_decision,
    review_counts,
)
from pipeline.inspection.explore import Film, film_ip, open_dataset
from pipeline.inspection.review_snapshot import (
    MEASURED,
    Listing,
    Snapshot,
    column_or_nulls,
    contains,
    read_snapshot,
    review_stamps,
    shard_signature,
)
from stages.base import registered_scores
from stages.captioning.parsing import ParseError, check_character_names, check_state_value
from stages.quality import RejectConfig, quality_measures
from stages.scoring.scores import Score, filter_names, matches, passes, score_filter

MAX_NOTE = 2000
FILTERS = ("film", "usable", "reason", "caption_status", "motion_level", "character", "decision")
PAGING = ("offset", "limit")
UNREVIEWED = "none"  # decision=none lists the clips nobody decided on yet


class NotFound(LookupError):
    """An unknown clip id or path; answered with 404 and the message."""


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
        self._snapshot = read_snapshot(self.root, open_dataset(self.root))
        self._sheets: dict[str, list[str]] = {}
        self._stores: dict[str, ReviewStore] = {}
        self._listed: Listing | None = None

    # ---- reading

    def snapshot(self) -> Snapshot:
        """The current clips: shards rewritten by a pipeline run since are read again."""
        with self._lock:
            if shard_signature(self.root, self._snapshot.dataset) != self._snapshot.signature:
                self._snapshot = read_snapshot(self.root, open_dataset(self.root))
            return self._snapshot

    def clips(self, query: dict[str, str]) -> dict:
        """GET /api/clips: a page of the clips passing the filters, with facets and counts."""
        known = filters_taken()
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
        match = clip_filter(filters)  # checks every filter's value first
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

    def _listing(self, snapshot: Snapshot) -> Listing:
        """The decisions, the reviewed rows, the review counts and the facets: built once per
        state of the shards and the review files."""
        key = (snapshot.signature, review_stamps(snapshot))
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
        listing = Listing(key, reviews, reviewed, counts, _facets(snapshot, reviewed))
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

    def sheet(self, slug: str, snapshot: Snapshot | None = None) -> list[str]:
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
    from pipeline.data.ip import ManifestError

    try:
        return list(_ip_protagonists(ip_name or film_ip(film)))
    except ManifestError:
        named = film.manifest_table.column("characters").to_pylist()
        return sorted({name for names in named if names for name in names})


@functools.lru_cache(maxsize=64)
def _ip_protagonists(name: str | None) -> list[str]:
    """An IP's protagonists, its manifest read once per server (not once per film)."""
    from pipeline.data.ip import load_ip

    return [p.name for p in load_ip(name).protagonists]


def _clip_json(slug: str, row: dict, review: Review | None, thresholds: RejectConfig) -> dict:
    """A clip as the page sees it: the shown columns as reviewed, what the review changed, and
    the automatic flags with the measured values beside their thresholds."""
    auto_usable = True if row.get("usable") is None else bool(row["usable"])
    auto_reasons = list(row.get("reject_reasons") or [])
    measures = quality_measures(row, thresholds, auto_reasons)
    seen = {k: v for k, v in apply_review(row, review).items() if k not in MEASURED}
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


def filters_taken() -> list[str]:
    """The filters GET /api/clips takes: the page's own and every declared score's
    (stages/scoring/scores.py: `camera_motion=pan_left`, `clarity_min=0.5`)."""
    return [*FILTERS, *filter_names(registered_scores())]


def clip_filter(query: dict[str, str]):
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


def _matching(snapshot: Snapshot, listing: Listing, query: dict[str, str], match) -> np.ndarray:
    """Which rows pass the filters (the same filters as `clip_filter`, which judges the
    reviewed rows): the stored columns are compared as columns, then each reviewed row is judged
    as the page sees it."""
    table, count = snapshot.table, snapshot.table.num_rows
    keep = np.ones(count, bool)
    if "film" in query:
        first, end = snapshot.rows_of(query["film"])
        keep[:first] = keep[end:] = False
    if "usable" in query:
        usable = column_or_nulls(table, "usable").fill_null(True).to_numpy(zero_copy_only=False)
        keep &= usable == _boolean(query["usable"], "usable")
    if "reason" in query:
        keep &= contains(column_or_nulls(table, "reject_reasons"), query["reason"])
    if "caption_status" in query:
        status = column_or_nulls(table, "caption_status").fill_null("pending")
        keep &= pc.equal(status, query["caption_status"]).to_numpy(zero_copy_only=False)
    if "motion_level" in query:
        level, levels = _level(query["motion_level"]), column_or_nulls(table, "motion_level")
        same = pc.is_null(levels) if level is None else pc.equal(levels, level).fill_null(False)
        keep &= same.to_numpy(zero_copy_only=False)
    if "character" in query:
        keep &= contains(column_or_nulls(table, "characters"), query["character"])
    if "decision" in query:
        keep &= query["decision"] == UNREVIEWED  # what the rows nobody reviewed have
    for score, kind, value in _score_conditions(query):
        keep &= matches(kind, value, column_or_nulls(table, score.column))
    for row, clip in listing.reviewed.items():
        keep[row] = match(clip)
    return keep


def _facets(snapshot: Snapshot, reviewed: dict[int, dict]) -> dict:
    """The values each filter can take, over every clip as the page sees it (its drop-down
    lists): the stored columns of the rows nobody reviewed, and the reviewed rows."""
    table = snapshot.table
    others = np.ones(table.num_rows, bool)
    others[list(reviewed)] = False
    mask = pa.array(others)

    def stored(name: str, flatten: bool = False) -> set:
        column = column_or_nulls(table, name).filter(mask)
        if flatten and not pa.types.is_null(column.type):
            column = pc.list_flatten(column)
        return set(pc.unique(column).to_pylist()) - {None}

    clips = reviewed.values()
    scores = registered_scores()
    statuses = {c["caption_status"] or "pending" for c in clips}
    statuses |= set(pc.unique(column_or_nulls(table, "caption_status").filter(mask)).to_pylist())
    return {
        "film": sorted(snapshot.slugs),
        "reason": sorted(
            stored("reject_reasons", True) | {r for c in clips for r in c["reject_reasons"]}
        ),
        "caption_status": sorted({s or "pending" for s in statuses}),
        "motion_level": sorted(
            set(pc.unique(column_or_nulls(table, "motion_level")).to_pylist()) - {None}
        ),
        "character": sorted(
            stored("characters", True) | {n for c in clips for n in c.get("characters") or []}
        ),
        "decision": [ACCEPT, REJECT, UNREVIEWED],
        **{
            s.column: sorted(stored(s.column) | {c.get(s.column) for c in clips} - {None})
            for s in scores
            if not s.is_number
        },
        "scores": [_score_facet(s, column_or_nulls(table, s.column)) for s in scores],
    }


def _score_facet(score: Score, values: pa.ChunkedArray) -> dict:
    """What the page builds a score's filter from: its name, its labels or its range."""
    facet: dict[str, Any] = {"column": score.column, "label": score.label}
    if not score.is_number:
        return facet | {"labels": list(score.labels)}
    if pa.types.is_null(values.type):
        return facet | {"min": None, "max": None}
    low_high = pc.min_max(values)
    return facet | {"min": low_high["min"].as_py(), "max": low_high["max"].as_py()}
