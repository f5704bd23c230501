"""Writing and reading clip shards: Parquet files with the explicit schema, rotated by size.

Every file is written under a temporary name and renamed into place, so a reader (or a resumed
run) only ever sees complete files. `read_clips` / `read_table` are the one way back in; the
trainer, the report and the captioning pass all read through them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core import storage
from core.film import SHARDS_DIR
from core.io import publish
from core.record import Clip
from core.schema import CLIP_SCHEMA, SCHEMA_VERSION, rows_to_table
from core.settings import Settings


@dataclass
class ShardConfig(Settings):
    max_bytes: int = 256 * 1024 * 1024
    """A shard is closed and a new one opened once this many bytes of rows were written to it."""
    rows_per_group: int = 32
    """Rows per Parquet row group: small groups let readers stream clips without loading a shard."""
    compression: str = "zstd"
    """Parquet compression of the non-media columns (media bytes are already compressed)."""


class ShardWriter:
    """Writes rows to `{directory}/{prefix}-{n:05d}.parquet`, opening a new file past max_bytes.

    Use as a context manager; `paths` lists the finished files. A file appears under its final
    name only once closed, so a crash leaves at most a `.tmp` file, never a truncated shard.
    """

    def __init__(
        self,
        directory: str | Path,
        prefix: str,
        config: ShardConfig | None = None,
        schema: pa.Schema = CLIP_SCHEMA,
    ):
        self.directory = Path(directory)
        self.prefix = prefix
        self.config = config or ShardConfig()
        self.schema = schema
        self.paths: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._bytes = 0
        self._pending: list[dict] = []

    def write(self, clip: Clip | dict) -> None:
        row = clip.to_row() if isinstance(clip, Clip) else clip
        self._pending.append(row)
        self._bytes += _row_bytes(row)
        if len(self._pending) >= self.config.rows_per_group:
            self._flush()
        if self._bytes >= self.config.max_bytes:
            self._close_file()

    def write_all(self, clips: Iterable[Clip | dict]) -> None:
        for clip in clips:
            self.write(clip)

    def close(self) -> list[Path]:
        self._close_file()
        return self.paths

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.prefix}-", suffix=".tmp", dir=self.directory)
            os.close(fd)
            self._tmp = Path(tmp)
            self._writer = pq.ParquetWriter(
                self._tmp, self.schema, compression=self.config.compression
            )
        self._writer.write_table(rows_to_table(self._pending, self.schema))
        self._pending = []

    def _close_file(self) -> None:
        self._flush()
        if self._writer is None:
            return
        self._writer.close()
        assert self._tmp is not None  # set together with the writer
        final = self.directory / f"{self.prefix}-{len(self.paths):05d}.parquet"
        publish(self._tmp, final)
        self.paths.append(final)
        self._writer, self._tmp, self._bytes = None, None, 0

    def _abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        self._writer, self._tmp, self._pending = None, None, []


def rewrite_row_groups(path: Path, transform) -> None:
    """Rewrite a shard in place, row group by row group, as `transform(table) -> table` says.

    Memory stays at one group, groups keep their size and compression, and the new file replaces
    the old one only once complete (a crash leaves the old shard whole)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with pq.ParquetFile(path) as source:
            check_schema_version(source.schema_arrow, path)
            groups = source.num_row_groups
            compression = source.metadata.row_group(0).column(0).compression if groups else "ZSTD"
            # the footer says UNCOMPRESSED where the writer wants "none"
            codec = "none" if compression.upper() == "UNCOMPRESSED" else compression.lower()
            with pq.ParquetWriter(tmp, source.schema_arrow, compression=codec) as writer:
                for group in range(groups):
                    writer.write_table(transform(source.read_row_group(group)))
        publish(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_column(table: pa.Table, name: str, values) -> pa.Table:
    """`table` with column `name` replaced by `values`, keeping the column's field."""
    index = table.schema.get_field_index(name)
    field = table.schema.field(index)
    return table.set_column(index, field, pa.array(values, field.type))


def shard_paths(location: str | Path) -> list[Path]:
    """The shard files under a film folder, a dataset folder, or one file, in a stable order."""
    location = Path(location)
    if location.is_file():
        return [location]
    if not location.exists():
        raise FileNotFoundError(f"{location}: no such shard file or folder")
    return sorted(
        p
        for p in location.rglob("*.parquet")
        if p.parent.name == SHARDS_DIR or (p.parent == location and p.name.startswith("clips"))
    )


def read_table(location: str | Path, columns: list[str] | None = None) -> pa.Table:
    paths = shard_paths(location)
    if not paths:
        return (
            CLIP_SCHEMA.empty_table()
            if columns is None
            else CLIP_SCHEMA.empty_table().select(columns)
        )
    tables = [pq.read_table(p, columns=columns) for p in paths]
    for path, table in zip(paths, tables):
        check_schema_version(table.schema, path)
    return pa.concat_tables(tables)


def read_clips(location: str | Path, columns: list[str] | None = None) -> Iterator[Clip]:
    """Stream clips row group by row group (memory stays flat in the number of shards)."""
    for path in shard_paths(location):
        parquet = pq.ParquetFile(path)
        check_schema_version(parquet.schema_arrow, path)
        for batch in parquet.iter_batches(columns=columns, batch_size=CLIP_BATCH_ROWS):
            for row in batch.to_pylist():
                yield Clip.from_row(_with_required_defaults(row))


CLIP_BATCH_ROWS = 16


def check_schema_version(schema: pa.Schema, path: Path | str) -> None:
    found = (schema.metadata or {}).get(b"animegamer.schema_version", b"").decode()
    if found.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ValueError(
            f"{path}: shard schema version {found or 'missing'} is not compatible "
            f"with this reader ({SCHEMA_VERSION})"
        )


def _with_required_defaults(row: dict) -> dict:
    """A column subset still builds a Clip: required fields that were not read become neutral."""
    defaults = {f.name: _neutral(f.type) for f in CLIP_SCHEMA if not f.nullable}
    return {**defaults, **row}


def _neutral(arrow_type: pa.DataType):
    if pa.types.is_string(arrow_type):
        return ""
    if pa.types.is_list(arrow_type):
        return []
    if pa.types.is_boolean(arrow_type):
        return False
    if pa.types.is_floating(arrow_type):
        return 0.0
    return 0


def _row_bytes(row: dict) -> int:
    media = sum(len(row.get(k) or b"") for k in ("video", "first_frame"))
    return media + 512  # the other columns are small; 512 bytes is a generous upper estimate


# ---- one clip's row: where it lives, and reading its cells --------------------------------------


@dataclass(frozen=True)
class RowLocation:
    """Where one clip's row lives: reading its media touches one row group, not a whole shard."""

    shard: Path | str  # a local file, or an object's URL (read by byte range, core/storage.py)
    row_group: int
    row: int


def locate_rows(shard: Path | str, columns: list[str]) -> Iterator[tuple[RowLocation, dict]]:
    """Each row of a shard (its `columns` only) with its location, row group by row group."""
    parquet = storage.open_parquet(shard)
    check_schema_version(parquet.schema_arrow, shard)
    for group in range(parquet.num_row_groups):
        rows = parquet.read_row_group(group, columns=columns).to_pylist()
        for row, values in enumerate(rows):
            yield RowLocation(shard, group, row), values


def read_group_column(location: RowLocation, column: str) -> list:
    """One column of the row group holding `location` (callers that walk neighbours cache it)."""
    parquet = storage.open_parquet(location.shard)
    table = parquet.read_row_group(location.row_group, columns=[column])
    return table.column(column).to_pylist()
