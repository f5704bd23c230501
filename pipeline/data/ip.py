"""Anime IPs: a franchise's films, its protagonists' reference images, per-film overrides.

An IP is one YAML file, `manifests/<ip>.yaml`:

    name: sintel
    films:
      - path: ../samples/sintel_trailer.mp4      # relative to the manifest file
        overrides: {crop: {box: [0, 56, 854, 368]}, scenes: {threshold: 2.5}}
    protagonists:
      - name: Sintel
        images: [sintel/sintel_1.png]             # relative to the manifest file

`overrides` uses the pipeline's configuration sections (see `animegamer dataset --help`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

GENERIC = "generic"
MANIFEST_DIR = Path(__file__).resolve().parents[2] / "manifests"


class ManifestError(ValueError):
    pass


@dataclass
class Protagonist:
    name: str
    images: list[Path]


@dataclass
class FilmEntry:
    path: Path
    overrides: dict = field(default_factory=dict)


@dataclass
class IP:
    name: str
    films: list[FilmEntry] = field(default_factory=list)
    protagonists: list[Protagonist] = field(default_factory=list)
    source: Path | None = None

    def overrides_for(self, film_path: str | Path) -> dict:
        """The manifest's overrides for a film: the entry naming the same file (by resolved path,
        or by file name when one of the two does not exist)."""
        film_path = Path(film_path)
        for entry in self.films:
            if _same_file(entry.path, film_path):
                return entry.overrides
        return {}


def load_ip(name_or_path: str | Path | None) -> IP:
    """An IP by name (manifests/<name>.yaml) or by manifest path; None or 'generic' is the IP
    with no characters."""
    if name_or_path in (None, "", GENERIC):
        return IP(GENERIC)
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = MANIFEST_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in MANIFEST_DIR.glob("*.yaml"))
        raise ManifestError(
            f"{path}: no such IP manifest (known IPs: {', '.join(known) or 'none'})"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML ({exc})") from None
    return _parse(data, path)


def _parse(data, path: Path) -> IP:
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a mapping with name, films and protagonists")
    unknown = set(data) - {"name", "films", "protagonists", "description"}
    if unknown:
        raise ManifestError(f"{path}: unknown keys {sorted(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ManifestError(
            f"{path}: 'name' must be a word of letters, digits, _ . - (got {name!r})"
        )
    base = path.parent
    films = [_film(item, base, path) for item in data.get("films") or []]
    protagonists = [_protagonist(item, base, path) for item in data.get("protagonists") or []]
    return IP(name, films, protagonists, path)


def _film(item, base: Path, path: Path) -> FilmEntry:
    if isinstance(item, str):
        item = {"path": item}
    if not isinstance(item, dict) or "path" not in item:
        raise ManifestError(f"{path}: each film needs a 'path' (got {item!r})")
    overrides = item.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ManifestError(f"{path}: overrides of {item['path']} must be a mapping of sections")
    _check_overrides(overrides, f"{path}: overrides of {item['path']}")
    return FilmEntry((base / item["path"]).resolve(), overrides)


def _check_overrides(overrides: dict, source: str) -> None:
    """Try the overrides on a default configuration now, not when the film's turn comes."""
    from pipeline.data.config import ConfigError, PipelineConfig, apply_mapping, check_choices

    config = PipelineConfig()
    try:
        apply_mapping(config, overrides, source)
        check_choices(config, source)
    except ConfigError as exc:
        raise ManifestError(str(exc)) from None


def _protagonist(item, base: Path, path: Path) -> Protagonist:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ManifestError(f"{path}: each protagonist needs a 'name' (got {item!r})")
    images = [(base / p).resolve() for p in item.get("images") or []]
    missing = [str(p) for p in images if not p.is_file()]
    if missing:
        raise ManifestError(f"{path}: reference images of {item['name']} not found: {missing}")
    return Protagonist(item["name"], images)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or a.samefile(b)
    except OSError:
        return a.name == b.name
