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
Every file is written atomically, and the pairs file, which names the blocks, is the index's
commit: written after the new blocks (named by film and stamp, never rewritten in place) and
before the stale ones go. On object storage the quality pass's working copy carries the folder
(pipeline/running/folder_passes.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.film import SHARDS_DIR
from core.io import publish, read_table_with_state, write_json_atomic, write_table_with_state
from core.shards import shard_paths
from pipeline.passes.duplicates import category_codes, kept_copies

if TYPE_CHECKING:
    import torch  # imported when a search runs: the quality pass without one does not load it

INDEX_DIR = "similar_index"
PAIRS_FILE = "pairs.parquet"
INDEX_STATE_KEY = "animegamer.similar_index"  # its state in the pairs file's schema metadata
INDEX_VERSION = "1"
BLOCK_SUFFIXES = (".npy", ".ids.json")
EMBEDDING = "clip_embedding"  # stages/scoring/clip_scores.py's column
BF16_MARGIN = 0.02  # above the 2^-7 + 2^-8 that bfloat16 rounding can move a cosine
ROW_BLOCK = 4096  # query rows per product
GROUP_ROWS = 32768  # indexed rows per product: 4096 x 32768 bfloat16 cosines are 256 MiB
PROGRESS_PAIRS = 10**10  # a search of this many pairs or more shows a bar (some 15 s here)

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
    root: Path,
    films: dict[str, Path],
    stamps: dict[str, str | None],
    min_cosine: float,
    progress: bool = False,
) -> SimilarPairs:
    """Every pair of clips of `films` (index key -> film folder) at `min_cosine` or more, from
    the index of `root` where a film's stamp is unchanged, searching only the others; with
    `progress`, a search of more than PROGRESS_PAIRS pairs draws a bar of the pairs compared."""
    index = SimilarIndex.load(Path(root), min_cosine)
    reused = {k for k, stamp in stamps.items() if stamp and index.stamps.get(k) == stamp}
    reused &= {k for k in index.files if index.holds(k)}
    fresh = [read_block(key, films[key]) for key in sorted(set(films) - reused)]
    fresh = [block for block in fresh if len(block.ids)]
    if not fresh and not reused and not index.files:
        return SimilarPairs([], [], np.zeros(0, np.float32))  # no clip has an embedding
    radius = min(index.radius, min_cosine) if reused else min_cosine
    kept = index.pairs.filter(_both_in(index.pairs, reused))
    found = [kept] + _search(fresh, [index.block(k) for k in sorted(reused)], radius, progress)
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


def _search(fresh: list[Block], old: list[Block], radius: float, progress: bool) -> list[pa.Table]:
    """Pairs among the fresh blocks, and between each fresh and each old block."""
    if not fresh:
        return []
    new = _Rows.of(fresh, adopt=True)
    pairs = len(new) * (len(new) - 1) // 2 + len(new) * sum(len(b.ids) for b in old)
    with _pairs_bar(pairs, progress) as bar:
        search = _Search(radius, bar.update)
        found = [search.within(new)]
        group: list[Block] = []
        for block in old:  # old films in groups: one product per GROUP_ROWS rows, not per film
            group.append(block)
            if sum(len(b.ids) for b in group) >= GROUP_ROWS or block is old[-1]:
                found.append(search.between(new, _Rows.of(group)))
                group = []
    return found


def _pairs_bar(pairs: int, progress: bool):
    """A bar of the clip pairs compared, for a search long enough to need one (a full pass over
    a large folder: 10^12 pairs at a million clips, the best part of an hour on two cores)."""
    from tqdm import tqdm

    shown = progress and pairs >= PROGRESS_PAIRS
    return tqdm(
        total=pairs,
        desc="semantic duplicates",
        unit=" pairs",
        unit_scale=True,
        disable=not shown,
        mininterval=0,  # drawn after each product: a tenth of a second or more at that size
        miniters=1,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )


