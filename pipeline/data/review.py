"""Manual review: a person's decision about a clip, and the rule by which it wins.

A film folder's `review.parquet` holds one row per reviewed clip: the decision (accept or reject),
a note, the caption fields the person corrected, and when. It is written by the review page
(pipeline/inspection/review_server.py, which checks each correction with the caption parser's own domain
rules) and read wherever clips are used, so that decisions win everywhere:

- `effective_quality` is the one rule for usability: a rejected clip is not usable (reason
  `review`), an accepted one is usable whatever the automatic flags said, an unreviewed one keeps
  the automatic flags;
- `apply_review` turns a clip row as the pipeline wrote it into the row a consumer sees: the
  corrected fields replace the model's, the instruction is rebuilt from them, and the row gains
  `review_decision`. The manifest (pipeline/data/manifest.py) and the trainer
  (trainer/shared/data.py) both go through it; the shards keep the model's own answers.

Decisions are keyed by clip id, which depends only on the film and the clip settings: a rerun of
the pipeline, a motion re-calibration or a re-caption rewrites shards but never review.parquet, so
every decision about a clip that still exists keeps applying. Decisions about clips that no longer
exist (other clip settings) stay in the file, unused, and are counted as such.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from core import storage
from core.film import FilmFolder
from core.io import write_table_atomic
from core.record import caption_status_for
from core.schema import caption_arrow_field
from core.vocabulary import CAPTION_FIELD, EDITABLE_FIELDS, REVIEW
from prompts.game import row_instruction

REVIEW_VERSION = "1"

ACCEPT = "accept"
REJECT = "reject"
DECISIONS = (ACCEPT, REJECT)

# The automatic quality flags, where the shards carry them (older shards do not: their clips
# count as usable with no reasons).
QUALITY_COLUMNS = ("usable", "reject_reasons", "duplicate_of")

REVIEW_SCHEMA = pa.schema(
    [
        pa.field("clip_id", pa.string(), nullable=False),
        pa.field("decision", pa.string(), nullable=False),
        pa.field("note", pa.string()),
        pa.field("corrected", pa.list_(pa.string()), nullable=False),
        # the caption fields a person may correct: the characters and the game state's seven
        # fields (stages/captioning/parsing.py checks each value, as it checks the model's)
        *(caption_arrow_field(CAPTION_FIELD[name]) for name in EDITABLE_FIELDS),
        pa.field("reviewed_at", pa.timestamp("ms", tz="UTC"), nullable=False),
    ],
    metadata={"animegamer.review_version": REVIEW_VERSION},
)


class ReviewError(ValueError):
    """A decision that cannot be recorded as given; the message says what to change."""


@dataclass(frozen=True)
class Review:
    clip_id: str
    decision: str
    note: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """The corrected caption fields (a subset of EDITABLE_FIELDS) with their checked values."""
    reviewed_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def to_row(self) -> dict:
        return {
            "clip_id": self.clip_id,
            "decision": self.decision,
            "note": self.note,
            "corrected": sorted(self.fields, key=EDITABLE_FIELDS.index),
            **{name: self.fields.get(name) for name in EDITABLE_FIELDS},
            "reviewed_at": self.reviewed_at,
        }

    @classmethod
    def from_row(cls, row: dict) -> Review:
        return cls(
            clip_id=row["clip_id"],
            decision=row["decision"],
            note=row["note"],
            fields={name: row[name] for name in row["corrected"]},
            reviewed_at=row["reviewed_at"],
        )

    def to_json(self) -> dict:
        return {
            "decision": self.decision,
            "note": self.note,
            "fields": self.fields,
            "reviewed_at": self.reviewed_at.isoformat(),
        }


# ---------------------------------------------------------------- the rules


def effective_quality(
    usable: bool | None, reasons: Iterable[str] | None, decision: str | None
) -> tuple[bool, list[str]]:
    """(usable, reject reasons) of a clip once its review decision is taken into account.

    `usable` and `reasons` are the automatic flags (None: not computed, which counts as usable
    with no reasons). A rejection makes the clip unusable and adds the reason `review`; an
    acceptance makes it usable with no reasons, overriding the automatic flags."""
    if decision == REJECT:
        return False, [*(r for r in reasons or () if r != REVIEW), REVIEW]
    if decision == ACCEPT:
        return True, []
    return (True if usable is None else bool(usable)), list(reasons or ())


def check_decision(decision) -> str:
    if decision not in DECISIONS:
        raise ReviewError(f"decision must be one of {list(DECISIONS)}, got {decision!r}")
    return decision


def apply_review(row: dict, review: Review | None) -> dict:
    """The clip row a consumer sees: corrected fields in place of the model's, the instruction
    rebuilt from them, usability by `effective_quality`, and `review_decision`. `row` is a shard
    or manifest row (usable / reject_reasons may be absent); it is not changed."""
    decision = review.decision if review else None
    usable, reasons = effective_quality(row.get("usable"), row.get("reject_reasons"), decision)
    seen = {**row, "usable": usable, "reject_reasons": reasons, "review_decision": decision}
    if decision and "caption_status" in row:  # what captioning will do with the clip now
        seen["caption_status"] = caption_status_for(usable, row["caption_status"])
    if review and review.fields:
        seen.update(review.fields)
        if "characters" in review.fields:
            seen["num_characters"] = len(review.fields["characters"])
        seen["instruction"] = row_instruction(seen) or row.get("instruction")
    return seen


def review_counts(reviews: dict[str, Review], clip_ids: Iterable[str]) -> dict[str, int]:
    """How many of `clip_ids` were reviewed, accepted, rejected and corrected, and how many
    decisions name a clip that is not among them (left from other clip settings)."""
    ids = set(clip_ids)
    current = [r for clip_id, r in reviews.items() if clip_id in ids]
    return {
        "clips": len(ids),
        "reviewed": len(current),
        "accepted": sum(r.decision == ACCEPT for r in current),
        "rejected": sum(r.decision == REJECT for r in current),
        "corrected": sum(bool(r.fields) for r in current),
        "stale": len(reviews) - len(current),
    }


# ---------------------------------------------------------------- review.parquet


def read_reviews(folder: FilmFolder) -> dict[str, Review]:
    """The decisions of a film folder by clip id ({} when nobody reviewed it yet)."""
    return read_review_file(folder.review)


def read_review_file(path: Path | str) -> dict[str, Review]:
    """The decisions in a review.parquet, local or in object storage ({} when there is none)."""
    if not storage.exists(path):
        return {}
    try:
        with storage.open_parquet(path) as parquet:
            table = parquet.read()
    except (OSError, pa.ArrowInvalid) as exc:
        raise ValueError(f"{path}: not a readable review file ({exc})") from None
    missing = set(REVIEW_SCHEMA.names) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: review file lacks columns {sorted(missing)}")
    return {row["clip_id"]: Review.from_row(row) for row in table.to_pylist()}


class ReviewStore:
    """The review.parquet of one film folder. Every change rewrites the file atomically under a
    lock: a thread lock for this process's requests, and an advisory file lock so that two
    processes (two review servers on one folder) never lose each other's decisions."""

    _thread_locks: ClassVar[dict[Path, threading.Lock]] = {}
    _guard = threading.Lock()

    def __init__(self, folder: FilmFolder):
        self.folder = folder
        with self._guard:
            self._lock = self._thread_locks.setdefault(folder.path.resolve(), threading.Lock())

    def load(self) -> dict[str, Review]:
        return read_reviews(self.folder)

    def record(
        self,
        clip_id: str,
        decision: str,
        note: str | None = None,
        fields: dict[str, Any] | None = None,
        on_change=None,
    ) -> Review:
        """Record a decision (fields already checked); earlier corrections of other fields are
        kept, a None field withdraws its correction, and a None note keeps the earlier note.
        `on_change(reviews)` runs inside the lock, after the file is written."""
        with self._lock, open(self.folder.review_lock, "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            reviews = self.load()  # re-read: another process may have written since
            earlier = reviews.get(clip_id)
            corrected = {**(earlier.fields if earlier else {}), **(fields or {})}
            review = Review(
                clip_id=clip_id,
                decision=check_decision(decision),
                note=note if note is not None else (earlier.note if earlier else None),
                fields={k: v for k, v in corrected.items() if v is not None},
            )
            reviews[clip_id] = review
            rows = [reviews[k].to_row() for k in sorted(reviews)]
            write_table_atomic(pa.Table.from_pylist(rows, schema=REVIEW_SCHEMA), self.folder.review)
            if on_change is not None:
                on_change(reviews)
            return review
