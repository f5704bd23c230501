"""Where films and datasets live: a local path, or an fsspec URL (s3://bucket/key, gs://, ...).

Credentials and the endpoint of S3 come from the standard AWS environment variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION and
AWS_ENDPOINT_URL for an S3-compatible server), read by botocore itself: nothing here is specific
to this project.

Object stores have no atomic rename, so outputs follow two rules there:
- an object is written with one PUT under its final name, and only once its content is complete
  (it is made in a local scratch folder first): a reader sees the old object or the new one,
  never a part of one;
- every unit of work ends with a commit marker written last (a segment's DONE.json, a film's
  summary.json), which is removed first when the unit is redone. Resumed runs and readers trust
  only what a marker commits; anything else is redone or ignored.
Work runs on local files (films are fetched once per node into a cache; segments and finalize
write into scratch folders) and is then published with these rules.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.parquet as pq

# fsspec and pyarrow (0.13 s of imports) are imported where a remote location or a Parquet file
# needs them: a command that checks its arguments with this module's path helpers stays quick.

Location = str | Path


def is_remote(location: Location) -> bool:
    text = str(location)
    return "://" in text and not text.startswith("file://")


def join(base: Location, *parts: str) -> Location:
    """`base/part/...` for a local path (a Path) or a URL (a str)."""
    if not is_remote(base):
        return Path(base).joinpath(*parts)
    return "/".join([str(base).rstrip("/"), *parts])


def name(location: Location) -> str:
    return str(location).rstrip("/").rsplit("/", 1)[-1]


def filesystem(location: Location):
    """The fsspec file system and the path within it."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(str(location))
    return fs, path


def exists(location: Location) -> bool:
    if not is_remote(location):
        return Path(location).exists()
    fs, path = filesystem(location)
    return fs.exists(path)


def read_text(location: Location) -> str | None:
    """The text of a file or object, or None where there is none."""
    if not is_remote(location):
        path = Path(location)
        return path.read_text() if path.is_file() else None
    fs, path = filesystem(location)
    try:
        return fs.cat_file(path).decode("utf-8")
    except FileNotFoundError:
        return None


def list_names(location: Location) -> list[str]:
    """Names directly inside a folder or prefix, sorted ([] where there is none)."""
    if not is_remote(location):
        path = Path(location)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    fs, path = filesystem(location)
    try:
        return sorted(name(entry) for entry in fs.ls(path, detail=False, refresh=True))
    except FileNotFoundError:
        return []


def is_folder(location: Location) -> bool:
    if not is_remote(location):
        return Path(location).is_dir()
    fs, path = filesystem(location)
    return fs.isdir(path)


def files_under(location: Location) -> list[Location]:
    """Every file below a folder or prefix, at any depth, in a stable (sorted) order."""
    if not is_remote(location):
        return sorted(p for p in Path(location).rglob("*") if p.is_file())
    fs, path = filesystem(location)
    protocol = str(location).split("://", 1)[0]
    return [f"{protocol}://{found}" for found in sorted(fs.find(path))]


def upload(local: Path, location: Location) -> None:
    """Publish one finished local file under its final name: one PUT, never a partial object."""
    fs, path = filesystem(location)
    fs.put_file(str(local), path)


def download(location: Location, local: Path) -> Path:
    """Fetch an object into a local file, atomically (a reader of `local` sees it whole)."""
    local.parent.mkdir(parents=True, exist_ok=True)
    fs, path = filesystem(location)
    tmp = local.with_name(f".{local.name}.part")
    fs.get_file(path, str(tmp))
    os.replace(tmp, local)
    return local


def remove(location: Location) -> None:
    """Delete a file, object, folder or prefix; nothing there is not an error."""
    if not is_remote(location):
        path = Path(location)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        return
    fs, path = filesystem(location)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def scratch_dir(location: Location) -> Path:
    """A local folder standing in for a remote one while its content is made (stable per URL,
    so an interrupted attempt's leftovers are found and cleared by the next)."""
    root = Path(os.environ.get("ANIMEGAMER_SCRATCH") or Path(tempfile.gettempdir()))
    digest = hashlib.sha1(str(location).encode()).hexdigest()[:16]
    return root / "animegamer-scratch" / f"{name(location)}-{digest}"