@dataclass
class _Rows:
    """Clips searched together: their float16 embeddings (the exact values), the same in
    bfloat16 (a torch tensor, converted once: the rough products' input), ids and folders."""

    exact: np.ndarray
    rough: torch.Tensor
    ids: list[str]
    folders: list[str]

    @classmethod
    def of(cls, blocks: list[Block], adopt: bool = False) -> _Rows:
        """The blocks' rows, gathered. `adopt`: each block is left viewing its gathered rows as
        soon as they are copied, so its own copy is freed at once (a full pass at 1M clips then
        holds its embeddings twice at most, not three times); not for mapped blocks, whose
        rows should stay on disk."""
        import torch

        starts = np.cumsum([0] + [len(b.ids) for b in blocks])
        width = blocks[0].embeddings.shape[1]
        exact = np.empty((starts[-1], width), np.float16)  # no page touched yet
        for block, start, stop in zip(blocks, starts, starts[1:]):
            if block.embeddings.shape[1] != width:
                raise ValueError(
                    f"{block.folder}: clip embeddings of {block.embeddings.shape[1]} values, "
                    f"{blocks[0].folder}'s of {width} (two CLIP models?)"
                )
            exact[start:stop] = block.embeddings  # a mapped file is read here, once
            if adopt:
                block.embeddings = exact[start:stop]
        rough = torch.from_numpy(exact).to(torch.bfloat16)
        ids = [i for b in blocks for i in b.ids]
        folders = [b.folder for b in blocks for _ in b.ids]
        return cls(exact, rough, ids, folders)

    def __len__(self) -> int:
        return len(self.ids)


