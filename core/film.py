"""A film's output folder, OUT/<film_slug>/, as one typed object.

    shards/clips-NNNNN.parquet   clip rows with media bytes, rotated by size
    manifest.parquet              the same rows without media bytes (for notebooks)
    drops.parquet                 every window that did not become a clip, with its reason
    summary.json                  film facts, crop box, scenes, counts, stage seconds, config
    caption_cache.jsonl           finished captions, reused by later captioning runs
    review.parquet                a person's accept/reject decisions and caption corrections
    work/segment-NNNNN/           per-segment parts and their DONE.json marker (removed once complete)

Every file name of the folder is spelled here and nowhere else. summary.json and the segments'
DONE.json are typed records (`FilmSummary`, `SegmentStats`) with one reader and one writer each,
and every file access goes through `FilmFolder`'s methods and core/io.py, the one seam where a
remote file system would plug in.

The records keep the JSON exactly as it is: keys they do not know are carried through, and keys a
file does not have are not added when it is written back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from core.io import write_json_atomic
from core.pixels import shape_words

SHARDS_DIR = "shards"
MANIFEST_FILE = "manifest.parquet"
DROPS_FILE = "drops.parquet"
SUMMARY_FILE = "summary.json"
WORK_DIR = "work"
DONE_FILE = "DONE.json"
SHARDS_STAGING = "shards.staging"
CAPTION_CACHE_FILE = "caption_cache.jsonl"
REVIEW_FILE = "review.parquet"  # a person's decisions (pipeline/data/review.py)
REVIEW_LOCK_FILE = ".review.lock"  # held while review.parquet is rewritten
# beside a shard while captioning rewrites it; not named "shards", so readers never take its
# files for shards
CAPTION_REWRITE_DIR = ".caption-rewrite"


class FolderError(ValueError):
    """A file of the film folder exists but cannot be read; the message names it."""


@dataclass
class JsonRecord:
    """A JSON object with typed known keys. Unknown keys are kept in `extra`; known keys the
    object did not have are listed in `absent` and left out again by `to_dict`."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    NESTED: ClassVar[dict[str, type[JsonRecord]]] = {}  # keys holding a record (or a list)
    TRANSIENT: ClassVar[frozenset[str]] = frozenset()  # in memory only, never written

    @classmethod
    def known_keys(cls) -> set[str]:
        return {f.name for f in fields(cls)} - {"extra", "absent"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        known = cls.known_keys()
        values = {}
        extra = {k: v for k, v in data.items() if k not in known}
        for name in known & data.keys():
            value, nested = data[name], cls.NESTED.get(name)
            if nested is None or value is None:
                values[name] = value
            elif isinstance(value, dict):
                values[name] = nested.from_dict(value)
            elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
                values[name] = [nested.from_dict(v) for v in value]
            else:  # not the record it should be: carried through untouched, read as absent
                extra[name] = value
        absent = frozenset(known - values.keys() - cls.TRANSIENT)
        return cls(**values, extra=extra, absent=absent)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.known_keys() - self.absent - self.TRANSIENT:
            out[name] = _plain(getattr(self, name))
        return out | self.extra

    def updated(self, **changes: Any) -> Self:
        """A copy with `changes`; a changed key is written even if the file did not have it."""
        return replace(self, absent=self.absent - changes.keys(), **changes)


@dataclass
class FilmFacts(JsonRecord):
    """The probed facts of the source film (stages/probe.py FilmInfo.facts())."""

    path: str | None = None
    film_id: str | None = None
    film_name: str | None = None
    slug: str | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    time_base: str | None = None
    num_frames: int | None = None
    duration: float | None = None
    vfr: bool | None = None
    rotation: int | None = None
    codec: str | None = None
    keyframes: int | None = None
    container_duration: float | None = None
    has_audio: bool | None = None
    warnings: list[str] = field(default_factory=list)
    sar: str | None = None  # the stored pixels' sample aspect ratio, "32:27"; None: not recorded
    field_pictures: int | None = None  # fields coded one by one, paired into the frames counted

    def shape_words(self) -> str:
        """`anamorphic 720x480 SAR 32:27, shown as 853x480`, or empty for square pixels."""
        if self.sar is None or self.width is None or self.height is None:
            return ""
        return shape_words(self.width, self.height, self.sar, self.rotation)


@dataclass
class CropRecord(JsonRecord):
    """The crop box in stored source pixels (upright; not square where the film's `sar` is not
    1:1) and where it came from (detected, manifest, setting)."""

    x: int = 0
    y: int = 0
    w: int = 0
    h: int = 0
    source: str | None = None
    # stored pixels of dark edge strips cropped inside the bars (left, right, top, bottom;
    # stages/sources/edge_strips.py), written only where there are some
    strips: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, x: int, y: int, w: int, h: int, source: str, strips: Sequence[int]) -> CropRecord:
        """The record of a crop box; `strips` left out of the file when all are 0."""
        absent = frozenset() if any(strips) else frozenset({"strips"})
        return cls(x=x, y=y, w=w, h=h, source=source, strips=list(strips), absent=absent)

    def line(self) -> str:
        """The console's words for the edge strips: `dark edges cropped: left 8, right 10, top
        2 px`, or ''."""
        named = [
            f"{side} {n}" for side, n in zip(("left", "right", "top", "bottom"), self.strips) if n
        ]
        return f"dark edges cropped: {', '.join(named)} px" if named else ""

    @property
    def box(self) -> tuple[int, int, int, int] | None:
        """x, y, w, h; None when the file did not record all four."""
        if {"x", "y", "w", "h"} & self.absent:
            return None
        return int(self.x), int(self.y), int(self.w), int(self.h)


