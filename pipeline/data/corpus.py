"""The dataset level: OUT/dataset.json, one summary of every film folder under OUT.

It is rebuilt from the films' own summary.json files (and the manifests, for usable clips) at the
end of every run, so it always describes the whole folder, not only the films of the last run;
the films that failed before cutting (no folder of their own) are those of the last run.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow.compute as pc

from core import storage
from core.film import MANIFEST_FILE, SUMMARY_FILE
from core.io import write_json_atomic

DATASET_SUMMARY = "dataset.json"
USABLE_COLUMN = "usable"


def dataset_summary(out_dir: str | Path, failed_films: list[dict] | None = None) -> dict:
    """Totals over every film folder under `out_dir`, then one line per film."""
    film_dirs = [storage.join(out_dir, name) for name in storage.list_names(out_dir)]
    return summarize_films(film_dirs, failed_films)


def summarize_films(film_dirs: list, failed_films: list[dict] | None = None) -> dict:
    """Totals over the given film folders (those without a committed summary.json left out)."""
    films = [line for line in map(_film_line, film_dirs) if line is not None]
    usable = [f["usable_clips"] for f in films if f["usable_clips"] is not None]
    failed = len(failed_films or [])
    return {
        # films = films_cut + films_failed: every film, with a folder of clips or failed before
        # cutting (those of the last run); films_complete is among films_cut
        "films": len(films) + failed,
        "films_cut": len(films),
        "films_complete": sum(f["complete"] for f in films),
        "films_failed": failed,
        "clips": sum(f["clips"] for f in films),
        "clips_failed": sum(f["clips_failed"] for f in films),
        "usable_clips": sum(usable) if usable else None,
        "drops": _summed(f["drops"] for f in films),
        "failed_segments": sum(f["failed_segments"] for f in films),
        "hours_of_film": round(sum(f["seconds_of_film"] for f in films) / 3600, 4),
        "stage_seconds": {
            k: round(v, 3) for k, v in _summed(f["stage_seconds"] for f in films).items()
        },
        "ips": sorted({f["ip"] for f in films if f["ip"]}),
        "failed_films": failed_films or [],
        "per_film": films,
    }


def write_dataset_summary(out_dir: str | Path, failed_films: list[dict] | None = None) -> None:
    summary = dataset_summary(out_dir, failed_films)
    if not storage.is_remote(out_dir):
        write_json_atomic(summary, Path(out_dir) / DATASET_SUMMARY)
        return
    with tempfile.TemporaryDirectory() as folder:
        local = write_json_atomic(summary, Path(folder) / DATASET_SUMMARY)
        storage.upload(local, storage.join(out_dir, DATASET_SUMMARY))


def _film_line(film_dir: str | Path) -> dict | None:
    """A film folder's line, or None for anything that holds no committed summary.json."""
    text = storage.read_text(storage.join(film_dir, SUMMARY_FILE))
    if text is None:
        return None
    try:
        summary = json.loads(text)
    except json.JSONDecodeError:
        return None  # damaged: the film is not counted until a rerun rewrites it
    return {
        "folder": storage.name(film_dir),
        "film_name": summary.get("film", {}).get("film_name"),
        "ip": summary.get("ip"),
        "complete": bool(summary.get("complete")),
        "clips": summary.get("clips_written", 0),
        "clips_failed": summary.get("clips_failed", 0),
        "usable_clips": _usable_clips(film_dir),
        "drops": summary.get("drops", {}),
        "failed_segments": len(summary.get("failed_segments", {})),
        "seconds_of_film": summary.get("film", {}).get("duration", 0.0),
        "stage_seconds": summary.get("stage_seconds", {}),
    }


def _usable_clips(film_dir: str | Path) -> int | None:
    """Clips whose `usable` column is true, when the manifest has that column (else None)."""
    manifest = storage.join(film_dir, MANIFEST_FILE)
    if not storage.exists(manifest):
        return None
    with storage.open_parquet(manifest) as parquet:
        if USABLE_COLUMN not in parquet.schema_arrow.names:
            return None
        column = parquet.read(columns=[USABLE_COLUMN]).column(USABLE_COLUMN)
    return int(pc.sum(column).as_py() or 0)  # counted in Arrow: no Python object per clip


def _summed(mappings) -> dict:
    total: dict = {}
    for mapping in mappings:
        for key, value in mapping.items():
            total[key] = total.get(key, 0) + value
    return dict(sorted(total.items()))
