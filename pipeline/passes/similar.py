"""Semantic duplicates of a dataset folder: every pair of clips whose CLIP embeddings
(stages/scoring/clip_scores.py, `clip_embedding`) are at least `reject.similar_min_cosine` alike, found
incrementally, so that a folder of a million clips takes a new film in seconds.

pHash (pipeline/passes/duplicates.py) finds re-encodes of the same frames; an embedding also
matches a recap that re-crops and re-times a scene, reused animation under new credits, and an
opening sung over the same footage in another episode. The pass only finds pairs; the folder's
quality pass (pipeline/passes/quality.py) decides, with the pHash pass's kept-copy rule, and marks
the later copy `similar` with `duplicate_of` (docs/scores.md).

The search is exact. Cosines are first computed in bfloat16 (torch's matrix product, fast on
the CPU), keeping every pair within `BF16_MARGIN` of the threshold: rounding unit vectors to
bfloat16 moves their dot product by at most 2^-7 (each factor's relative error is at most 2^-8,
and the sum of |a_i b_i| is at most 1), the product's own rounding to bfloat16 by 2^-8 more,
and the threshold's by 2^-8: under the margin. Those candidates are then recomputed in float32
from the stored float16 values, and a pair is kept at `cos >= radius`.

The index (OUT/similar_index/) holds, per film folder, its clips' float16 embeddings (a .npy file,
mapped from disk) and ids (.ids.json), written when the film is first seen or has changed, and
`pairs.parquet`: every pair found at or above the index's radius (the smallest cosine it is
complete to), with the stamp of each film (pipeline/passes/duplicates.py film_stamp) in its
metadata. A pass reads the shards of new or changed films only, searches their clips against every
other clip (n x N products over the other films' files, GROUP_ROWS rows at a time, so memory stays
at one group), and rewrites the small pairs file; films gone or changed lose their pairs and file.
Every file is written atomically.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.film import SHARDS_DIR
from core.io import publish, write_json_atomic, write_table_atomic
from core.shards import shard_paths
from pipeline.passes.duplicates import category_codes, kept_copies

INDEX_DIR = "similar_index"
PAIRS_FILE = "pairs.parquet"
INDEX_VERSION = "1"
EMBEDDING = "clip_embedding"  # stages/scoring/clip_scores.py's column
BF16_MARGIN = 0.02  # above the 2^-7 + 2^-8 that bfloat16 rounding can move a cosine
ROW_BLOCK = 4096  # query rows per product
GROUP_ROWS = 32768  # indexed rows per product: 4096 x 32768 float32 cosines are 512 MiB

PAIRS_SCHEMA = pa.schema(
    [
        pa.field("first", pa.string()),
        pa.field("second", pa.string()),
        pa.field("first_folder", pa.string()),
        pa.field("second_folder", pa.string()),
        pa.field("cosine", pa.float32()),
    ]
)


@dataclass
class SimilarPairs:
    """Pairs of clips by id, with their cosine."""

    first: list[str]
    second: list[str]
    cosine: np.ndarray

    def __len__(self) -> int:
        return len(self.first)


@dataclass
class Block:
    """One film folder's clips with an embedding: ids and unit float16 embeddings (rows)."""

    folder: str
    ids: list[str]
    embeddings: np.ndarray


def find_similar(
    root: Path, films: dict[str, Path], stamps: dict[str, str | None], min_cosine: float
) -> SimilarPairs:
    """Every pair of clips of `films` (index key -> film folder) at `min_cosine` or more, from
    the index of `root` where a film's stamp is unchanged, searching only the others."""
    index = SimilarIndex.load(Path(root), min_cosine)
    reused = {k for k, stamp in stamps.items() if stamp and index.stamps.get(k) == stamp}
    reused &= set(index.files)
    fresh = [read_block(key, films[key]) for key in sorted(set(films) - reused)]
    fresh = [block for block in fresh if len(block.ids)]
    if not fresh and not reused and not index.files:
        return SimilarPairs([], [], np.zeros(0, np.float32))  # no clip has an embedding
    radius = min(index.radius, min_cosine) if reused else min_cosine
    kept = index.pairs.filter(_both_in(index.pairs, reused))
    found = [kept] + _search(fresh, [index.block(k) for k in sorted(reused)], radius)
    pairs = pa.concat_tables(found)
    index.save(root, fresh, reused, pairs, radius, stamps)
    close = pc.greater_equal(pairs.column("cosine"), pa.scalar(min_cosine, pa.float32()))
    pairs = pairs.filter(close)
    return SimilarPairs(
        pairs.column("first").to_pylist(),
        pairs.column("second").to_pylist(),
        pairs.column("cosine").to_numpy(),
    )


