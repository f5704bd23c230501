"""The dataset level: OUT/dataset.json, one summary of every film folder under OUT.

It is rebuilt from the films' own summary.json files (and the manifests, for usable clips) at the
end of every run, so it always describes the whole folder, not only the films of the last run;
the films that failed before cutting (no folder of their own) are those of the last run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.shards import write_json_atomic

DATASET_SUMMARY = "dataset.json"
FILM_SUMMARY = "summary.json"
USABLE_COLUMN = "usable"


def dataset_summary(out_dir: str | Path, failed_films: list[dict] | None = None) -> dict:
    """Totals over every film folder under `out_dir`, then one line per film."""
    films = [_film_line(path.parent) for path in sorted(Path(out_dir).glob(f"*/{FILM_SUMMARY}"))]
    films = [f for f in films if f is not None]
    usable = [f["usable_clips"] for f in films if f["usable_clips"] is not None]
    return {
        "films": len(films),
        "films_complete": sum(f["complete"] for f in films),
        "films_failed": len(failed_films or []),
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


def write_dataset_summary(out_dir: str | Path, failed_films: list[dict] | None = None) -> Path:
    return write_json_atomic(
        dataset_summary(out_dir, failed_films), Path(out_dir) / DATASET_SUMMARY
    )


def _film_line(film_dir: Path) -> dict | None:
    try:
        summary = json.loads((film_dir / FILM_SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return None  # a summary being replaced or damaged: the film is not counted yet
    return {
        "folder": film_dir.name,
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


def _usable_clips(film_dir: Path) -> int | None:
    """Clips whose `usable` column is true, when the manifest has that column (else None)."""
    manifest = film_dir / "manifest.parquet"
    if not manifest.is_file() or USABLE_COLUMN not in pq.read_schema(manifest).names:
        return None
    column = pq.read_table(manifest, columns=[USABLE_COLUMN]).column(USABLE_COLUMN)
    return sum(bool(v) for v in column.to_pylist())


def _summed(mappings) -> dict:
    total: dict = {}
    for mapping in mappings:
        for key, value in mapping.items():
            total[key] = total.get(key, 0) + value
    return dict(sorted(total.items()))
