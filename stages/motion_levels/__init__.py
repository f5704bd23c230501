"""Motion levels: the four edges that cut the motion scope into levels 1..5, kept as data.

Each JSON file in this folder (or anywhere, given by path) holds one versioned set of edges; the
version is stored with every clip (`motion_levels_version`) so a level is never read without the
edges that made it. A clip's level is 1 + the number of edges at or below its scope, so a scope
equal to an edge belongs to the upper level. Nothing here imports OpenCV or torch: recalibrating
levels (pipeline/commands/motion_calibrate.py) reads only the stored scopes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from core.vocabulary import MOTION_LEVELS

LEVELS_DIR = Path(__file__).resolve().parent
DEFAULT_LEVELS = "decoder-midpoints-v1"
NUM_LEVELS = len(MOTION_LEVELS)  # levels 1..5 (core/vocabulary.py)


class LevelsError(ValueError):
    """A level-edges file is missing or malformed, or edges cannot be calibrated."""


@dataclass(frozen=True)
class MotionLevels:
    version: str
    edges: tuple[float, ...]
    representative: tuple[float, ...] | None = None
    method: str = ""
    justification: str = ""
    source: str = ""

    def level(self, scope: float) -> int:
        return 1 + int(np.searchsorted(self.edges, scope, side="right"))

    def levels(self, scopes: np.ndarray) -> np.ndarray:
        """Vectorised `level` for an array of scopes (no NaN: callers drop missing scopes)."""
        return 1 + np.searchsorted(np.asarray(self.edges), np.asarray(scopes, float), side="right")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["edges"] = list(self.edges)
        data["representative"] = list(self.representative) if self.representative else None
        return data


def load_levels(name_or_path: str | Path) -> MotionLevels:
    """Load edges by name (a file `<name>.json` in this folder) or by path to a JSON file."""
    path = resolve_levels_path(name_or_path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LevelsError(f"{path}: not valid JSON ({exc})") from None
    return levels_from_dict(data, source=str(path))


def resolve_levels_path(name_or_path: str | Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or candidate.parent != Path("."):
        if candidate.is_file():
            return candidate
        raise LevelsError(f"{candidate}: level-edges file not found")
    bundled = LEVELS_DIR / f"{name_or_path}.json"
    if bundled.is_file():
        return bundled
    known = ", ".join(sorted(p.stem for p in LEVELS_DIR.glob("*.json")))
    raise LevelsError(
        f"motion levels {name_or_path!r}: no file {bundled} (bundled: {known}); "
        f"give a name from this list or a path to a JSON file"
    )


def levels_from_dict(data: dict, source: str) -> MotionLevels:
    if not isinstance(data, dict):
        raise LevelsError(f"{source}: expected a JSON object with 'version' and 'edges'")
    for key in ("version", "edges"):
        if key not in data:
            raise LevelsError(f"{source}: missing key '{key}'")
    edges = _checked_edges(data["edges"], source)
    representative = data.get("representative")
    if representative is not None and len(representative) != NUM_LEVELS:
        raise LevelsError(
            f"{source}: 'representative' needs {NUM_LEVELS} values, got {len(representative)}"
        )
    return MotionLevels(
        version=str(data["version"]),
        edges=edges,
        representative=tuple(map(float, representative)) if representative else None,
        method=str(data.get("method", "")),
        justification=str(data.get("justification", "")),
        source=str(data.get("source", "")),
    )


def _checked_edges(edges, source: str) -> tuple[float, ...]:
    try:
        values = tuple(float(e) for e in edges)
    except (TypeError, ValueError):
        raise LevelsError(f"{source}: 'edges' must be a list of numbers, got {edges!r}") from None
    if len(values) != NUM_LEVELS - 1:
        raise LevelsError(
            f"{source}: {NUM_LEVELS} levels need {NUM_LEVELS - 1} edges, "
            f"got {len(values)}: {list(values)}"
        )
    if not all(np.isfinite(values)) or any(b <= a for a, b in zip(values, values[1:])):
        raise LevelsError(
            f"{source}: edges must be finite and strictly increasing, got {list(values)}"
        )
    return values


# ----------------------------------------------------------------------------- calibration

EQUAL_POPULATION = (0.2, 0.4, 0.6, 0.8)
MIN_CLIPS_TO_CALIBRATE = 5


def calibrate_levels(
    scopes: np.ndarray, quantiles: tuple[float, ...] = EQUAL_POPULATION, note: str = ""
) -> MotionLevels:
    """Edges at the given quantiles of the scopes; the version is a hash of method and edges.

    Equal-population quantiles (the default) give each level a fifth of the clips, which is what
    a five-way classification target (the MLLM's motion level) trains best on. The representative
    value of each level is the median scope of its clips, ready for the decoder's conditioning.
    """
    scopes = np.asarray(scopes, float)
    scopes = scopes[np.isfinite(scopes)]
    if len(scopes) < MIN_CLIPS_TO_CALIBRATE:
        raise LevelsError(
            f"calibration needs at least {MIN_CLIPS_TO_CALIBRATE} clips with a "
            f"motion scope, found {len(scopes)}"
        )
    quantiles = _checked_quantiles(quantiles)
    edges = tuple(round(float(v), 4) for v in np.quantile(scopes, quantiles))
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise LevelsError(
            f"quantiles {list(quantiles)} of {len(scopes)} scopes give repeated edges "
            f"{list(edges)} (many clips share one scope, e.g. static clips at 0): "
            f"choose other quantiles with --quantiles"
        )
    method = (
        "equal-population"
        if quantiles == EQUAL_POPULATION
        else "quantiles-" + "-".join(f"{q:g}" for q in quantiles)
    )
    provisional = MotionLevels(version="", edges=edges)
    assigned = provisional.levels(scopes)
    counts = [int(np.sum(assigned == k)) for k in range(1, NUM_LEVELS + 1)]
    if 0 in counts:  # ties at an edge (many still shots at 0.0) can leave a level with no clip
        raise LevelsError(
            f"quantiles {list(quantiles)} give edges {list(edges)} that leave a level "
            f"empty (clips per level {counts}): choose other quantiles with --quantiles"
        )
    representative = tuple(
        round(float(np.median(scopes[assigned == k])), 4) for k in range(1, NUM_LEVELS + 1)
    )
    digest = hashlib.sha1(json.dumps([method, edges]).encode()).hexdigest()[:8]
    return MotionLevels(
        version=f"{method}-{digest}",
        edges=edges,
        representative=representative,
        method=method,
        justification=(
            f"quantiles {list(quantiles)} of the motion scopes of {len(scopes)} clips"
            + (f" ({note})" if note else "")
        ),
        source="animegamer motion-calibrate",
    )


def _checked_quantiles(quantiles) -> tuple[float, ...]:
    values = tuple(float(q) for q in quantiles)
    if (
        len(values) != NUM_LEVELS - 1
        or not all(0 < q < 1 for q in values)
        or any(b <= a for a, b in zip(values, values[1:]))
    ):
        raise LevelsError(
            f"need {NUM_LEVELS - 1} strictly increasing quantiles inside (0, 1), got {list(values)}"
        )
    return values


def write_levels(levels: MotionLevels, path: str | Path) -> Path:
    from core.io import write_json_atomic

    return write_json_atomic(levels.to_dict(), path)