def read_block(key: str, film: Path) -> Block:
    """A film's clips that have an embedding, from its shards (that column and the ids only)."""
    ids: list[str] = []
    rows: list[np.ndarray] = []
    for path in shard_paths(film / SHARDS_DIR):
        if EMBEDDING not in pq.read_schema(path).names:
            continue
        table = pq.read_table(path, columns=["clip_id", EMBEDDING])
        table = table.filter(pc.is_valid(table.column(EMBEDDING)))
        if not table.num_rows:
            continue
        ids += table.column("clip_id").to_pylist()
        column = table.column(EMBEDDING).combine_chunks()
        width = pc.list_value_length(column).to_numpy()
        if (width != width[0]).any():
            raise ValueError(f"{path}: clip embeddings of different sizes (two CLIP models?)")
        rows.append(pc.list_flatten(column).to_numpy().reshape(len(width), int(width[0])))
    embeddings = np.concatenate(rows).astype(np.float16) if rows else np.zeros((0, 0), np.float16)
    return Block(key, ids, embeddings)


def similar_copies(
    clips: pa.Table, fit: np.ndarray, taken: list, pairs: SimilarPairs, within_film: bool
) -> list:
    """duplicate_of per row of the quality pass's clip table (a clip_id or None) from the
    similar pairs, by the pHash pass's kept-copy rule, among the clips fit on their own and not
    already a pHash duplicate (`taken`); clips of one scene of one film are never matched, nor
    clips of one film without `within_film`."""
    ids = clips.column("clip_id")
    a = pc.index_in(pa.array(pairs.first, pa.string()), value_set=ids)
    b = pc.index_in(pa.array(pairs.second, pa.string()), value_set=ids)
    present = pc.and_(a.is_valid(), b.is_valid()).to_numpy(zero_copy_only=False)
    a = a.fill_null(0).to_numpy(zero_copy_only=False)[present]
    b = b.fill_null(0).to_numpy(zero_copy_only=False)[present]
    free = fit & np.array([d is None for d in taken], bool)
    film = category_codes(clips.column("film_id"))
    scene = clips.column("scene_index").to_numpy()
    keep = free[a] & free[b] & ((film[a] != film[b]) | (scene[a] != scene[b]))
    if not within_film:
        keep &= film[a] != film[b]
    return kept_copies(clips, a[keep], b[keep])


# ----------------------------------------------------------------------------- search


def _search(fresh: list[Block], old: list[Block], radius: float) -> list[pa.Table]:
    """Pairs among the fresh blocks, and between each fresh and each old block."""
    if not fresh:
        return []
    new = _concat(fresh)
    found = [_pairs_within(new, radius)]
    group: list[Block] = []
    for block in old:  # old films in groups: one product per GROUP_ROWS rows, not per film
        group.append(block)
        if sum(len(b.ids) for b in group) >= GROUP_ROWS or block is old[-1]:
            found.append(_pairs_between(new, _concat(group), radius))
            group = []
    return found


def _concat(blocks: list[Block]) -> tuple[np.ndarray, list[str], list[str]]:
    embeddings = np.concatenate([b.embeddings for b in blocks])
    ids = [i for b in blocks for i in b.ids]
    folders = [b.folder for b in blocks for _ in b.ids]
    return embeddings, ids, folders


def _pairs_within(new, radius: float) -> pa.Table:
    """Pairs (i < j) among the rows of `new`."""
    embeddings, ids, folders = new
    firsts, seconds, cosines = [], [], []
    for start in range(0, len(ids), ROW_BLOCK):
        stop = min(start + ROW_BLOCK, len(ids))
        # row i of this block against rows [0, stop): the pairs whose later row is i
        i, j, cos = _close(embeddings[start:stop], embeddings[:stop], radius)
        later = i + start
        keep = j < later
        firsts.append(j[keep])
        seconds.append(later[keep])
        cosines.append(cos[keep])
    return _pairs_table(ids, folders, ids, folders, firsts, seconds, cosines)


def _pairs_between(new, old, radius: float) -> pa.Table:
    """Pairs of an old row (first) and a new row (second)."""
    embeddings, ids, folders = new
    old_embeddings, old_ids, old_folders = old
    firsts, seconds, cosines = [], [], []
    for start in range(0, len(ids), ROW_BLOCK):
        i, j, cos = _close(embeddings[start : start + ROW_BLOCK], old_embeddings, radius)
        firsts.append(j)
        seconds.append(i + start)
        cosines.append(cos)
    return _pairs_table(old_ids, old_folders, ids, folders, firsts, seconds, cosines)


