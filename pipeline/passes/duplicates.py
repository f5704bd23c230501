"""Near-duplicate clips of a dataset folder: an exact search, the kept-copy rule, and the folder's
index (OUT/quality_index.parquet) that lets a later pass search only what is new.

The rule (docs/quality.md): two clips are near-duplicates when the mean Hamming distance of their
frame hashes is at most `duplicate_max_distance`; clips of one scene of one film are never
compared, nor clips of one film when `duplicate_within_film` is off; clips hashed with another
number of frames are compared only among themselves. Only clips fit on their own take part.
Clips are visited in the order (film name, film id, start frame, clip id), and a clip is a
duplicate of the first kept clip it matches.

That rule depends only on which pairs of clips match, so the search and the choice are separate:
- `near_pairs` finds every pair within the distance that involves a new clip: the mean distance of
  k 64-bit hashes is at most d exactly when the distance of their 64k-bit concatenation is at most
  k*d, an exact range search over binary codes (pipeline/passes/bitscan.py: a compiled scan with an
  exact 3-word filter; an index, faiss's multi-index hashing, was slower at this radius, a fifth
  of the bits; docs/quality.md has the figures);
- `choose_kept` then takes the pairs in visiting order: linear in the number of pairs.

The index keeps, per clip, the keys the rule needs, its hashes, whether it was fit and the
decision the pass stored, and the pairs found so far; per film, the stamp of its summary.json. A
film whose stamp is unchanged is not read again and its pairs with other such films are reused:
adding a film searches its clips against the rest (n x N, not N^2). The index records the
distance its pairs are complete to (its radius): new clips are searched to that radius even when
the thresholds ask for less, so going back to a larger distance (calibrate) can still trust it. It is one Parquet file
written whole and atomically (one object on object storage, uploaded by the working copy), so a
reader sees the old index or the new one; a missing, unreadable or outdated index is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.film import FilmFolder, FolderError
from core.io import read_table_with_state, write_table_with_state
from pipeline.passes.bitscan import range_pairs
from stages.quality import RejectConfig

INDEX_FILE = "quality_index.parquet"
INDEX_STATE_KEY = "animegamer.quality_index"  # its state in the file's schema metadata
# 2: only fit clips are searched (`searched`); 3: the radius is the one every pair is complete to
# (a version 2 index may hold clips searched to less than its radius)
INDEX_VERSION = "3"

INDEX_SCHEMA = pa.schema(
    [
        pa.field("clip_id", pa.string()),
        pa.field("folder", pa.string()),  # the film folder's name under the dataset folder
        pa.field("film_name", pa.string()),
        pa.field("film_id", pa.string()),
        pa.field("scene_index", pa.int64()),
        pa.field("start_frame", pa.int64()),
        pa.field("quality_hashes", pa.list_(pa.int64())),
        pa.field("fit", pa.bool_()),  # no reason of its own, under the index's thresholds
        pa.field("searched", pa.bool_()),  # fit when the index was written: its pairs are in it
        pa.field("usable", pa.bool_()),  # the decision the pass stored in the shards
        pa.field("reject_reasons", pa.list_(pa.string())),
        pa.field("duplicate_of", pa.string()),
        pa.field("near", pa.list_(pa.string())),  # earlier-indexed clips within the radius
        pa.field("near_bits", pa.list_(pa.int32())),  # their distances, in bits
    ]
)
CLIP_COLUMNS = INDEX_SCHEMA.names[:-2]


@dataclass
class Pairs:
    """Matching pairs as row positions of one clip table, and their distances in bits."""

    first: np.ndarray
    second: np.ndarray
    bits: np.ndarray

    @classmethod
    def empty(cls) -> Pairs:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))

    def __add__(self, other: Pairs) -> Pairs:
        return Pairs(
            np.concatenate([self.first, other.first]),
            np.concatenate([self.second, other.second]),
            np.concatenate([self.bits, other.bits]),
        )

    def __len__(self) -> int:
        return len(self.first)

    def among(self, rows: np.ndarray) -> Pairs:
        """The pairs whose two rows are both marked in `rows`."""
        keep = rows[self.first] & rows[self.second]
        return Pairs(self.first[keep], self.second[keep], self.bits[keep])


def film_stamp(film: Path) -> str | None:
    """What identifies a film's clips: its summary.json without what passes over it rewrite
    (quality, captions) and without timings. None (always re-read) when it has none."""
    try:
        summary = FilmFolder(film).read_summary()
    except FolderError:
        return None
    if summary is None:
        return None
    facts = {
        "film": summary.film.to_dict(),
        "fingerprint": summary.fingerprint,
        "ip": summary.ip,
        "complete": summary.complete,
        "clips_written": summary.clips_written,
        "schema_version": summary.schema_version,
        "shards": sorted(p.name for p in FilmFolder(film).shards.glob("*.parquet")),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


class QualityIndex:
    """The folder's index as it was last written (empty when there is none to trust)."""

    def __init__(self, table: pa.Table, state: dict):
        self.table = table
        self.state = state

    @classmethod
    def load(cls, root: Path, thresholds: RejectConfig) -> QualityIndex:
        """The index of `root`; an empty one when missing, unreadable, of another version, or
        searched with a smaller distance than `thresholds` needs (its pairs would miss some)."""
        empty = cls(INDEX_SCHEMA.empty_table(), {})
        stored = read_table_with_state(Path(root) / INDEX_FILE, INDEX_STATE_KEY)
        if stored is None:
            return empty
        table, state = stored
        usable = state.get("version") == INDEX_VERSION and table.schema.equals(INDEX_SCHEMA)
        if not usable or state.get("radius", -1.0) < thresholds.duplicate_max_distance:
            return empty
        return cls(table, state)

    def stamp(self, folder: str) -> str | None:
        return self.state.get("stamps", {}).get(folder)

    def search_distance(self, thresholds: RejectConfig, reusing: bool) -> float:
        """The distance a pass searches new clips to. While stored pairs are reused it is the
        index's own distance (at least the thresholds'): its pairs stay complete to the distance
        it records, so a later pass at any distance up to that can trust them. A pass that reuses
        nothing searches to the thresholds' distance only (the index is rebuilt there)."""
        wanted = thresholds.duplicate_max_distance
        return max(self.state.get("radius", wanted), wanted) if reusing else wanted

    def same_thresholds(self, thresholds: RejectConfig) -> bool:
        return self.state.get("thresholds") == asdict(thresholds)

    def rows_of(self, folders: Sequence[str]) -> pa.Table:
        """The index rows of these film folders (with their pairs), in the index's order."""
        keep = pc.is_in(self.table.column("folder"), value_set=pa.array(list(folders), pa.string()))
        return self.table.filter(keep)

    def clips_of(self, folders: Sequence[str]) -> pa.Table:
        return self.rows_of(folders).select(CLIP_COLUMNS)

    def searched(self, clips: pa.Table) -> np.ndarray:
        """Per row of `clips`: the index holds its pairs with every other clip it marks so."""
        ids = self.table.filter(self.table.column("searched")).column("clip_id")
        return pc.is_in(clips.column("clip_id"), value_set=ids).to_numpy(zero_copy_only=False)

    def save(
        self,
        root: Path,
        clips: pa.Table,
        pairs: PairIds,
        thresholds: RejectConfig,
        stamps: dict,
        radius: float,
    ) -> Path:
        """Write the index of `clips` (their decisions as now stored in the shards) and `pairs`,
        every pair among the clips searched within `radius` (the mean bits a hash)."""
        state = {
            "version": INDEX_VERSION,
            "thresholds": asdict(thresholds),
            "radius": radius,
            "stamps": {name: stamp for name, stamp in stamps.items() if stamp is not None},
        }
        clips = clips.select(CLIP_COLUMNS)
        searched = clips.schema.get_field_index("searched")
        clips = clips.set_column(searched, "searched", clips.column("fit"))  # what was searched
        table = _with_pairs(clips, pairs).cast(INDEX_SCHEMA)
        return write_table_with_state(table, Path(root) / INDEX_FILE, INDEX_STATE_KEY, state)