@dataclass
class OverlayRecord(JsonRecord):
    """summary.json's `overlays`: what was drawn over the film's picture (stages/burned_in/overlays.py),
    in the film's displayed source pixels, the crop box's coordinates."""

    subtitle_bands: list[list[int]] = field(default_factory=list)  # [[y0, y1], ...], y1 exclusive
    subtitle_share: float = 0.0  # share of the sampled frames with text in a band, 0..1
    logos: list[list[int]] = field(default_factory=list)  # [[x, y, w, h], ...]
    frames_sampled: int = 0  # sampled key frames that show a picture (black ones left out)
    text_scale: float = 1.0  # source pixels to the text detector's pixels
    # [[y0, y1], ...]: a web player's interface at the picture's top or bottom, cropped away
    player_rows: list[list[int]] = field(default_factory=list)
    # [[start, stop], ...] seconds: stretches whose samples show text over the picture (not in a
    # band, not a logo); the quality stage looks at their clips closely (stages/burned_in/picture_text.py)
    text_spans: list[list[float]] = field(default_factory=list)

    def line(self) -> str:
        """The console's words: `hardsubbed: 71 % of frames, band y 420-470; logo at x
        1700-1880 y 40-110`, or `no overlays`."""
        parts = []
        if self.subtitle_bands:
            bands = ", ".join(f"y {y0}-{y1}" for y0, y1 in self.subtitle_bands)
            parts.append(f"hardsubbed: {self.subtitle_share * 100:.0f} % of frames, band {bands}")
        parts += [f"logo at x {x}-{x + w} y {y}-{y + h}" for x, y, w, h in self.logos]
        parts += [f"player bar y {y0}-{y1} cropped" for y0, y1 in self.player_rows]
        if self.text_spans:
            seconds = sum(stop - start for start, stop in self.text_spans)
            parts.append(
                f"text over the picture in {len(self.text_spans)} stretch"
                f"{'es' if len(self.text_spans) > 1 else ''} ({seconds:.0f} s), looked at closely"
            )
        return "; ".join(parts) if parts else "no overlays"