def _close(queries: np.ndarray, rows: np.ndarray, radius: float):
    """(query row, row, cosine) of every pair at `radius` or more: a bfloat16 product keeps the
    candidates, float32 decides."""
    import torch

    if not len(queries) or not len(rows):
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.float32)
    # stored blocks are read-only Arrow buffers: torch takes a writable copy
    q = torch.from_numpy(np.require(queries, requirements=["C", "W"]))
    r = torch.from_numpy(np.require(rows, requirements=["C", "W"]))
    rough = q.to(torch.bfloat16) @ r.to(torch.bfloat16).T
    floor = torch.tensor(radius - BF16_MARGIN, dtype=torch.bfloat16)
    rows_i, rows_j = torch.nonzero(rough >= floor, as_tuple=True)
    i, j = rows_i.numpy(), rows_j.numpy()
    exact = np.einsum(
        "nd,nd->n", queries[i].astype(np.float32), rows[j].astype(np.float32), dtype=np.float32
    )
    keep = exact >= radius
    return i[keep], j[keep], exact[keep]


def _pairs_table(first_ids, first_folders, second_ids, second_folders, firsts, seconds, cosines):
    first = np.concatenate(firsts) if firsts else np.zeros(0, np.int64)
    second = np.concatenate(seconds) if seconds else np.zeros(0, np.int64)
    return pa.table(
        {
            "first": pa.array(first_ids, pa.string()).take(pa.array(first)),
            "second": pa.array(second_ids, pa.string()).take(pa.array(second)),
            "first_folder": pa.array(first_folders, pa.string()).take(pa.array(first)),
            "second_folder": pa.array(second_folders, pa.string()).take(pa.array(second)),
            "cosine": pa.array(np.concatenate(cosines) if cosines else [], pa.float32()),
        },
        schema=PAIRS_SCHEMA,
    )


def _both_in(pairs: pa.Table, folders: set[str]) -> pa.ChunkedArray:
    value_set = pa.array(sorted(folders), pa.string())
    return pc.and_(
        pc.is_in(pairs.column("first_folder"), value_set=value_set),
        pc.is_in(pairs.column("second_folder"), value_set=value_set),
    )


# ----------------------------------------------------------------------------- the index


class SimilarIndex:
    """OUT/similar_index/ as last written (empty when missing, unreadable, of another version,
    or complete to a higher cosine than the pass needs)."""

    def __init__(self, folder: Path, state: dict, pairs: pa.Table):
        self.folder = folder
        self.pairs = pairs
        self.radius = float(state.get("radius", 1.0))
        self.stamps: dict[str, str] = state.get("stamps", {})
        self.files: dict[str, str] = state.get("files", {})

    @classmethod
    def load(cls, root: Path, min_cosine: float) -> SimilarIndex:
        folder = root / INDEX_DIR
        empty = cls(folder, {}, PAIRS_SCHEMA.empty_table())
        path = folder / PAIRS_FILE
        if not path.is_file():
            return empty
        try:
            pairs = pq.read_table(path)
            state = json.loads((pairs.schema.metadata or {})[b"animegamer.similar_index"])
        except (OSError, ValueError, KeyError, pa.ArrowException):
            return empty
        if state.get("version") != INDEX_VERSION or not pairs.schema.equals(PAIRS_SCHEMA):
            return empty
        if state.get("radius", 1.0) > min_cosine:  # its pairs would miss some
            return empty
        return cls(folder, state, pairs)

    def block(self, key: str) -> Block:
        """A film's stored block; its embeddings mapped from the file, read when used."""
        name = self.files[key]
        ids = json.loads((self.folder / f"{name}.ids.json").read_text())
        return Block(key, ids, np.load(self.folder / f"{name}.npy", mmap_mode="r"))

    def save(self, root, fresh, reused, pairs, radius, stamps) -> None:
        files = {k: name for k, name in self.files.items() if k in reused}
        for block in fresh:
            files[block.folder] = _write_block(self.folder, block)
        for stale in set(self.files.values()) - set(files.values()):
            for suffix in (".npy", ".ids.json"):
                (self.folder / f"{stale}{suffix}").unlink(missing_ok=True)
        state = {
            "version": INDEX_VERSION,
            "radius": radius,
            "stamps": {k: stamps[k] for k in files if stamps.get(k)},
            "files": files,
        }
        metadata = {b"animegamer.similar_index": json.dumps(state, sort_keys=True).encode()}
        write_table_atomic(pairs.replace_schema_metadata(metadata), self.folder / PAIRS_FILE)


def _write_block(folder: Path, block: Block) -> str:
    """A film's block as two files: its float16 embeddings (.npy, mapped from disk by later
    passes: no decoding) and its clip ids (.ids.json), each written aside and renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(block.folder.encode()).hexdigest()[:24]
    aside = folder / f"{name}.npy.tmp"
    with open(aside, "wb") as out:
        np.save(out, np.ascontiguousarray(block.embeddings, np.float16))
    publish(aside, folder / f"{name}.npy")
    write_json_atomic(block.ids, folder / f"{name}.ids.json")
    return name