def stored_pairs(indexed: pa.Table, clips: pa.Table) -> Pairs:
    """The pairs the index rows `indexed` hold, as positions in `clips`; a pair whose other clip
    is not in `clips` (its film is gone or searched again) is left out."""
    counts = pc.list_value_length(indexed.column("near")).fill_null(0).to_numpy()
    if not counts.sum():
        return Pairs.empty()
    ids = clips.column("clip_id")
    first = pc.index_in(pc.list_flatten(indexed.column("near")), value_set=ids)
    second = pc.index_in(indexed.column("clip_id"), value_set=ids).to_numpy(zero_copy_only=False)
    second = np.repeat(second, counts)
    bits = pc.list_flatten(indexed.column("near_bits")).to_numpy().astype(np.int32)
    present = first.is_valid().to_numpy(zero_copy_only=False)
    first = first.fill_null(0).to_numpy()
    return Pairs(first[present].astype(np.int64), second[present].astype(np.int64), bits[present])


@dataclass
class PairIds:
    """Pairs by clip id, which stay valid while the rows of a clip table are rebuilt."""

    first: pa.Array
    second: pa.Array
    bits: np.ndarray

    @classmethod
    def of(cls, pairs: Pairs, clips: pa.Table) -> PairIds:
        ids = clips.column("clip_id").combine_chunks()
        return cls(ids.take(pa.array(pairs.first)), ids.take(pa.array(pairs.second)), pairs.bits)


def _with_pairs(clips: pa.Table, pairs: PairIds) -> pa.Table:
    """`clips` with each pair listed on its second clip (near, near_bits)."""
    ids = clips.column("clip_id")
    second = pc.index_in(pairs.second, value_set=ids).to_numpy(zero_copy_only=False)
    order = np.argsort(second, kind="stable")
    offsets = np.searchsorted(second[order], np.arange(len(clips) + 1)).astype(np.int32)
    near = pa.ListArray.from_arrays(pa.array(offsets), pairs.first.take(pa.array(order)))
    bits = pa.array(pairs.bits[order], pa.int32())
    near_bits = pa.ListArray.from_arrays(pa.array(offsets), bits)
    return clips.append_column("near", near).append_column("near_bits", near_bits)


