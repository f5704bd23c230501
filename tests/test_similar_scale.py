"""bench/similar_scale.py on a small folder: every planted copy found, no false pair, in the full
pass and when a film is added to the index the bench seeds; the goals line names what it lacks."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # each step runs in its own process, importing torch


def test_the_bench_finds_every_planted_copy_and_says_which_goals_it_did_not_measure(
    tmp_path, capsys
):
    from bench.similar_scale import main

    assert main(["--clips", "7000", "--work", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {
        line.split(": ", 1)[0].rsplit(", ", 1)[1]: json.loads(line.split(": ", 1)[1])
        for line in lines
        if line.startswith("semantic duplicates, 7,000 clips")
    }
    assert set(rows) == {"write folder", "full pass", "add a film"}
    for label in ("full pass", "add a film"):
        assert rows[label]["planted"] > 3, label
        assert rows[label]["missed"] == 0 and rows[label]["false_pairs"] == 0, label
    assert lines[-1].endswith("100k full pass: not measured; 1M add a film: not measured")
