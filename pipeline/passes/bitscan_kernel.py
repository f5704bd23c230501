"""The compiled scan behind pipeline/passes/bitscan.py (its docstring says what it does and why).

Compiled by numba for the CPU it runs on, on first use in a process (about 2 s), and cached on
disk so later processes load it (about 0.5 s). numba picks the cache folder when a function is
decorated: NUMBA_CACHE_DIR if set, else `__pycache__` beside this file if a file can be written
there, else the user's cache folder (~/.cache/numba); it never writes into a read-only install.
Where none of these is writable (a read-only container whose user has no home) numba refuses to
decorate at all, so `compiled` then caches in a folder of this user's own under the temporary
folder, and compiles without a cache if even that cannot be used: the pass always runs. A cache
entry is keyed by this file's contents and by the CPU's name and features, so a changed kernel
or another machine compiles afresh, and entries are written whole (a temporary file renamed), so
processes compiling at once do not break each other's.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, prange, types
from numba.core import config
from numba.extending import intrinsic

numba_config: Any = config  # numba sets its settings at run time: no types to check


def _own_temp_cache() -> str | None:
    """A cache folder under the temporary folder that only this user can write (numba's cache
    holds pickles that are loaded: a folder others could write to would run their code)."""
    path = os.path.join(tempfile.gettempdir(), f"animegamer-numba-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    return path if mine and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else None


def compiled(**options) -> Callable:
    """numba's njit with an on-disk cache wherever one can be written (see above)."""

    def decorate(function: Callable) -> Callable:
        try:
            return njit(cache=True, **options)(function)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            pass
        fallback = None if numba_config.CACHE_DIR else _own_temp_cache()
        if fallback is not None:
            numba_config.CACHE_DIR = fallback  # read once, as the function is decorated
            try:
                return njit(cache=True, **options)(function)
            except RuntimeError:
                pass
            finally:
                numba_config.CACHE_DIR = ""
        return njit(cache=False, **options)(function)

    return decorate


BASE_BLOCK = 2048  # codes per cache block: 2048 x 4 words x 8 bytes = 64 KiB
SPAN = 256  # codes whose smallest filter distance is tested at once
FILTER_WORDS = 3  # the filter's words: 192 of 256 bits, a random pair passes about once in 1e12


@intrinsic
def popcount(typingctx, value):
    """The LLVM bit count (llvm.ctpop): one instruction, vectorised where the CPU has one."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@compiled(inline="always")
def distance(words, i, j):
    total = np.uint64(0)
    for w in range(words.shape[0]):
        total += popcount(words[w, i] ^ words[w, j])
    return total


@compiled(inline="always")
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


@compiled(parallel=True, nogil=True)
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