# ----------------------------------------------------------------------------- search


def near_pairs(
    clips: pa.Table,
    new: np.ndarray,
    thresholds: RejectConfig,
    taking_part: np.ndarray | None = None,
    distance: float | None = None,
) -> Pairs:
    """Every pair within `distance` (the mean bits a hash; `duplicate_max_distance` by default)
    that involves a clip marked `new`, among the clips `taking_part` (all by default), clips of
    one scene of one film left out; clips are compared only with clips of as many hashes."""
    if distance is None:
        distance = thresholds.duplicate_max_distance
    lengths = pc.list_value_length(clips.column("quality_hashes")).fill_null(0).to_numpy()
    if taking_part is not None:
        lengths = np.where(taking_part, lengths, 0)
    film = category_codes(clips.column("film_id"))
    scene = clips.column("scene_index").to_numpy()
    found = Pairs.empty()
    for width in sorted(set(lengths[new & (lengths > 0)].tolist())):
        members = np.flatnonzero(lengths == width)
        # the old clips first, then the new: each new clip is searched against what precedes it
        members = np.concatenate([members[~new[members]], members[new[members]]])
        codes = _binary_codes(clips.column("quality_hashes").take(pa.array(members)), width)
        first_new = int((~new[members]).sum())
        local = _range_pairs(codes, first_new, radius_bits(distance, width))
        first, second = members[local.first], members[local.second]
        differ = (film[first] != film[second]) | (scene[first] != scene[second])
        found = found + Pairs(first[differ], second[differ], local.bits[differ])
    return found


def radius_bits(distance: float, width: int) -> int:
    """The most bits two codes of `width` hashes may differ by with `bits / width <= distance`,
    the rule's own comparison (`choose_kept`): floor(distance * width) can be one short, as
    8.2 * 15 is 122.99999999999999 in floating point while 123 / 15 <= 8.2."""
    bits = math.floor(distance * width)
    while (bits + 1) / width <= distance:
        bits += 1
    while bits >= 0 and bits / width > distance:
        bits -= 1
    return bits


def _range_pairs(codes: np.ndarray, start: int, max_bits: int) -> Pairs:
    """Pairs (i, j), i < j, j >= start, of rows of `codes` at most `max_bits` apart."""
    first, second, bits = range_pairs(codes, start, max_bits)
    return Pairs(first, second, bits)


def _binary_codes(hashes: pa.ChunkedArray, width: int) -> np.ndarray:
    values = pc.list_flatten(hashes).to_numpy().astype(np.int64)
    return values.reshape(-1, width)


def category_codes(column: pa.ChunkedArray) -> np.ndarray:
    """Each value's number among the distinct values of `column` (equal values, equal codes)."""
    return pc.dictionary_encode(column).combine_chunks().indices.to_numpy()


# ----------------------------------------------------------------------------- the kept copy


def choose_kept(clips: pa.Table, fit: np.ndarray, pairs: Pairs, thresholds: RejectConfig) -> list:
    """duplicate_of per row of `clips` (a clip_id or None), by the visiting-order rule."""
    widths = pc.list_value_length(clips.column("quality_hashes")).fill_null(0).to_numpy()
    film = category_codes(clips.column("film_id"))
    first, second = pairs.first, pairs.second
    close = pairs.bits / np.maximum(widths[second], 1) <= thresholds.duplicate_max_distance
    keep = close & fit[first] & fit[second]
    if not thresholds.duplicate_within_film:
        keep &= film[first] != film[second]
    return kept_copies(clips, first[keep], second[keep])


def kept_copies(clips: pa.Table, a: np.ndarray, b: np.ndarray) -> list:
    """duplicate_of per row of `clips` (a clip_id or None) from matching pairs of rows (a[k],
    b[k]): taken in visiting order, a clip is a duplicate of the first kept clip it matches.
    The one kept-copy rule of the pHash and the semantic (pipeline/passes/similar.py) passes."""
    position = visiting_order(clips)
    early = np.where(position[a] < position[b], a, b)
    late = np.where(position[a] < position[b], b, a)
    order = np.lexsort((position[early], position[late]))
    duplicate: dict[int, int] = {}
    for later, earlier in zip(late[order].tolist(), early[order].tolist()):
        if later not in duplicate and earlier not in duplicate:  # the first kept clip it matches
            duplicate[later] = earlier
    ids = clips.column("clip_id").to_pylist()
    result: list = [None] * len(clips)
    for later, earlier in duplicate.items():
        result[later] = ids[earlier]
    return result


def visiting_order(clips: pa.Table) -> np.ndarray:
    """Each row's rank in the order (film name, film id, start frame, clip id)."""
    keys = ["film_name", "film_id", "start_frame", "clip_id"]
    rows = pc.sort_indices(clips, sort_keys=[(k, "ascending") for k in keys]).to_numpy()
    position = np.empty(len(rows), np.int64)
    position[rows] = np.arange(len(rows))
    return position
