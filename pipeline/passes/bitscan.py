"""Exact range search over binary codes: every pair of rows at most `max_bits` bits apart.

The near-duplicate rule (docs/quality.md) needs every pair of clips whose concatenated frame
hashes (4 x 64 bits) are within 48 bits. No index beats a scan at that radius (a fifth of the
bits; pipeline/passes/duplicates.py), so this is a scan made as cheap as a scan can be:
- a compiled kernel (numba, built for this machine's CPU: with AVX-512 VPOPCNTDQ the inner loop
  is 8 codes per vector instruction; without it LLVM emits what the CPU has, same results);
- the codes are stored word by word (one contiguous array per 64-bit word), so the inner loop
  reads each word of 8 consecutive codes with one load;
- an exact filter: the distance over the first 3 words is at most the full distance, so a
  stretch of `SPAN` codes whose smallest 3-word distance to the query exceeds `max_bits` holds no
  pair; only the rare stretch that passes is scanned again over every word;
- cache blocking: a block of queries walks the codes in blocks that stay in the core's cache.

`range_pairs` is the one entry point, used by the pass from scratch and by the incremental pass
(new clips against the rest) alike. A small search (a film's or a short folder's clips, up to
`SMALL_SEARCH` codes) is made by numpy instead, in the kernel's order, so that the pass never
pays for importing numba and loading the compiled kernel (about 2 CPU-s, in the driver at the
end of every run, while the other cores wait: issue 39).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

QUERY_BLOCK = 64  # queries that walk the codes together (one parallel task)
SEARCH_BLOCK = 8192  # queries per kernel call: bounds the memory of one call's results
FIRST_CAPACITY = 256  # pairs a query block may hold before it is searched again with room
# codes that numpy searches instead of the kernel: 512 against each other in about 10 ms; fewer
# than the kernel's cache block (2,048), so both give their pairs in the same order
SMALL_SEARCH = 512
_threads: int | None = None  # the scan's thread limit while a folder pass runs (search_threads)
_restore: int | None = None  # numba's thread count before that limit, once it was applied


def range_pairs(codes: np.ndarray, start: int, max_bits: int) -> tuple[np.ndarray, ...]:
    """Pairs (i, j), i < j, j >= start, of rows of `codes` (n x words, uint64 or int64) at most
    `max_bits` apart: (first, second, bits) arrays, in (query block, then found) order."""
    words = np.ascontiguousarray(np.asarray(codes).view(np.uint64).T)  # words x n
    count = words.shape[1]
    parts = [(np.zeros(0, np.int64),) * 2 + (np.zeros(0, np.int32),)]
    if max_bits < 0 or count < 2 or words.shape[0] == 0:
        return parts[0]
    if count <= SMALL_SEARCH:
        parts.append(_small_search(words, max(start, 1), max_bits))
    else:
        kernel = _kernel()
        for begin in range(max(start, 1), count, SEARCH_BLOCK):
            end = min(begin + SEARCH_BLOCK, count)
            blocks = np.arange(begin, end, QUERY_BLOCK, dtype=np.int64)
            parts.append(_search(kernel, words, blocks, end, max_bits))
    first, second, bits = (np.concatenate(column) for column in zip(*parts))
    return first, second, bits.astype(np.int32)


def _small_search(words: np.ndarray, start: int, max_bits: int) -> tuple:
    """The kernel's pairs by numpy, in the kernel's order when all codes fit one of its cache
    blocks: by query j, then by code i < j."""
    firsts, seconds, distances = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    for j in range(start, words.shape[1]):
        bits = np.bitwise_count(words[:, :j] ^ words[:, j : j + 1]).sum(axis=0, dtype=np.int64)
        near = np.flatnonzero(bits <= max_bits)
        firsts.append(near)
        seconds.append(np.full(len(near), j, np.int64))
        distances.append(bits[near])
    return np.concatenate(firsts), np.concatenate(seconds), np.concatenate(distances)


@contextmanager
def search_threads(num_cpus: int | None) -> Iterator[None]:
    """Scans started by this thread meanwhile use at most `num_cpus` threads (`run.num_cpus`):
    numba's parallel loop otherwise takes one thread per CPU of the machine, whatever the run's
    share of it. None: no change. numba is not imported for it: where it is not yet, the limit
    is set when a search first needs the kernel."""
    global _threads, _restore
    if not num_cpus:
        yield
        return
    before = _threads
    _threads = num_cpus
    if "numba" in sys.modules:
        _limit_kernel_threads()
    try:
        yield
    finally:
        _threads = before
        if _restore is not None:
            sys.modules["numba"].set_num_threads(_restore)
            _restore = None


def _limit_kernel_threads() -> None:
    """Hold numba's parallel loop to `_threads` (when set), keeping the count it had for
    `search_threads` to restore."""
    global _restore
    if not _threads:
        return
    import numba

    from pipeline.passes.bitscan_kernel import numba_config

    if _restore is None:
        _restore = numba.get_num_threads()
    numba.set_num_threads(max(1, min(_threads, numba_config.NUMBA_NUM_THREADS)))


def _search(kernel, words: np.ndarray, blocks: np.ndarray, end: int, max_bits: int) -> tuple:
    """The pairs of the query blocks starting at `blocks` (each ends at the next or at `end`);
    a block that found more pairs than it had room for is searched again with room for all."""
    found = np.zeros((len(blocks), FIRST_CAPACITY, 3), np.int64)
    counts = np.zeros(len(blocks), np.int64)
    kernel(words, blocks, end, QUERY_BLOCK, max_bits, found, counts)
    full = np.flatnonzero(counts > FIRST_CAPACITY)
    rows = [found[b, : counts[b]] for b in range(len(blocks))]
    for b in full:  # rare: a block of queries with many near-copies among the codes
        again = np.zeros((1, counts[b], 3), np.int64)
        kernel(words, blocks[b : b + 1], end, QUERY_BLOCK, max_bits, again, counts[b : b + 1])
        rows[b] = again[0]
    pairs = np.concatenate(rows)
    return pairs[:, 0], pairs[:, 1], pairs[:, 2]


def _kernel():
    """The compiled kernel. Imported here, so that a process that never searches (a Ray worker,
    a command that only reads) never imports numba; compiled on first use and cached on disk
    (pipeline/passes/bitscan_kernel.py says where)."""
    from pipeline.passes.bitscan_kernel import pairs_within

    _limit_kernel_threads()  # search_threads' limit, restored when its block ends
    return pairs_within
