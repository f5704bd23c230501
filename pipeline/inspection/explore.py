"""Look at a dataset from a notebook: the manifest as a pandas frame, one clip's frames, previews.

    from pipeline.inspection.explore import open_dataset
    ds = open_dataset("data/")            # a dataset folder (one sub-folder per film) or one film
    ds.manifest                           # one row per clip, every column but the media bytes
    ds.frames(clip_id)                    # 16 x 480 x 720 x 3 uint8, decoded from the shard
    ds.show(clip_id)                      # animated preview inline in Jupyter
    ds.usable                             # the clips fit to caption and train on
    ds.rejected                           # the others, with reject_reasons and duplicate_of
    ds.rejected_by_reason()               # reason -> clip count (a clip may have several)
    ds.scores                             # the scores clips carry (camera motion, clarity, ...)
    ds.where(camera_motion="pan_left", clarity_min=0.5)   # rows passing the scores' filters

Everything is read from what `animegamer dataset` wrote (OUT/<film>/shards, manifest.parquet,
drops.parquet, summary.json) and the decisions `animegamer review` wrote (review.parquet, which the
manifest already counts; `ds.review_state` sums them up); nothing here writes. The HTML report (pipeline/inspection/report.py) is built
on the same reader, so a notebook and the report never disagree about a clip.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core import storage
from core.film import MANIFEST_FILE, SHARDS_DIR, SUMMARY_FILE, FilmFolder, FilmSummary, FolderError
from core.schema import DROP_SCHEMA
from core.shards import (
    RowLocation,
    check_schema_version,
    locate_rows,
    read_group_column,
    shard_paths,
)
from core.video import decode_image, decode_mp4
from pipeline.data.manifest import build_manifest
from pipeline.data.review import Review, read_reviews, review_counts
from stages.base import registered_scores
from stages.scoring.scores import Score, filter_names, matches, score_filter

# Nullable Arrow integers become pandas' nullable integers, not floats with NaN: a motion level
# of 3 stays 3, and a clip without one shows <NA>.
_PANDAS_INTEGERS = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
}


class DatasetError(ValueError):
    """A folder is not what `animegamer dataset` writes; the message names the folder."""


def film_ip(film: Film) -> str | None:
    """The IP a film was cut for: its summary's, else its clips'."""
    ip = film.summary.ip
    if ip:
        return ip
    ips = film.manifest_table.column("ip").unique().to_pylist()
    return ips[0] if ips else None


@dataclass
class Film:
    """One film folder: OUT/<slug>/ with shards/, manifest.parquet, drops.parquet, summary.json."""

    path: Path

    @property
    def slug(self) -> str:
        return self.path.name

    @property
    def folder(self) -> FilmFolder:
        return FilmFolder(self.path)

    @cached_property
    def summary(self) -> FilmSummary:
        """summary.json as written by the pipeline (typed; `.to_dict()` gives the JSON object),
        or an empty one, every field not recorded, when the film has none yet."""
        try:
            summary = self.folder.read_summary()
        except FolderError as exc:
            raise DatasetError(str(exc)) from None
        return summary if summary is not None else FilmSummary.from_dict({})

    @cached_property
    def shards(self) -> list[Path]:
        folder = self.folder.shards
        return shard_paths(folder) if folder.is_dir() else []

    @cached_property
    def manifest_table(self) -> pa.Table:
        path = self.folder.manifest
        if path.is_file():
            table = pq.read_table(path)
            check_schema_version(table.schema, path)
            return table
        if not self.shards:
            raise DatasetError(
                f"{self.path}: no clips found: neither {MANIFEST_FILE} nor "
                f"{SHARDS_DIR}/clips-*.parquet exists"
            )
        # An interrupted run may have shards but no manifest yet: the shards hold the same rows.
        return build_manifest(self.folder)

    @cached_property
    def drops_table(self) -> pa.Table:
        path = self.folder.drops
        return pq.read_table(path) if path.is_file() else DROP_SCHEMA.empty_table()

    @cached_property
    def manifest(self) -> pd.DataFrame:
        """This film's clips in time order (see Dataset.manifest)."""
        return _to_pandas(self.manifest_table.sort_by("clip_index"))

    @cached_property
    def drops(self) -> pd.DataFrame:
        return _to_pandas(self.drops_table)

    @cached_property
    def reviews(self) -> dict[str, Review]:
        """The decisions of review.parquet by clip id (written by `animegamer review`)."""
        return read_reviews(self.folder)

    @property
    def review_counts(self) -> dict[str, int]:
        """clips, reviewed, accepted, rejected, corrected, and stale (decisions about clips that
        are no longer in the film)."""
        return review_counts(self.reviews, self.manifest_table.column("clip_id").to_pylist())


