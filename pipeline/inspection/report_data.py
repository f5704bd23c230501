"""What the report reads about a film besides its shards' columns: the crop box and the source
frame it is drawn on, the middle and evenly spaced clips, the film's name and title, and the
summary's facts as the report words them (crop, window, drops, clip geometry)."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pandas as pd

from core.film import CropRecord, FilmSummary, WindowRecord
from core.video import rotate_frame
from pipeline.inspection.explore import Dataset, Film


def crop_box(summary: FilmSummary, manifest: pd.DataFrame) -> tuple[int, int, int, int] | None:
    if summary.crop is not None and summary.crop.box is not None:
        return summary.crop.box
    if manifest.empty:
        return None
    row = manifest.iloc[0]
    return int(row["crop_x"]), int(row["crop_y"]), int(row["crop_w"]), int(row["crop_h"])


def middle_clip(manifest: pd.DataFrame) -> pd.Series | None:
    ok = manifest[manifest["status"] == "ok"]
    return None if ok.empty else ok.iloc[len(ok) // 2]


def source_frame_at(path: str, seconds: float) -> np.ndarray | None:
    """The source film's frame shown at `seconds` after its first frame, or None when the film
    cannot be read."""
    if not Path(path).is_file():
        return None
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            time_base = stream.time_base
            if time_base is None:
                return None
            # Clip times count from the first frame; a stream's timestamps may start later.
            start = float(stream.start_time * time_base) if stream.start_time else 0.0
            target = start + seconds
            container.seek(int(target / time_base), stream=stream, backward=True)
            # the frame on screen at `target`: the last one starting at or before it, as the
            # pipeline samples (between frames at 23.976 fps, the nearest one would be the next)
            shown = None
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                if frame.time > target + 1e-6 and shown is not None:
                    break
                shown = frame
    except (av.error.FFmpegError, IndexError):
        return None
    if shown is None:
        return None
    # the crop box is in displayed pixels: turn the frame upright as the pipeline does
    return rotate_frame(shown.to_ndarray(format="rgb24"), int(round(shown.rotation or 0)) % 360)


def evenly_spaced(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    if limit <= 0:
        return rows.iloc[:0]
    if len(rows) <= limit:
        return rows
    picks = np.unique(np.linspace(0, len(rows) - 1, limit).round().astype(int))
    return rows.iloc[picks]


def first_value(frame: pd.DataFrame, column: str):
    return frame[column].iloc[0] if not frame.empty else None


def film_display_name(film: Film, manifest: pd.DataFrame) -> str:
    name = film.summary.film.film_name or first_value(manifest, "film_name")
    return name or film.slug


def summary_drop_total(summary: FilmSummary) -> int | None:
    drops = summary.drops
    return sum(drops.values()) if isinstance(drops, dict) else None


def clip_geometry(manifest: pd.DataFrame) -> str | None:
    if manifest.empty:
        return None
    row = manifest.iloc[0]
    return f"{row['num_frames']} frames, {row['width']}x{row['height']}, {row['fps']:g} fps"


def report_title(dataset: Dataset, ip: str | None) -> str:
    if len(dataset.films) == 1:
        film = dataset.films[0]
        return film_display_name(film, film.manifest)
    return f"{ip or dataset.root.name}: {len(dataset.films)} films"


def window_text(window: WindowRecord | None) -> str | None:
    if window is None or {"x", "y", "w", "h"} & window.absent:
        return None
    words = window.line() or "centred"
    return f"{window.x}, {window.y}, {window.w}, {window.h} ({words})"


def crop_text(crop: CropRecord | None) -> str | None:
    if crop is None or crop.box is None:
        return None
    source = crop.source if "source" not in crop.absent else "source unknown"
    words = "; ".join(w for w in (source, crop.line()) if w)
    return f"{crop.x}, {crop.y}, {crop.w}, {crop.h} ({words})"
