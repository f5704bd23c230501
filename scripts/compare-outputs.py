"""Compare two output folders of `make dataset` file by file: the shards, manifests, drops and
indexes byte for byte, and summary.json / dataset.json / quality.json with the fields that vary
between runs of the same code left out (seconds, times, paths of the run).

Used to show that a refactor changes no output (issue 37: the sample's and bikes' outputs before
and after the rooms): `python scripts/compare-outputs.py OUT_BEFORE OUT_AFTER`. Exit 0 when they
match, 1 with one line per difference otherwise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# JSON keys whose values are measurements of the run, not outputs: wall and CPU seconds, dates,
# the folder the run wrote to
RUN_KEYS = {
    "seconds",
    "stage_seconds",
    "timings",
    "wall_seconds",
    "elapsed",
    "created",
    "written_at",
    "updated",
    "started",
    "finished",
    "root",
    "path",
    "out",
    "cpu_seconds",
    "progress",
}


def without_run_facts(value):
    if isinstance(value, dict):
        return {k: without_run_facts(v) for k, v in value.items() if k not in RUN_KEYS}
    if isinstance(value, list):
        return [without_run_facts(v) for v in value]
    return value


def differences(before: Path, after: Path) -> list[str]:
    found = []
    names_before = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    names_after = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    for name in sorted(names_before ^ names_after):
        found.append(f"{name}: only in {'before' if name in names_before else 'after'}")
    for name in sorted(names_before & names_after):
        a, b = before / name, after / name
        if name.suffix == ".json":
            if without_run_facts(json.loads(a.read_text())) != without_run_facts(
                json.loads(b.read_text())
            ):
                found.append(f"{name}: JSON differs")
        elif a.read_bytes() != b.read_bytes():
            found.append(f"{name}: bytes differ")
    return found


def main() -> int:
    before, after = (Path(arg) for arg in sys.argv[1:3])
    found = differences(before, after)
    for line in found:
        print(line)
    print(f"{'identical' if not found else f'{len(found)} difference(s)'}: {before} vs {after}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