def open_dataset(path: str | Path) -> Dataset:
    """Open a film folder (OUT/<film>) or a dataset folder (OUT, one sub-folder per film), local
    or an fsspec URL (s3://...; its committed films are copied to a local cache and read there)."""
    if storage.is_remote(path):
        path = storage.mirror_committed(path, SUMMARY_FILE)
    root = Path(path).expanduser()
    if not root.exists():
        raise DatasetError(f"{root}: no such folder")
    if not root.is_dir():
        raise DatasetError(f"{root}: not a folder (give a film folder or a dataset folder)")
    # a dataset folder's films at any depth (series folders of episodes), found the one way
    films = [Film(root)] if is_film_folder(root) else list(map(Film, FilmFolder.discover(root)))
    if not films:
        raise DatasetError(
            f"{root}: no film folders found (expected {root}/<film>/{SHARDS_DIR}/"
            f"clips-*.parquet or {root}/<film>/{MANIFEST_FILE}, as written by "
            "`animegamer dataset`)"
        )
    return Dataset(root, films)


def is_film_folder(path: Path) -> bool:
    return FilmFolder(path).has_shards() or FilmFolder(path).manifest.is_file()


class Dataset:
    """The films under one folder, read lazily; see the module docstring for a tour."""

    def __init__(self, root: Path, films: list[Film]):
        self.root = root
        self.films = films
        self._locations: dict[str, RowLocation] | None = None

    def __repr__(self) -> str:
        return (
            f"Dataset({str(self.root)!r}, films={[f.slug for f in self.films]}, "
            f"clips={len(self.manifest)})"
        )

    def film(self, slug: str) -> Film:
        for film in self.films:
            if film.slug == slug:
                return film
        raise KeyError(
            f"no film folder {slug!r} in {self.root} "
            f"(films: {', '.join(f.slug for f in self.films)})"
        )

    @cached_property
    def manifest(self) -> pd.DataFrame:
        """One row per clip of every film, in film then clip order; media bytes left out."""
        # Segments finish in any order on a cluster; the clip index is the film's time order.
        tables = [film.manifest_table.sort_by("clip_index") for film in self.films]
        return _to_pandas(pa.concat_tables(tables, promote_options="default"))

    @property
    def usable(self) -> pd.DataFrame:
        """The manifest rows of clips fit to caption and to train on (docs/quality.md)."""
        return self.manifest[self.manifest["usable"]]

    @property
    def rejected(self) -> pd.DataFrame:
        """The manifest rows of the other clips: `reject_reasons` says why, `duplicate_of` names
        the kept copy of a duplicate, the quality_* columns hold the measured values."""
        return self.manifest[~self.manifest["usable"]]

    def rejected_by_reason(self) -> dict[str, int]:
        """Clips per reject reason (a clip with two reasons counts under both)."""
        counts: dict[str, int] = {}
        for reasons in self.rejected["reject_reasons"]:
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def scores(self) -> list[Score]:
        """The scores a clip may carry (docs/scores.md): each one's column, how people read it,
        its labels (a label score) or what it counts (a number score)."""
        return registered_scores()

    def where(self, **filters: object) -> pd.DataFrame:
        """The manifest rows whose scores pass every filter, the review page's score filters:
        a label score by its label (`camera_motion="pan_left"`, "none" for clips without one),
        a number score by a range (`clarity_min=0.5`, `clarity_max=0.9`)."""
        scores = registered_scores()
        unknown = sorted(set(filters) - set(filter_names(scores)))
        if unknown:
            raise KeyError(f"no score filter {unknown} (filters: {filter_names(scores)})")
        conditions = score_filter(scores, {name: str(v) for name, v in filters.items()})
        manifest = self.manifest
        keep = np.ones(len(manifest), bool)
        for score, kind, value in conditions:
            column = manifest.get(score.column)
            values = pa.nulls(len(manifest)) if column is None else pa.array(column)
            keep &= matches(kind, value, values)
        return manifest[keep]

    @cached_property
    def drops(self) -> pd.DataFrame:
        """One row per window that did not become a clip, with its reason."""
        tables = [film.drops_table for film in self.films]
        return _to_pandas(pa.concat_tables(tables, promote_options="default"))

    @cached_property
    def overview(self) -> dict:
        """The corpus at a glance: films, clips, usable clips, drops, failures, hours of film and
        stage seconds, in total and per film (OUT/dataset.json holds the same for a run)."""
        from pipeline.data.corpus import DATASET_SUMMARY, summarize_films

        path = self.root / DATASET_SUMMARY
        # the films that failed before cutting have no folder to read: the last run named them
        failed = json.loads(path.read_text()).get("failed_films", []) if path.is_file() else []
        return summarize_films([film.path for film in self.films], failed)

    @property
    def review_state(self) -> pd.DataFrame:
        """Per film: clips, reviewed, accepted, rejected, corrected and stale decisions."""
        counts = {film.slug: film.review_counts for film in self.films}
        return pd.DataFrame.from_dict(counts, orient="index").rename_axis("film")

    @property
    def summaries(self) -> dict[str, FilmSummary]:
        """summary.json of every film, keyed by the film folder's name."""
        return {film.slug: film.summary for film in self.films}

    @property
    def summary(self) -> FilmSummary:
        """summary.json of the one film in this dataset (use `summaries` when there are several)."""
        if len(self.films) != 1:
            raise DatasetError(
                f"{self.root} holds {len(self.films)} films: use "
                "`.summaries[film]` or open one film folder"
            )
        return self.films[0].summary

    def clip(self, clip_id: str) -> pd.Series:
        """The manifest row of one clip."""
        rows = self.manifest[self.manifest["clip_id"] == clip_id]
        if rows.empty:
            raise KeyError(f"clip {clip_id!r} is not in the manifest of {self.root}")
        return rows.iloc[0]

    def video_bytes(self, clip_id: str) -> bytes:
        """The clip's H.264 mp4 exactly as stored in its shard."""
        return self.media_bytes(clip_id, "video")

    def frames(self, clip_id: str) -> np.ndarray:
        """The clip's frames, N x H x W x 3 uint8 RGB (16 x 480 x 720 x 3 by default)."""
        return decode_mp4(self.video_bytes(clip_id))

    def first_frame(self, clip_id: str) -> np.ndarray:
        """The stored first-frame image (the CLIP encoder's visual reference), H x W x 3 uint8."""
        return decode_image(self.media_bytes(clip_id, "first_frame"))

    def preview(self, clip_id: str, width: int = 360) -> ClipPreview:
        """An animated preview of the clip that renders itself in Jupyter."""
        row = self.clip(clip_id)
        data, mime = animated_preview(self.frames(clip_id), fps=float(row["fps"]), width=width)
        return ClipPreview(clip_id=clip_id, data=data, mime=mime, caption=describe_clip(row))

    def show(self, clip_id: str, width: int = 360) -> None:
        """Display the clip's animated preview in the running notebook."""
        try:
            from IPython.display import display
        except ImportError:
            raise RuntimeError(
                "show() needs IPython (run it in Jupyter); "
                "preview(clip_id).data holds the animated image bytes"
            ) from None
        display(self.preview(clip_id, width))

    def media_bytes(self, clip_id: str, column: str) -> bytes:
        """The `video` (mp4) or `first_frame` (JPEG) bytes of one clip, as stored."""
        location = self._location(clip_id)
        data = read_group_column(location, column)[location.row]
        if data is None:
            error = self.clip(clip_id).get("error")
            raise ValueError(
                f"clip {clip_id} in {location.shard} has no {column} bytes"
                + (f" (it failed: {error})" if isinstance(error, str) else "")
            )
        return data

    def _location(self, clip_id: str) -> RowLocation:
        if self._locations is None:
            # built aside and then published: a second thread (the review server's) never sees
            # a half-filled index
            locations: dict[str, RowLocation] = {}
            for film in self.films:
                for shard in film.shards:
                    locations.update(_index_shard(shard))
            self._locations = locations
        try:
            return self._locations[clip_id]
        except KeyError:
            raise KeyError(f"clip {clip_id!r} is in no shard under {self.root}") from None


