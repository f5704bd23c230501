"""The duplicate search that scales (issue 20): exactly the rule of the scan it replaced, whatever
the order films arrive in, and a folder pass that reads only what is new."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_clip, write_film

from pipeline.passes.duplicates import (
    INDEX_FILE,
    INDEX_SCHEMA,
    choose_kept,
    near_pairs,
    radius_bits,
)
from pipeline.passes.quality import apply_quality
from stages.quality import RejectConfig, hamming


def scan(rows: list[dict], thresholds: RejectConfig) -> dict[str, str]:
    """The rule as the quadratic scan wrote it before the index: each clip, in visiting order,
    against every clip kept so far."""
    rows = sorted(
        (r for r in rows if r["fit"] and r["quality_hashes"]),
        key=lambda r: (r["film_name"], r["film_id"], r["start_frame"], r["clip_id"]),
    )
    # the clips kept so far, by hash count (a clip is compared only with those of its own), in
    # visiting order, and their hashes: each clip's distances to all of them at once, then the
    # first in order that the rule takes (one hamming call per clip, not per pair: issue 30)
    kept: dict[int, tuple[list[dict], np.ndarray]] = {}
    found = {}
    for row in rows:
        b = np.asarray(row["quality_hashes"], np.int64)
        others, codes = kept.get(len(b), ([], np.empty((0, len(b)), np.int64)))
        distances = hamming(codes, b).mean(axis=1)
        for k in np.flatnonzero(distances <= thresholds.duplicate_max_distance):
            other = others[k]
            if other["film_id"] == row["film_id"] and (
                not thresholds.duplicate_within_film or other["scene_index"] == row["scene_index"]
            ):
                continue
            found[row["clip_id"]] = other["clip_id"]
            break
        else:
            kept[len(b)] = ([*others, row], np.vstack([codes, b]))
    return found


def flipped(hashes: list[int], bits: int, rng) -> list[int]:
    """`hashes` with `bits` bits flipped, spread over the frames."""
    values = np.asarray(hashes, np.int64).view(np.uint64).copy()
    for position in rng.choice(64 * len(values), bits, replace=False):
        values[position // 64] ^= np.uint64(1) << np.uint64(position % 64)
    return values.view(np.int64).tolist()


def random_clips(rng, films: int = 6, per_film: int = 60) -> list[dict]:
    """Clips with random hashes, a fifth of them copies of another clip (in another film or the
    same one, same scene or not) at 0 to 60 bits, a few unfit, a few hashed with two frames."""
    rows = []
    for film in range(films):
        for k in range(per_film):
            width = 2 if k % 17 == 0 else 4
            rows.append(
                {
                    "clip_id": f"{film:02d}{k:04d}".ljust(32, "0"),
                    "film_name": f"ep{(film * 7) % films:02d}",
                    "film_id": f"film{film}",
                    "scene_index": k // 5,
                    "start_frame": 48 * k,
                    "quality_hashes": rng.integers(-(2**63), 2**63 - 1, width).tolist(),
                    "fit": bool(rng.random() > 0.05),
                }
            )
    for row in rng.choice(len(rows), len(rows) // 5, replace=False):
        source = rows[int(rng.integers(len(rows)))]
        bits = int(rng.choice([0, 10, 30, 47, 48, 49, 60]))
        hashes = source["quality_hashes"]
        if len(hashes) == len(rows[row]["quality_hashes"]):
            rows[row]["quality_hashes"] = flipped(hashes, min(bits, 64 * len(hashes)), rng)
    return rows


def as_table(rows: list[dict]) -> pa.Table:
    names = ["clip_id", "film_name", "film_id", "scene_index", "start_frame", "quality_hashes"]
    fields = [INDEX_SCHEMA.field(n) for n in names]
    return pa.Table.from_pylist([{n: r[n] for n in names} for r in rows], schema=pa.schema(fields))


@pytest.mark.parametrize("within_film", [True, False])
@pytest.mark.parametrize("distance", [12.0, 7.5])
def test_the_index_finds_exactly_what_the_scan_found(within_film, distance):
    rng = np.random.default_rng(5)
    rows = random_clips(rng)
    thresholds = RejectConfig(duplicate_max_distance=distance, duplicate_within_film=within_film)
    expected = scan(rows, thresholds)
    assert len(expected) > 15  # planted copies were found, across films and within them
    for shuffle in range(3):
        order = rng.permutation(len(rows)) if shuffle else np.arange(len(rows))
        shuffled = [rows[i] for i in order]
        table = as_table(shuffled)
        fit = np.array([r["fit"] for r in shuffled])
        # searched in two halves, as a pass that adds films searches only the new clips
        new = np.zeros(len(rows), bool)
        new[len(rows) // 2 :] = True
        pairs = near_pairs(table, ~new, thresholds) + near_pairs(table, new, thresholds)
        # the first search gives the old half's pairs; the second, those with a new clip
        chosen = choose_kept(table, fit, pairs, thresholds)
        found = {r["clip_id"]: d for r, d in zip(shuffled, chosen) if d}
        assert found == expected


def _folder(root: Path, rng, names: list[str]) -> dict[str, list]:
    """Film folders of synthetic clips under `root`; ep01's clips 0-3 are in ep00 as well (a
    shared opening, a few bits apart), ep02 repeats its own clip 1 as clip 7 (a recap)."""
    clips = {}
    base = [rng.integers(-(2**63), 2**63 - 1, 4).tolist() for _ in range(8)]
    for n, name in enumerate(names):
        own = [rng.integers(-(2**63), 2**63 - 1, 4).tolist() for _ in range(8)]
        if name in ("ep00", "ep01"):
            own[:4] = [flipped(h, 20 * n, rng) for h in base[:4]]
        if name == "ep02":
            own[7] = flipped(own[1], 8, rng)
        clips[name] = [
            make_clip(i, film_id=name, film_name=name, quality_hashes=h) for i, h in enumerate(own)
        ]
    for name in names:
        write_film(root / name, clips[name])
    return clips


def _decisions(root: Path) -> dict[str, tuple]:
    table = pa.concat_tables(
        pq.read_table(p, columns=["clip_id", "usable", "duplicate_of"])
        for p in sorted(root.glob("**/shards/*.parquet"))
    )
    return {r["clip_id"]: (r["usable"], r["duplicate_of"]) for r in table.to_pylist()}


def test_films_added_one_by_one_end_as_a_pass_over_all_of_them(tmp_path):
    rng = np.random.default_rng(3)
    names = ["ep00", "ep01", "ep02", "ep03"]
    whole = tmp_path / "whole"
    clips = _folder(whole, rng, names)
    outcome = apply_quality(whole, RejectConfig())
    expected = _decisions(whole)
    kept = {c.clip_id: c for c in clips["ep00"]}
    duplicates = {i: d for i, (_, d) in expected.items() if d}
    assert len(duplicates) == 5 and outcome.usable == 32 - 5
    assert {duplicates[c.clip_id] for c in clips["ep01"][:4]} <= set(kept)
    assert duplicates[clips["ep02"][7].clip_id] == clips["ep02"][1].clip_id
    assert (whole / INDEX_FILE).is_file()
    again = apply_quality(whole, RejectConfig())
    assert again.read_films == 0 and again.rewritten_films == 0 and _decisions(whole) == expected
    # the same films arriving one at a time, the kept copy's film last
    growing = tmp_path / "growing"
    growing.mkdir()
    for name in ["ep03", "ep01", "ep02", "ep00"]:
        shutil.copytree(whole / name, growing / name)
        outcome = apply_quality(growing, RejectConfig())
        assert outcome.read_films <= 2  # the new film, and one whose duplicates it changed
    assert _decisions(growing) == expected


def test_a_lost_or_damaged_index_is_rebuilt(tmp_path):
    rng = np.random.default_rng(4)
    root = tmp_path / "out"
    _folder(root, rng, ["ep00", "ep01"])
    apply_quality(root, RejectConfig())
    expected = _decisions(root)
    (root / INDEX_FILE).write_bytes(b"not parquet")
    assert apply_quality(root, RejectConfig()).read_films == 2 and _decisions(root) == expected
    # a wider distance than the index was searched with: searched again
    wider = apply_quality(root, RejectConfig(duplicate_max_distance=40.0))
    assert wider.read_films == 2 and wider.by_reason.get("duplicate", 0) >= 4


def test_hashes_that_differ_in_their_top_bit_are_counted_bit_by_bit():
    """numpy counts the bits of a signed value's absolute value: a near-copy whose hashes differ
    in a top bit read 63 bits away instead of 2, and was missed."""
    near = np.array([-(2**63) + 1, 5], np.int64)
    copy = np.array([1, 4], np.int64)
    assert hamming(near, copy).tolist() == [1, 1]
    assert hamming(np.int64(-(2**63)), np.int64(1)) == 2


def test_films_nested_at_any_depth_are_one_folder(tmp_path):
    """A franchise folder of series folders of episodes: one pass, one duplicate rule."""
    from core.film import FilmFolder

    rng = np.random.default_rng(6)
    flat = tmp_path / "flat"
    _folder(flat, rng, ["ep00", "ep01"])
    nested = tmp_path / "nested"
    for name, series in (("ep00", "series-a"), ("ep01", "series-b/season-1")):
        shutil.copytree(flat / name, nested / series / name)
    assert [p.relative_to(nested).as_posix() for p in FilmFolder.discover(nested)] == [
        "series-a/ep00",
        "series-b/season-1/ep01",
    ]
    apply_quality(flat, RejectConfig())
    apply_quality(nested, RejectConfig())
    assert _decisions(nested) == _decisions(flat)
    assert sum(d is not None for _, d in _decisions(nested).values()) == 4


def pairs_by_numpy(codes: np.ndarray, start: int, max_bits: int) -> list[tuple[int, int, int]]:
    """The range search written the plain way: each query against every earlier row."""
    columns = np.ascontiguousarray(codes.view(np.uint64).T)  # a row per word of the codes
    found = []
    for j in range(max(start, 1), len(codes)):
        # word by word over contiguous rows: a quarter of the time of `.sum(axis=1)` (issue 30)
        bits = np.zeros(j, np.uint16)
        for column in columns:
            bits += np.bitwise_count(column[:j] ^ column[j])
        found += [(int(i), j, int(bits[i])) for i in np.flatnonzero(bits <= max_bits)]
    return sorted(found)


def codes_with_copies(rng, count: int, width: int) -> np.ndarray:
    """Random codes, a tenth of them copies of another at 0 to 14 bits a word, and a run of
    identical codes: more pairs than a block of queries holds at first."""
    codes = rng.integers(-(2**63), 2**63 - 1, (count, width), dtype=np.int64)
    for _ in range(count // 10):
        source, copy = rng.integers(count, size=2)
        codes[copy] = flipped(codes[source].tolist(), int(rng.integers(0, 14 * width)), rng)
    codes[100:400] = codes[50]
    return codes


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
def test_the_compiled_scan_finds_every_pair_within_the_distance(width):
    from pipeline.passes.bitscan import range_pairs

    rng = np.random.default_rng(width)
    codes = codes_with_copies(rng, 1500, width)
    for start, max_bits in [(0, 12 * width), (977, 12 * width), (0, 0), (1499, 64 * width)]:
        first, second, bits = range_pairs(codes, start, max_bits)
        found = sorted(zip(first.tolist(), second.tolist(), bits.tolist()))
        assert found == pairs_by_numpy(codes, start, max_bits), (start, max_bits)


def _scan_in_a_process(codes: np.ndarray, start: int, cwd: Path, env: dict, tmp_path: Path):
    """The pairs within 48 bits that `range_pairs` finds in a fresh Python process."""
    import subprocess
    import sys

    np.save(tmp_path / "codes.npy", codes)
    script = (
        "import sys, numpy as np\n"
        "from pipeline.passes.bitscan import range_pairs\n"
        "first, second, bits = range_pairs(np.load(sys.argv[1]), int(sys.argv[3]), 48)\n"
        "np.save(sys.argv[2], np.stack([first, second, bits]).T)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, tmp_path / "codes.npy", tmp_path / "pairs.npy", str(start)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted(map(tuple, np.load(tmp_path / "pairs.npy").tolist()))


@pytest.mark.slow  # compiles the kernel in a fresh process: about 5 s
def test_the_compiled_scan_is_exact_on_a_cpu_without_avx512(tmp_path):
    """The kernel is built for the CPU it runs on; on one without AVX-512 (or without a popcount
    instruction: numba's "generic" CPU) it must find the same pairs."""
    import os

    codes = codes_with_copies(np.random.default_rng(7), 1200, 4)
    env = {**os.environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": ""}
    found = _scan_in_a_process(codes, 300, Path(__file__).resolve().parents[1], env, tmp_path)
    assert found == pairs_by_numpy(codes, 300, 48)


def test_clips_that_become_fit_again_are_searched_against_what_came_meanwhile(tmp_path):
    """Only fit clips are searched. A clip unfit under stricter thresholds misses the search of a
    film added meanwhile; when it is fit again it must be searched against that film: the folder
    ends as a pass from scratch over all of it."""
    rng = np.random.default_rng(6)
    root = tmp_path / "out"

    def film(name: str, hashes: list) -> None:
        clips = [
            make_clip(i, film_id=name, film_name=name, quality_hashes=h, quality_text_area=0.002)
            for i, h in enumerate(hashes)
        ]
        write_film(root / name, clips)

    first = [rng.integers(-(2**63), 2**63 - 1, 4).tolist() for _ in range(8)]
    film("ep00", first)
    strict = RejectConfig(text_max_area=0.001)  # every clip reads 0.002: none is fit
    apply_quality(root, RejectConfig())
    apply_quality(root, strict)
    # ep01 arrives, sharing its opening with ep00, while ep00's clips are unfit
    opening = [flipped(h, 6, rng) for h in first[:4]]
    film("ep01", opening + [rng.integers(-(2**63), 2**63 - 1, 4).tolist() for _ in range(4)])
    assert apply_quality(root, strict).usable == 0
    apply_quality(root, RejectConfig())
    incremental = _decisions(root)
    (root / INDEX_FILE).unlink()
    apply_quality(root, RejectConfig())
    assert incremental == _decisions(root)
    assert sum(d is not None for _, d in incremental.values()) == 4  # ep01's opening


def _film_of_copies(
    root: Path, name: str, sources: list, bits: list[int], rng, text_step: float = 0.0
) -> list:
    """A film folder whose clip k is sources[k] with bits[k] bits flipped (random when None),
    and k * text_step of text area."""
    hashes = [
        flipped(h, b, rng) if h is not None else rng.integers(-(2**63), 2**63 - 1, 4).tolist()
        for h, b in zip(sources, bits)
    ]
    clips = [
        make_clip(
            i, film_id=name, film_name=name, quality_hashes=h, quality_text_area=text_step * i
        )
        for i, h in enumerate(hashes)
    ]
    write_film(root / name, clips)
    return hashes


def _from_scratch(root: Path, thresholds: RejectConfig, tmp_path: Path) -> dict[str, tuple]:
    """The decisions of a pass over a copy of `root` without its index."""
    copy = tmp_path / "scratch"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy)
    (copy / INDEX_FILE).unlink(missing_ok=True)
    apply_quality(copy, thresholds)
    return _decisions(copy)


def test_clips_searched_at_a_smaller_distance_are_searched_again_at_a_larger_one(tmp_path):
    """A film added during a pass at a smaller distance must still have its pairs at the larger
    distance of a later pass (the index once kept the largest distance ever used, and trusted
    clips searched to less: ep01's copies, 10 bits a hash from ep00's, were missed)."""
    rng = np.random.default_rng(1)
    root = tmp_path / "out"
    first = _film_of_copies(root, "ep00", [None] * 4, [0] * 4, rng)
    narrow = RejectConfig(duplicate_max_distance=8.0)
    apply_quality(root, RejectConfig())  # 12 bits a hash
    apply_quality(root, narrow)
    _film_of_copies(root, "ep01", first, [40] * 4, rng)  # within 12 bits a hash, not 8
    apply_quality(root, narrow)
    apply_quality(root, RejectConfig())
    incremental = _decisions(root)
    assert incremental == _from_scratch(root, RejectConfig(), tmp_path)
    assert sum(d is not None for _, d in incremental.values()) == 4


@pytest.mark.slow  # over 1.5 s (README, "Test time"): 14 passes
def test_any_sequence_of_distances_and_films_ends_as_a_pass_from_scratch(tmp_path):
    """Films added between passes at changing distances (and text thresholds that make some
    clips unfit): after every pass the folder holds what a pass from scratch decides."""
    rng = np.random.default_rng(2)
    root = tmp_path / "out"
    sources = _film_of_copies(root, "ep00", [None] * 6, [0] * 6, rng, 0.001)
    for step in range(7):
        thresholds = RejectConfig(
            duplicate_max_distance=float(rng.choice([6.0, 8.0, 10.0, 12.0, 14.5])),
            text_max_area=float(rng.choice([1.0, 0.0035])),
        )
        if step % 2:
            picks = rng.integers(len(sources), size=6)
            bits = rng.choice([20, 30, 36, 40, 44, 50, 58], size=6).tolist()
            sources += _film_of_copies(
                root, f"ep{step:02d}", [sources[p] for p in picks], bits, rng, 0.001
            )
        apply_quality(root, thresholds)
        assert _decisions(root) == _from_scratch(root, thresholds, tmp_path), step


@pytest.mark.parametrize(
    "distance, width, expected", [(8.2, 15, 123), (16.4, 15, 246), (12.0, 4, 48), (7.5, 3, 22)]
)
def test_the_search_radius_is_the_rules_own_comparison(distance, width, expected):
    """bits / width <= distance is the rule; floor(8.2 * 15) is 122 in floating point."""
    assert radius_bits(distance, width) == expected
    assert expected / width <= distance < (expected + 1) / width


@pytest.mark.slow  # compiles the kernel twice in fresh processes: about 10 s
def test_the_scan_runs_where_numba_finds_no_writable_cache_folder(tmp_path):
    """A read-only install whose user has no writable home: numba refuses to decorate a cached
    function at all ("no locator available"). The kernel then caches under the temporary folder,
    or compiles without a cache when even that is taken; the scan runs and is exact both ways.
    Made real even for root: `__pycache__` beside the module and the user's cache folder are
    files, so numba cannot create either."""
    import os

    install = tmp_path / "install"
    source = Path(__file__).resolve().parents[1]
    # the scan's modules and what importing them runs: the packages' own top (pipeline/ keeps its
    # old import paths through core/moved.py)
    for name in [
        "core/__init__.py",
        "core/moved.py",
        "pipeline/__init__.py",
        "pipeline/moved.py",
        "pipeline/passes/__init__.py",
        "pipeline/passes/bitscan.py",
        "pipeline/passes/bitscan_kernel.py",
    ]:
        (install / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, install / name)
    (install / "pipeline" / "passes" / "__pycache__").write_text("not a folder")
    (tmp_path / "cache-home").write_text("not a folder")
    temp = tmp_path / "temp"
    temp.mkdir()
    codes = codes_with_copies(np.random.default_rng(9), 600, 4)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(
        PYTHONPATH=str(install),
        PYTHONDONTWRITEBYTECODE="1",
        XDG_CACHE_HOME=str(tmp_path / "cache-home"),
        TMPDIR=str(temp),
    )
    own = temp / f"animegamer-numba-{os.getuid()}"
    for taken in [False, True]:  # the temporary folder's cache, then none
        if taken:
            shutil.rmtree(own)
            own.write_text("someone else's")
        found = _scan_in_a_process(codes, 0, tmp_path, env, tmp_path)
        assert found == pairs_by_numpy(codes, 0, 48)
        if not taken:
            assert any(own.rglob("*.nbi")), "the kernel was cached under the temporary folder"


@pytest.mark.parametrize("width", [3, 4])
def test_the_compiled_scan_is_exact_across_its_cache_blocks_and_calls(width):
    """More codes than a cache block (2,048) and a kernel call's queries (8,192), with copies
    planted on each side of those boundaries, at the distance's edge, and the extreme words."""
    from pipeline.passes.bitscan import SEARCH_BLOCK, range_pairs
    from pipeline.passes.bitscan_kernel import BASE_BLOCK

    rng = np.random.default_rng(20 + width)
    codes = codes_with_copies(rng, SEARCH_BLOCK + 900, width)
    limit = 12 * width
    edges = [BASE_BLOCK - 1, BASE_BLOCK, SEARCH_BLOCK - 1, SEARCH_BLOCK]
    for k, (a, b) in enumerate([(e - 3, e) for e in edges] + [(e, e + 5) for e in edges]):
        codes[b] = flipped(codes[a].tolist(), limit - 1 + k % 3, rng)  # 47, 48, 49 bits
    codes[-2] = -1
    codes[-1] = -(2**63)
    every = pairs_by_numpy(codes, 0, limit)
    for start in [0, BASE_BLOCK, SEARCH_BLOCK - 1]:
        first, second, bits = range_pairs(codes, start, limit)
        found = sorted(zip(first.tolist(), second.tolist(), bits.tolist()))
        assert found == [pair for pair in every if pair[1] >= start], start


def test_the_scan_runs_as_many_threads_as_the_run_may_use():
    """run.num_cpus holds the scan's parallel loop (numba takes every CPU by default) while the
    folder pass runs, and the count is restored after; the pairs are the same."""
    import numba

    from pipeline.passes.bitscan import range_pairs, search_threads

    codes = codes_with_copies(np.random.default_rng(4), 700, 4)
    before = numba.get_num_threads()
    with search_threads(1):
        assert numba.get_num_threads() == 1
        first, second, bits = range_pairs(codes, 0, 48)
    assert numba.get_num_threads() == before
    assert sorted(zip(first.tolist(), second.tolist(), bits.tolist())) == pairs_by_numpy(
        codes, 0, 48
    )
    with search_threads(None):
        assert numba.get_num_threads() == before


@pytest.mark.parametrize("width", [1, 4])
def test_a_small_search_gives_the_kernels_pairs_in_its_order(width, monkeypatch):
    """Up to SMALL_SEARCH codes numpy searches, without numba: the same arrays as the compiled
    scan, element for element (the index lists the pairs in the order they were found)."""
    from pipeline.passes import bitscan

    rng = np.random.default_rng(30 + width)
    codes = codes_with_copies(rng, bitscan.SMALL_SEARCH, width)
    for start, max_bits in [(0, 12 * width), (300, 12 * width), (0, 0), (511, 64 * width)]:
        small = bitscan.range_pairs(codes, start, max_bits)
        with monkeypatch.context() as patch:
            patch.setattr(bitscan, "SMALL_SEARCH", 1)  # the same search by the kernel
            compiled = bitscan.range_pairs(codes, start, max_bits)
        assert len(compiled[0]) > 0
        for mine, theirs in zip(small, compiled):
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), (start, max_bits)
        found = sorted(zip(*(column.tolist() for column in small)))
        assert found == pairs_by_numpy(codes, start, max_bits)
