"""A clean exit (issue 30). Arrow must never be left a Python object to free on one of its own
threads: one freed there while the interpreter exits ends the process with SIGABRT ("terminate
called without an active exception") after every output was written. `make stress` runs the
commands many times to count such aborts; this checks the rule behind the fix, in one process."""

from __future__ import annotations

import json
import threading

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileOpener
from fsspec.implementations.memory import MemoryFile

from core import storage
from core.film import MANIFEST_FILE, SUMMARY_FILE
from pipeline.corpus import summarize_films


def _film_folder(fs, folder: str, usable: list[bool]) -> None:
    """A committed film folder: its summary and a manifest of several row groups, so that Arrow
    has several reads to spread over its threads."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"usable": usable}), sink, row_group_size=64)
    fs.makedirs(folder, exist_ok=True)
    fs.pipe(f"{folder}/{MANIFEST_FILE}", sink.getvalue().to_pybytes())
    fs.pipe(f"{folder}/{SUMMARY_FILE}", json.dumps({"complete": True}).encode())


def test_arrow_reads_python_files_only_on_the_calling_thread(tmp_path, monkeypatch):
    usable = [i % 3 != 0 for i in range(1000)]
    _film_folder(fsspec.filesystem("file"), str(tmp_path / "film"), usable)
    _film_folder(fsspec.filesystem("memory"), "/exit-test/film", usable)
    readers: list[int] = []
    for cls in (LocalFileOpener, MemoryFile):  # the Python files fsspec hands out
        read = cls.read

        def recorded(self, *args, read=read, **kwargs):
            readers.append(threading.get_ident())
            return read(self, *args, **kwargs)

        monkeypatch.setattr(cls, "read", recorded)
    films = summarize_films([tmp_path / "film", "memory://exit-test/film"])["per_film"]
    assert [film["usable_clips"] for film in films] == [sum(usable)] * 2
    assert readers and set(readers) == {threading.get_ident()}
    with storage.open_parquet("memory://exit-test/film/" + MANIFEST_FILE) as parquet:
        assert parquet.read_row_group(3).column("usable").to_pylist() == usable[192:256]
        assert sum(len(b) for b in parquet.iter_batches(batch_size=100)) == len(usable)
    assert readers and set(readers) == {threading.get_ident()}