class _Search:
    """The products of one search at `radius`. Every product is written into one buffer: a fresh
    256 MiB result each time would cost the kernel's paging it in, half the product's time."""

    def __init__(self, radius: float, compared: Callable[[int], object]):
        import torch

        self.radius = radius
        self.compared = compared  # told the number of pairs each product compared
        self.floor = torch.tensor(radius - BF16_MARGIN, dtype=torch.bfloat16)
        self.buffer = torch.empty(0, dtype=torch.bfloat16)

    def within(self, new: _Rows) -> pa.Table:
        """Pairs (earlier row first) among the rows of `new`: each block of rows against the
        rows before it, GROUP_ROWS at a time, and against itself below the diagonal: every
        pair once."""
        firsts, seconds, cosines = [], [], []
        for start in range(0, len(new), ROW_BLOCK):
            stop = min(start + ROW_BLOCK, len(new))
            spans = [(c, min(c + GROUP_ROWS, start)) for c in range(0, start, GROUP_ROWS)]
            for first, last in [*spans, (start, stop)]:
                i, j, cos = self.close(new, (start, stop), new, (first, last), first == start)
                firsts.append(j + first)
                seconds.append(i + start)
                cosines.append(cos)
        return _pairs_table(new, new, firsts, seconds, cosines)

    def between(self, new: _Rows, old: _Rows) -> pa.Table:
        """Pairs of an old row (first) and a new row (second)."""
        firsts, seconds, cosines = [], [], []
        for start in range(0, len(new), ROW_BLOCK):
            stop = min(start + ROW_BLOCK, len(new))
            i, j, cos = self.close(new, (start, stop), old, (0, len(old)), False)
            firsts.append(j)
            seconds.append(i + start)
            cosines.append(cos)
        return _pairs_table(old, new, firsts, seconds, cosines)

    def close(self, queries: _Rows, q_span, rows: _Rows, r_span, diagonal: bool):
        """(query row, row, cosine), each counted from its span's start, of every pair at the
        radius or more: a bfloat16 product keeps the candidates, float32 decides. On the
        `diagonal` (the same span of the same rows) only pairs below it count."""
        import torch

        rough = self.product(queries.rough[slice(*q_span)], rows.rough[slice(*r_span)])
        if diagonal:
            rough.masked_fill_(torch.ones_like(rough, dtype=torch.bool).triu(), -torch.inf)
        side = len(rough)
        self.compared(side * (side - 1) // 2 if diagonal else rough.numel())
        hit = torch.nonzero(self.rows_reaching_floor(rough)).flatten()
        near_i, near_j = torch.nonzero(rough[hit] >= self.floor, as_tuple=True)  # few rows
        i, j = hit[near_i].numpy() + q_span[0], near_j.numpy() + r_span[0]
        exact = np.einsum(
            "nd,nd->n",
            queries.exact[i].astype(np.float32),
            rows.exact[j].astype(np.float32),
            dtype=np.float32,
        )
        keep = exact >= self.radius
        return i[keep] - q_span[0], j[keep] - r_span[0], exact[keep]

    def product(self, queries, rows):
        """queries x rows^T in bfloat16, in the buffer."""
        import torch

        size = len(queries) * len(rows)
        if self.buffer.numel() < size:
            self.buffer = torch.empty(size, dtype=torch.bfloat16)
        out = self.buffer[:size].view(len(queries), len(rows))
        return torch.matmul(queries, rows.T, out=out)

    def rows_reaching_floor(self, rough):
        """Which rows of `rough` hold a value at the floor or more. A positive bfloat16's bits
        read as an int16 sort as the number does, and every negative one reads below every
        positive one: above a positive floor, int16 maxima (four times quicker) decide."""
        import torch

        if self.floor <= 0:
            return rough.amax(dim=1) >= self.floor
        return rough.view(torch.int16).amax(dim=1) >= self.floor.view(torch.int16)


def _pairs_table(first: _Rows, second: _Rows, firsts, seconds, cosines) -> pa.Table:
    a = pa.array(np.concatenate(firsts) if firsts else np.zeros(0, np.int64))
    b = pa.array(np.concatenate(seconds) if seconds else np.zeros(0, np.int64))
    return pa.table(
        {
            "first": pa.array(first.ids, pa.string()).take(a),
            "second": pa.array(second.ids, pa.string()).take(b),
            "first_folder": pa.array(first.folders, pa.string()).take(a),
            "second_folder": pa.array(second.folders, pa.string()).take(b),
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
        stored = read_table_with_state(folder / PAIRS_FILE, INDEX_STATE_KEY)
        if stored is None:
            return empty
        pairs, state = stored
        if state.get("version") != INDEX_VERSION or not pairs.schema.equals(PAIRS_SCHEMA):
            return empty
        if state.get("radius", 1.0) > min_cosine:  # its pairs would miss some
            return empty
        return cls(folder, state, pairs)

    def holds(self, key: str) -> bool:
        """Whether a film's two files are there (a copy fetched from object storage may lack a
        block that an interrupted upload left out: that film is searched again)."""
        name = self.files[key]
        return all((self.folder / f"{name}{suffix}").is_file() for suffix in BLOCK_SUFFIXES)

    def block(self, key: str) -> Block:
        """A film's stored block; its embeddings mapped from the file, read when used."""
        name = self.files[key]
        ids = json.loads((self.folder / f"{name}.ids.json").read_text())
        return Block(key, ids, np.load(self.folder / f"{name}.npy", mmap_mode="r"))

    def save(self, root, fresh, reused, pairs, radius, stamps) -> None:
        """The new blocks, then the pairs file that names them (the index's commit), then the
        blocks it no longer names: at every moment the pairs file names blocks that exist."""
        files = {k: name for k, name in self.files.items() if k in reused}
        for block in fresh:
            files[block.folder] = _write_block(self.folder, block, stamps.get(block.folder))
        state = {
            "version": INDEX_VERSION,
            "radius": radius,
            "stamps": {k: stamps[k] for k in files if stamps.get(k)},
            "files": files,
        }
        write_table_with_state(pairs, self.folder / PAIRS_FILE, INDEX_STATE_KEY, state)
        for stale in set(self.files.values()) - set(files.values()):
            for suffix in BLOCK_SUFFIXES:
                (self.folder / f"{stale}{suffix}").unlink(missing_ok=True)


def _write_block(folder: Path, block: Block, stamp: str | None) -> str:
    """A film's block as two files: its float16 embeddings (.npy, mapped from disk by later
    passes: no decoding) and its clip ids (.ids.json), each written aside and renamed. Their
    name is the film's and its stamp's: a changed film's block is a new file, so an old pairs
    file (a copy in object storage while the new one uploads) never names a rewritten one."""
    folder.mkdir(parents=True, exist_ok=True)
    named = "\n".join([block.folder, stamp or "", *block.ids])
    name = hashlib.sha256(named.encode()).hexdigest()[:24]
    aside = folder / f"{name}.npy.tmp"
    with open(aside, "wb") as out:
        np.save(out, np.ascontiguousarray(block.embeddings, np.float16))
    publish(aside, folder / f"{name}.npy")
    write_json_atomic(block.ids, folder / f"{name}.ids.json")
    return name
