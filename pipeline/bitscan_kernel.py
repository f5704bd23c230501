"""The compiled scan behind pipeline/bitscan.py (its docstring says what it does and why).

Compiled by numba for the CPU it runs on, on first use in a process (about 2 s), and cached with
`cache=True`: numba writes the machine code next to this file (`__pycache__`) when that folder
is writable, else under the user's cache folder (or NUMBA_CACHE_DIR), never into a read-only
install; a cache entry is keyed by this file's timestamp and by the CPU's name and features, so a
changed kernel or another machine compiles afresh, and entries are written whole (a temporary
file renamed), so processes compiling at once do not break each other's.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

BASE_BLOCK = 2048  # codes per cache block: 2048 x 4 words x 8 bytes = 64 KiB
SPAN = 256  # codes whose smallest filter distance is tested at once
FILTER_WORDS = 3  # the filter's words: 192 of 256 bits, a random pair passes about once in 1e12


@intrinsic
def popcount(typingctx, value):
    """The LLVM bit count (llvm.ctpop): one instruction, vectorised where the CPU has one."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@njit(inline="always", cache=True)
def distance(words, i, j):
    total = np.uint64(0)
    for w in range(words.shape[0]):
        total += popcount(words[w, i] ^ words[w, j])
    return total


@njit(inline="always", cache=True)
def filter_distance(words, j, lo, hi):
    """The smallest distance over the first words between query j and codes lo..hi-1: at most
    the full distance of each. Unsigned indices: the loop has no negative-index branch, so LLVM
    vectorises it."""
    smallest = np.uint64(1 << 30)
    w0 = words[0]
    a0 = w0[j]
    if words.shape[0] >= FILTER_WORDS:
        w1, w2 = words[1], words[2]
        a1, a2 = w1[j], w2[j]
        for i in range(np.uint64(lo), np.uint64(hi)):
            d = popcount(w0[i] ^ a0) + popcount(w1[i] ^ a1) + popcount(w2[i] ^ a2)
            smallest = min(smallest, d)
    elif words.shape[0] == 2:
        w1 = words[1]
        a1 = w1[j]
        for i in range(np.uint64(lo), np.uint64(hi)):
            smallest = min(smallest, popcount(w0[i] ^ a0) + popcount(w1[i] ^ a1))
    else:
        for i in range(np.uint64(lo), np.uint64(hi)):
            smallest = min(smallest, popcount(w0[i] ^ a0))
    return smallest


@njit(parallel=True, nogil=True, cache=True)
def pairs_within(words, blocks, end, query_block, max_bits, found, counts):
    """For each query block b (queries blocks[b] up to the next block or `end`), every code
    i < j within max_bits of a query j, into found[b] as (i, j, bits) up to its capacity;
    counts[b] is the number of pairs, those past the capacity included. `words` is words x
    codes: each 64-bit word of every code in one contiguous row."""
    capacity = found.shape[1]
    limit = np.uint64(max_bits)
    for b in prange(blocks.shape[0]):
        q0 = blocks[b]
        q1 = min(q0 + query_block, end)
        n = 0
        for base in range(0, q1 - 1, BASE_BLOCK):  # a block of codes stays in cache ...
            for j in range(q0, q1):  # ... while every query of the block walks it
                top = min(base + BASE_BLOCK, j)
                for lo in range(base, top, SPAN):
                    hi = min(lo + SPAN, top)
                    if filter_distance(words, j, lo, hi) > limit:
                        continue  # exact: no code of the stretch is within the distance
                    for i in range(lo, hi):
                        d = distance(words, i, j)
                        if d <= limit:
                            if n < capacity:
                                found[b, n, 0] = i
                                found[b, n, 1] = j
                                found[b, n, 2] = d
                            n += 1
        counts[b] = n
