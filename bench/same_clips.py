"""The no-clip-change check: the sample film's and bikes' clips, manifests and drops, byte for byte.

    python -m bench.same_clips            cut both films, compare with bench/results/clip_digests.json
    python -m bench.same_clips --record   cut both films, write that file (on main, before a change)

A speed change must not change a clip (issue 39): the decoded frames every stage sees, the cuts,
the clip ids and the encoded bytes stay what they were. The films are cut in one `dataset` run
with the default executor, as a user cuts them; summary.json is left out (it holds timings), and
of the folder's quality index only its rows count.
Exit status 1, with the files that differ, when anything changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
FILMS = [ROOT / "samples" / "sintel_trailer.mp4", ROOT / "tests" / "media" / "bikes.mp4"]
DIGESTS = ROOT / "bench" / "results" / "clip_digests.json"


def cut(out: Path, sets: list[str]) -> None:
    folder = out / "films"
    folder.mkdir(parents=True)
    for film in FILMS:
        (folder / film.name).symlink_to(film)
    command = [sys.executable, "-m", "pipeline.cli", "dataset", str(folder), "--out", str(out)]
    command += ["--quiet", *(a for s in sets for a in ("--set", s))]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def digests(out: Path) -> dict[str, object]:
    """sha256 of every Parquet file (shards, manifests, drops), the clip ids in order, keyed by
    the path under `out`; of the folder's quality index, its rows alone: its metadata stamps each
    film by its summary.json, which lists every setting (a new one changes the stamps)."""
    found: dict[str, object] = {}
    for path in sorted(out.glob("**/*.parquet")):
        name = str(path.relative_to(out))
        if path.parent == out:
            table = pq.read_table(path).replace_schema_metadata(None)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table)
            found[name + ":rows"] = hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()
            continue
        found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.name == "manifest.parquet":
            ids = pq.read_table(path, columns=["clip_id"]).column(0).to_pylist()
            found[name + ":clip_ids"] = ids
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the reference digests")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="same-clips-") as tmp:
        cut(Path(tmp), args.set)
        now = digests(Path(tmp))
    if args.record:
        DIGESTS.write_text(json.dumps(now, indent=1) + "\n")
        print(f"recorded {len(now)} digests in {DIGESTS}")
        return 0
    reference = json.loads(DIGESTS.read_text())
    changed = sorted(k for k in reference.keys() | now.keys() if reference.get(k) != now.get(k))
    if changed:
        print("clips changed:\n  " + "\n  ".join(changed))
        return 1
    clips = sum(len(ids) for ids in now.values() if isinstance(ids, list))
    print(f"same clips: {len(now)} digests and {clips} clip ids as in {DIGESTS.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
