"""Atomic writes: every file appears under its final name only once complete.

A writer fills a temporary file in the target's folder and renames it into place, so a reader (or
a resumed run) never sees a half-written file. This module is the one place outputs are written
from; a remote file system (s3:// through fsspec) would plug in here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def write_table_atomic(table: pa.Table, path: str | Path, compression: str = "zstd") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    pq.write_table(table, tmp, compression=compression)
    publish(Path(tmp), path)
    return path


def write_table_with_state(table: pa.Table, path: str | Path, key: str, state: dict) -> Path:
    """`table` with `state` as JSON in its schema metadata under `key`: a folder index's file
    (the quality pass's, the semantic one's), read back with `read_table_with_state`."""
    metadata = {key.encode(): json.dumps(state, sort_keys=True).encode()}
    return write_table_atomic(table.replace_schema_metadata(metadata), path)


def read_table_with_state(path: Path, key: str) -> tuple[pa.Table, dict] | None:
    """A table written by `write_table_with_state` and its state; None when it is missing or
    cannot be read, or holds no state under `key` (an index is then built anew)."""
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
        return table, json.loads((table.schema.metadata or {})[key.encode()])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


def write_json_atomic(data: Any, path: str | Path) -> Path:
    return write_text_atomic(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", path)


def write_text_atomic(text: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    publish(Path(tmp), path)
    return path


def publish(tmp: Path, final: Path) -> None:
    """Rename a finished temporary file into place, with the permissions a plain open() gives
    (mkstemp makes files readable by their owner only, which would hide outputs from others)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, final)