@dataclass
class FieldRecord(JsonRecord):
    """summary.json's `fields`: the film's field structure (stages/sources/field_pass.py) and what was
    done about it. `structure` is progressive, telecined, interlaced or hybrid; `parts` are the
    probed runs of frames, [start, stop, kind] (kind: progressive, telecined, interlaced,
    still, or unsure: mended frames too few to show a cycle); `restored_frames` and `restored_fps` are filled once the film is cut: the frames
    the segments kept and their rate (decimation drops one telecine duplicate in five)."""

    structure: str = "progressive"
    field_order: str | None = None  # "top" or "bottom" first, for what is not progressive
    cadence: str | None = None  # "3:2", "2:3:3:2" or "broken", for telecined parts
    stream_field_order: str | None = None  # what the stream's flags say (often wrong)
    key_frames_combed: int = 0  # of key_frames_seen, with comb teeth
    key_frames_seen: int = 0
    parts: list[list[Any]] = field(default_factory=list)
    restoration: str | None = None  # the filter chain the segments ran, None: none
    restored_frames: int | None = None
    restored_fps: float | None = None

    def line(self) -> str:
        """The console's words: `telecined 3:2, restored to 23.976 fps`, `interlaced, top
        field first, deinterlaced`; empty for a progressive film."""
        order = f"{self.field_order} field first"
        rate = f"{self.restored_fps:.3f} fps" if self.restored_fps else "its film rate"
        if self.structure == "telecined":
            return f"telecined {self.cadence or '3:2'}, restored to {rate}"
        if self.structure == "interlaced":
            return f"interlaced, {order}, deinterlaced"
        if self.structure == "hybrid":
            return (
                f"hybrid: telecined {self.cadence or '3:2'} and interlaced ({order}) parts, "
                f"restored per frame to {rate}"
            )
        return ""

    def worded(self) -> str:
        """The report's words: the console's, or what made the film progressive."""
        if self.line():
            return self.line()
        probed = f"; {len(self.parts)} probed runs" if self.parts else ""
        combed = f"{self.key_frames_combed} of {self.key_frames_seen} key frames combed"
        return f"progressive ({combed}{probed})"


@dataclass
class SourceScale(JsonRecord):
    """How much a film's clips enlarge its picture: the clip region of the crop (the source
    pixels a clip shows, the film's window, in square pixels as shown: 640x426 for a 720x426
    window of 8:9 pixels) and the factor it is scaled by into the clip's size. Recorded only
    when the factor is over 1."""

    factor: float = 1.0
    width: int = 0
    height: int = 0

    @property
    def note(self) -> str:
        return f"upscaled {self.factor:.2f}x from {self.width}x{self.height}"


@dataclass
class QualityCounts(JsonRecord):
    """summary.json's `quality`: how the film's clips were decided (pipeline/passes/quality.py)."""

    usable: int = 0
    rejected: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)  # a clip with two counts under both
    duplicates: int = 0
    duplicates_checked: bool = False  # False until the folder pass compared it with other clips
    thresholds: dict[str, Any] = field(default_factory=dict)  # the RejectConfig that decided


@dataclass
class CaptionCounts(JsonRecord):
    """summary.json's `caption`: what the last captioning pass did (pipeline/passes/caption_films.py)."""

    model: str | None = None
    engine: str | None = None
    prompt_version: str | None = None
    num_frames: int = 0
    protagonists: list[str] = field(default_factory=list)
    clips: int = 0
    by_status: dict[str, int] = field(default_factory=dict)  # clips per caption_status
    from_cache: int = 0
    sent_to_model: int = 0
    requests: int = 0
    retried_requests: int = 0
    seconds: float = 0.0
    pending: int = 0
    cache_unreadable_lines: int = 0  # only when a model captioned
    hint: str | None = None  # only without a model: how to caption later


@dataclass
class WindowRecord(JsonRecord):
    """summary.json's `window`: the part of the crop box every clip of the film shows
    (stages/clips.py `place_window`), where it went and why. `centred` is where the centring
    rule alone puts it; `avoided` holds the overlays (summary.json's `overlays`, same keys) the
    centred window would show and this one does not, `shown` those it still shows, which the
    per-clip overlay rule then judges clip by clip."""

    x: int = 0
    y: int = 0
    w: int = 0
    h: int = 0
    centred: list[int] = field(default_factory=list)  # [x, y, w, h]
    avoided: dict[str, list[list[int]]] = field(default_factory=dict)
    shown: dict[str, list[list[int]]] = field(default_factory=dict)

    @property
    def region(self) -> tuple[int, int, int, int]:
        return int(self.x), int(self.y), int(self.w), int(self.h)

    @property
    def moved(self) -> bool:
        return bool(self.centred) and tuple(self.centred) != self.region

    def line(self) -> str:
        """The console's words, e.g. `window 480x320 moved 20 px up from the centre, clear of
        subtitle band y 326-348`, with `; still shows logo at x 498-630 y 10-33` where it
        could not avoid one; empty for a centred window that shows no overlay."""
        parts = []
        if self.moved:
            dx, dy = self.x - self.centred[0], self.y - self.centred[1]
            steps = [f"{abs(dx)} px {'left' if dx < 0 else 'right'}"] if dx else []
            steps += [f"{abs(dy)} px {'up' if dy < 0 else 'down'}"] if dy else []
            clear = overlay_words(self.avoided)
            parts.append(
                f"window {self.w}x{self.h} moved {' and '.join(steps)} from the centre"
                + (f", clear of {clear}" if clear else "")
            )
        still = overlay_words(self.shown)
        if still:
            parts.append(f"window still shows {still}")
        return "; ".join(parts)