@dataclass
class ClipPreview:
    """Animated image bytes of one clip; Jupyter shows it through `_repr_html_`."""

    clip_id: str
    data: bytes = field(repr=False)
    mime: str
    caption: str

    def data_uri(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def _repr_html_(self) -> str:
        return (
            f'<figure style="margin:0"><img src="{self.data_uri()}" '
            f'alt="clip {html.escape(self.clip_id)}"><figcaption>'
            f"{html.escape(self.caption)}</figcaption></figure>"
        )


def animated_preview(
    frames: np.ndarray, fps: float, width: int | None = None, quality: int = 70
) -> tuple[bytes, str]:
    """Encode frames as a looping animated WebP (GIF where Pillow lacks WebP): (bytes, mime)."""
    from PIL import Image, features

    images = [Image.fromarray(frame) for frame in _resized(frames, width)]
    duration_ms = max(1, round(1000 / fps)) if fps > 0 else 125
    buffer = io.BytesIO()
    if features.check("webp"):
        images[0].save(
            buffer,
            format="WEBP",
            save_all=True,
            append_images=images[1:],
            duration=duration_ms,
            loop=0,
            quality=quality,
            # libwebp's effort 0-6: 2 encodes in half the CPU of 4 (0.06 s against 0.11 s for 16
            # frames at 240 x 160), the same picture (mean error 2.09 against 2.08 levels) in
            # 8 % more bytes; a report of 48 previews is built in seconds less
            method=2,
        )
        return buffer.getvalue(), "image/webp"
    images[0].save(
        buffer, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0
    )
    return buffer.getvalue(), "image/gif"


def describe_clip(row: pd.Series) -> str:
    """One line a person can check a clip against: where it is, how it moves, what it says."""
    parts = [
        f"clip {row['clip_id'][:8]}",
        f"{row['start_time']:.2f}-{row['end_time']:.2f} s "
        f"(frames [{row['start_frame']}, {row['end_frame']}))",
        f"motion level {_shown(row.get('motion_level'), 'not measured')}",
        _shown(row.get("instruction"), "no instruction yet"),
    ]
    if row.get("usable") is False or row.get("usable") is np.False_:
        parts.append("REJECTED: " + ", ".join(row.get("reject_reasons") or []))
    return " | ".join(parts)


def _shown(value, missing: str) -> str:
    return (
        missing
        if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))
        else str(value)
    )


def _resized(frames: np.ndarray, width: int | None) -> np.ndarray:
    if not width or width >= frames.shape[2]:
        return frames
    import cv2

    height = max(2, round(frames.shape[1] * width / frames.shape[2]))
    # INTER_AREA averages source pixels: no aliasing shimmer in a downscaled animation.
    return np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in frames])


def _index_shard(shard: Path) -> dict[str, RowLocation]:
    return {row["clip_id"]: where for where, row in locate_rows(shard, ["clip_id"])}


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper=_PANDAS_INTEGERS.get)
