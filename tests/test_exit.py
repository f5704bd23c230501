"""A clean exit (issue 30). Arrow must never be left a Python object to free on one of its own
threads: one freed there while the interpreter exits ends the process with SIGABRT ("terminate
called without an active exception") after every output was written. And Ctrl-C ends a run with
130 even when it lands in a native module's import. `make stress` runs the commands many times to
count unclean exits; these check the rules behind the fixes, in one process."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileOpener
from fsspec.implementations.memory import MemoryFile

from core import storage
from core.cli import INTERRUPTED, WorkFailed, run_command
from core.film import MANIFEST_FILE, SUMMARY_FILE
from pipeline.data.corpus import summarize_films
from pipeline.executors.local import LocalExecutor


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


def test_a_ctrl_c_that_a_native_import_turns_into_its_own_error_still_ends_with_130(capsys):
    """A pybind11 module (cv2, onnxruntime, scipy's) whose import a Ctrl-C lands in raises
    ImportError("initialization failed") instead, with no cause, and the local executor recorded
    it as the job's failure: exit 1 (two runs in 40 of `make stress`). `interrupted_import`
    takes a real SIGINT and reports it as such a module does."""

    def interrupted_import(job, report):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the KeyboardInterrupt lands here, at once
        except KeyboardInterrupt:
            raise ImportError("initialization failed") from None

    def command(args):
        executor = LocalExecutor(progress=False)
        raise WorkFailed(str(executor.result(executor.submit(interrupted_import, None))))

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        assert run_command("dataset", command, argparse.Namespace()) == INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == "interrupted\n"