def local_film(location: Location) -> Path:
    """A local path to read a film from: itself, or a copy fetched once per node into a cache
    (named by the URL and the object's ETag or size, so a changed object is fetched again)."""
    if not is_remote(location):
        return Path(location)
    fs, path = filesystem(location)
    info = fs.info(path)
    version = str(info.get("ETag") or info.get("etag") or info.get("size"))
    digest = hashlib.sha1(f"{location}\n{version}".encode()).hexdigest()[:16]
    local = scratch_dir("films") / digest / name(location)
    if not local.is_file():
        download(location, local)
    return local


def committed_film_dirs(location: Location, marker: str, skip: str = "work") -> list[Location]:
    """The film folders a reader may trust, at any depth: the location itself when its commit
    marker exists, else every folder below holding one (found with one listing of the prefix),
    sorted; a committed folder's own sub-folders, and any `skip` folder (a film's uncommitted
    segment parts), are not film folders."""
    if exists(join(location, marker)):
        return [location]
    fs, path = filesystem(location)  # callers pass URLs; fsspec lists a local folder the same way
    base = path.rstrip("/")
    files = [found[len(base) + 1 :] for found in fs.find(base)]
    parts = [f.split("/") for f in files]
    found = {"/".join(p[:-1]) for p in parts if len(p) > 1 and p[-1] == marker and skip not in p}
    nested = {f for f in found if any(f.startswith(other + "/") for other in found)}
    return [join(location, *f.split("/")) for f in sorted(found - nested)]


def open_parquet(location: Location) -> pq.ParquetFile:
    """The Parquet file at `location`, to read: a local file through Arrow's own file, an object
    through fsspec as a seekable file (only the byte ranges read are fetched), read on the calling
    thread alone.

    Why the calling thread (issue 30): an fsspec file hands Arrow Python bytes, and Arrow drops
    its last reference to one on whichever of its threads finished with it, taking the GIL there
    to free it. A thread that comes to it late (a loaded machine) while the interpreter has begun
    to exit is ended by Python 3.11 with pthread_exit, whose unwinding meets the noexcept
    ~PyBuffer: std::terminate, "terminate called without an active exception" and SIGABRT after
    every output was written. So a Python file is read with pre-buffering off (no read runs on
    Arrow's I/O pool) and use_threads=False (no column is decoded on its CPU pool); a local file
    never becomes a Python object, and Arrow's threads read it as fast as they can."""
    import pyarrow.parquet as pq

    if not is_remote(location):
        return pq.ParquetFile(location)
    fs, path = filesystem(location)
    return _read_on_calling_thread()(fs.open(path, "rb"), pre_buffer=False)


@functools.cache
def _read_on_calling_thread() -> type[pq.ParquetFile]:
    """A ParquetFile whose every read runs on the calling thread (see open_parquet)."""
    import pyarrow.parquet as pq

    class ReadOnCallingThread(pq.ParquetFile):
        def read(self, *args, **kwargs):
            return super().read(*args, use_threads=False, **kwargs)

        def read_row_group(self, *args, **kwargs):
            return super().read_row_group(*args, use_threads=False, **kwargs)

        def read_row_groups(self, *args, **kwargs):
            return super().read_row_groups(*args, use_threads=False, **kwargs)

        def iter_batches(self, *args, **kwargs):
            return super().iter_batches(*args, use_threads=False, **kwargs)

    return ReadOnCallingThread


def mirror_committed(location: Location, summary_name: str) -> Path:
    """A local copy of the committed films of a remote dataset or film folder: those whose
    `summary_name` (the commit marker) exists; files already copied with the same size are kept.
    A local location is returned as it is."""
    if not is_remote(location):
        return Path(location)
    local_root = scratch_dir(location) / "mirror"
    base = str(location).rstrip("/")
    for remote in committed_film_dirs(location, summary_name):
        inside = str(remote)[len(base) + 1 :]  # the film's path under the location, nested or not
        _mirror_folder(remote, local_root / inside if inside else local_root)
    return local_root