def overlay_words(overlays: Mapping[str, list[list[int]]]) -> str:
    """`subtitle band y 326-348, logo at x 498-630 y 10-33`: overlays named as people read them."""
    words = [f"subtitle band y {y0}-{y1}" for y0, y1 in overlays.get("subtitle_bands", [])]
    words += [f"logo at x {x}-{x + w} y {y}-{y + h}" for x, y, w, h in overlays.get("logos", [])]
    return ", ".join(words)


@dataclass
class FilmSummary(JsonRecord):
    """summary.json. None (or empty) is 'not recorded': readers say so rather than guess."""

    NESTED: ClassVar[dict[str, type[JsonRecord]]] = {
        "film": FilmFacts,
        "crop": CropRecord,
        "overlays": OverlayRecord,
        "upscaled": SourceScale,
        "quality": QualityCounts,
        "caption": CaptionCounts,
        "window": WindowRecord,
        "fields": FieldRecord,
    }

    schema_version: str | None = None
    complete: bool = False
    film: FilmFacts = field(default_factory=FilmFacts)
    ip: str | None = None
    crop: CropRecord | None = None
    overlays: OverlayRecord | None = None  # None: overlays.enabled was off
    fields: FieldRecord | None = None  # None: fields.enabled was off
    upscaled: SourceScale | None = None  # the clips enlarge the picture (None: they do not)
    segments: int = 0
    segments_reused: int = 0
    # per segment: index, frames, clips, whether it was reused, the Ray node it ran on, seconds
    segment_runs: list[dict[str, Any]] | None = None
    failed_segments: dict[Any, str] = field(default_factory=dict)  # segment index -> error
    scenes: list[list[int]] | None = None  # [start, stop) frame ranges
    segment_boundaries: list[int] = field(default_factory=list)
    clips_written: int | None = None
    clips_failed: int | None = None
    frames_decoded: int = 0
    corrupt_packets: int = 0
    unmatched_frames: int = 0
    late_cuts: int = 0
    window: WindowRecord | None = None  # None: written before the window could move
    black_frames: int = 0  # frames inside sustained black runs (scene boundaries, docs/quality.md)
    drops: dict[str, int] | None = None  # reason -> windows
    stage_seconds: dict[str, float] | None = None
    wall_seconds: float | None = None
    captions: str | None = None  # pending, complete or incomplete
    caption: CaptionCounts | None = None
    motion_levels: dict[str, Any] | None = None
    quality: QualityCounts | None = None
    fingerprint: str | None = None
    config: dict[str, Any] | None = None


@dataclass
class SegmentSpan(JsonRecord):
    """The frames a segment owns, [start, stop), planned from the film alone
    (pipeline/segments.plan_segments); `is_last` marks the film's last segment."""

    index: int = 0
    start: int = 0
    stop: int = 0
    is_last: bool = False


@dataclass
class Drop(JsonRecord):
    """A window (or a whole short scene) that did not become a clip, and why (one row of
    drops.parquet once its film and segment are added)."""

    reason: str = ""
    start_frame: int = 0
    end_frame: int = 0
    start_time: float = 0.0
    end_time: float = 0.0
    detail: str = ""