def _mirror_folder(remote: Location, local: Path, exact: bool = False) -> None:
    """Copy what changed since the last copy (by the objects' ETags, else sizes); `exact`:
    remove as well every local file the store lacks (a leftover of another pass)."""
    fs, path = filesystem(remote)
    index = local / ".mirror-versions.json"
    known = json.loads(index.read_text()) if index.is_file() else {}
    versions = {}
    for found in fs.find(path, detail=True).values():
        relative = found["name"][len(path.rstrip("/")) + 1 :]
        if relative.startswith("work/"):
            continue  # uncommitted segment parts: never read
        versions[relative] = str(found.get("ETag") or found.get("size"))
        target = local / relative
        if not target.is_file() or known.get(relative) != versions[relative]:
            download(f"{str(remote).split('://', 1)[0]}://{found['name']}", target)
    for relative in set(known) - set(versions):  # gone from the store: gone from the copy
        (local / relative).unlink(missing_ok=True)
    if exact and local.is_dir():
        for relative in set(_snapshot(local)) - set(versions):
            (local / relative).unlink()
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps(versions))


def publish_folder(local: Path, remote: Location, marker: str) -> None:
    """Upload a finished local folder over a remote one. Its commit marker is removed first and
    uploaded last; remote files the local folder no longer has are removed before the marker
    returns (a `work/` folder of segment parts is left to its owner, the run)."""
    remove(join(remote, marker))
    files = {
        p.relative_to(local).as_posix(): p
        for p in sorted(local.rglob("*"))
        if p.is_file() and not p.name.startswith(".") and p.name != marker
    }
    for relative, path in files.items():
        upload(path, join(remote, *relative.split("/")))
    fs, root = filesystem(remote)
    for found in fs.find(root):
        relative = found[len(root.rstrip("/")) + 1 :]
        if relative not in files and relative != marker and not relative.startswith("work/"):
            fs.rm(found)
    upload(local / marker, join(remote, marker))


@contextmanager
def working_copy(location: Location, marker: str, beside: tuple[str, ...] = ()) -> Iterator[Path]:
    """A local folder to read and rewrite a dataset or film folder in: the folder itself when it
    is local; for a URL, a local copy of its committed films, whose changed films are published
    back with `publish_folder` (and other new or changed files uploaded) when the block ends
    without an error.

    `beside` names folders of the location's own, outside its films (an index), copied in as
    well (only their objects that changed since this node's last copy): what the block writes
    in them is uploaded, and what it removes from them is removed from the store after every
    upload, so a file that names others (an index's commit) never names a removed one."""
    if not is_remote(location):
        yield Path(location)
        return
    local = mirror_committed(location, marker)
    for folder in beside:
        _mirror_folder(join(location, folder), local / folder, exact=True)
    before = _snapshot(local)
    yield local
    after = _snapshot(local)
    changed = {relative for relative, stamp in after.items() if before.get(relative) != stamp}
    film_dirs = {p.parent for p in local.rglob(marker)}
    for film_dir in sorted(film_dirs):
        prefix = film_dir.relative_to(local).as_posix()
        inside = prefix + "/" if prefix != "." else ""
        if any(relative.startswith(inside) for relative in changed):
            publish_folder(film_dir, join(location, *([prefix] if inside else [])), marker)
    for relative in sorted(changed):
        if not any((local / relative).is_relative_to(d) for d in film_dirs):
            upload(local / relative, join(location, *relative.split("/")))
    for relative in sorted(set(before) - set(after)):
        if relative.split("/", 1)[0] in beside:
            remove(join(location, *relative.split("/")))


@contextmanager
def working_copies(locations: list, marker: str) -> Iterator[list[Path]]:
    """`working_copy` of each location, all published back together at the end."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield [stack.enter_context(working_copy(location, marker)) for location in locations]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