@dataclass
class SegmentStats(JsonRecord):
    """What one segment produced: its DONE.json marker, and what `run_segment` returns."""

    NESTED: ClassVar[dict[str, type[JsonRecord]]] = {"segment": SegmentSpan, "drop_list": Drop}
    TRANSIENT: ClassVar[frozenset[str]] = frozenset({"skipped", "ran_on"})

    segment: SegmentSpan = field(default_factory=SegmentSpan)
    clips_written: int = 0
    clips_failed: int = 0
    frames: int = 0
    corrupt_packets: int = 0
    unmatched_frames: int = 0
    late_cuts: int = 0
    black_frames: int = 0
    fields_dropped: int = (
        0  # telecine duplicates decimation left out (stages/sources/field_restore.py)
    )
    drop_list: list[Drop] = field(default_factory=list)
    scenes: list[list[int]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    fingerprint: str | None = None
    ip: str | None = None
    window: list[int] | None = None  # the clips' window [x, y, w, h] (summary.json `window`)
    skipped: bool = False  # reused from an earlier run
    ran_on: dict[str, str] | None = None  # the node and host the executor ran it on


@dataclass(frozen=True)
class FilmFolder:
    """OUT/<film_slug>/: where each file of a film lives, and the one reader and writer of its
    summary and segment markers."""

    path: Path

    @property
    def slug(self) -> str:
        return self.path.name

    @property
    def shards(self) -> Path:
        return self.path / SHARDS_DIR

    @property
    def shards_staging(self) -> Path:
        return self.path / SHARDS_STAGING

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST_FILE

    @property
    def drops(self) -> Path:
        return self.path / DROPS_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def caption_cache(self) -> Path:
        return self.path / CAPTION_CACHE_FILE

    @property
    def review(self) -> Path:
        return self.path / REVIEW_FILE

    @property
    def review_lock(self) -> Path:
        return self.path / REVIEW_LOCK_FILE

    @property
    def work(self) -> Path:
        return self.path / WORK_DIR

    def segment_dir(self, index: int) -> Path:
        return self.work / f"segment-{index:05d}"

    def done_marker(self, index: int) -> Path:
        return self.segment_dir(index) / DONE_FILE

    def has_shards(self) -> bool:
        return self.shards.is_dir()

    @staticmethod
    def discover(location: str | Path) -> list:
        """The film folders at or under `location`, at any depth (a series folder of episode
        folders is found whole), sorted by path; a film folder's own sub-folders are not
        searched. On a local disk a film folder holds shards/; in object storage (an fsspec URL)
        one holds a committed summary.json, found with one listing of the prefix. The one
        answer to "which films are under here", for every command and the trainer."""
        from core import storage

        if storage.is_remote(location):
            return _remote_film_folders(str(location))
        root = Path(location)
        if (root / SHARDS_DIR).is_dir():
            return [root]
        if not root.is_dir():
            return []
        found = []
        for child in sorted(root.iterdir()):
            if child.is_dir() and not child.name.startswith(".") and child.name != WORK_DIR:
                found += FilmFolder.discover(child)
        return found

    # --- summary.json

    def read_summary(self) -> FilmSummary | None:
        """The summary, or None when the film has none yet; unreadable JSON is a FolderError."""
        data = _read_json(self.summary_file)
        return None if data is None else FilmSummary.from_dict(data)

    def write_summary(self, summary: FilmSummary) -> Path:
        return write_json_atomic(summary.to_dict(), self.summary_file)

    def update_summary(
        self, change: Callable[[FilmSummary], FilmSummary], create: bool = True
    ) -> FilmSummary | None:
        """Read, change and write back the summary: the one way a later pass (captioning,
        motion-calibrate) records itself. Without a summary, `create` starts an empty one
        (holding only what `change` sets); otherwise nothing is written."""
        summary = self.read_summary()
        if summary is None:
            if not create:
                return None
            summary = FilmSummary.from_dict({})
        summary = change(summary)
        self.write_summary(summary)
        return summary

    # --- work/segment-NNNNN/DONE.json

    def read_segment_stats(self, index: int) -> SegmentStats | None:
        data = _read_json(self.done_marker(index))
        return None if data is None else SegmentStats.from_dict(data)

    def write_segment_stats(self, index: int, stats: SegmentStats) -> Path:
        return write_json_atomic(stats.to_dict(), self.done_marker(index))


def _plain(value: Any) -> Any:
    """A record (or a list of them) as the JSON it came from."""
    if isinstance(value, JsonRecord):
        return value.to_dict()
    if isinstance(value, list):
        return [v.to_dict() if isinstance(v, JsonRecord) else v for v in value]
    return value


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FolderError(f"{path}: not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(data, dict):
        raise FolderError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _remote_film_folders(location: str) -> list[str]:
    from core import storage

    return [str(f) for f in storage.committed_film_dirs(location, SUMMARY_FILE, skip=WORK_DIR)]
