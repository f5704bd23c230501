"""From shard files to training batches.

The trainer reads only what the pipeline wrote. `ClipCatalog` reads the light columns of every
shard once (ids, order, motion, captions) and remembers where each clip's media bytes live, so a
sample decodes just its own video and first frame. Game sequences are runs of consecutive captioned
clips of one film in `clip_index` order; the last clip of a sequence is the target.

Order is a pure function of (seed, step): every rank takes its own slice of each epoch's
permutation, the DataLoader's workers take whole batches in turn, and a resumed run restarts the
stream at its step, so it sees exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

import itertools
import multiprocessing.context
import os
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core import storage
from core.film import REVIEW_FILE, SHARDS_DIR, FilmFolder
from core.shards import (
    RowLocation,
    check_schema_version,
    locate_rows,
    read_group_column,
    shard_paths,
)
from core.video import decode_image, decode_mp4
from core.vocabulary import GAME_STATES, STATE_NAMES
from pipeline.data.review import REJECT, Review, apply_review, read_review_file
from prompts.game import action_text, row_instruction

CATALOG_COLUMNS = [
    "clip_id",
    "film_id",
    "clip_index",
    "status",
    "motion_scope",
    "motion_level",
    "instruction",
    "characters",
    *STATE_NAMES,  # the game state's seven answers (core/vocabulary.py)
]
# Read where the shard has them: a clip of a shard without `usable` counts as usable.
USABLE_COLUMN = "usable"
OPTIONAL_COLUMNS = [USABLE_COLUMN, "motion_levels_version"]
CACHED_GROUPS = 4


class ClipCatalog:
    """Every clip's light columns, in shard order, plus where its media bytes are.

    Clips a shard marks not `usable` are left out of every sample unless `include_unusable`;
    `unusable` counts them. A person's review decisions (pipeline/data/review.py) win: an accepted
    clip is usable, corrected caption fields replace the model's, and a clip rejected in review is
    not read at all, even with `include_unusable` (`rejected_in_review` counts them; the gap it
    leaves ends its game sequence).
    """

    def __init__(self, locations: list[str | Path], include_unusable: bool = False):
        self.rows: list[dict] = []
        self.media: list[RowLocation] = []
        self.sources = [str(location) for location in locations]
        self.include_unusable = include_unusable
        self.rejected_in_review = 0
        self._film_reviews: dict[str, dict[str, Review]] = {}
        # resolved and deduplicated: a film named twice (data and data/film) would otherwise
        # interleave its clips with their copies and build sequences across the two
        paths = list(dict.fromkeys(p for location in locations for p in _clip_shards(location)))
        if not paths:
            raise FileNotFoundError(f"no clip shards under {', '.join(map(str, locations))}")
        for path in paths:
            self._read_shard(path)
        _check_one_clip_per_position(self.rows, self.sources)
        self.unusable = sum(1 for row in self.rows if not row[USABLE_COLUMN])
        self._groups: OrderedDict = OrderedDict()

    def _read_shard(self, path: Path | str) -> None:
        schema = storage.open_parquet(path).schema_arrow
        check_schema_version(schema, path)
        missing = set(CATALOG_COLUMNS) - set(schema.names)
        if missing:
            raise ValueError(f"{path}: shard lacks columns {sorted(missing)}")
        columns = CATALOG_COLUMNS + [c for c in OPTIONAL_COLUMNS if c in schema.names]
        reviews = self._reviews_of(path)
        for where, row in locate_rows(path, columns):
            row = apply_review(row, reviews.get(row["clip_id"]))
            if row["review_decision"] == REJECT:
                self.rejected_in_review += 1
                continue
            row[USABLE_COLUMN] = row.get(USABLE_COLUMN) is not False  # missing or null: usable
            row.setdefault("motion_levels_version", None)
            row["instruction"] = instruction_of(row)
            row["action"] = action_text(row["adverb"], row["motion_description"])
            self.rows.append(row)
            self.media.append(where)

    def _reviews_of(self, shard: Path | str) -> dict[str, Review]:
        """The review decisions of the film folder a shard belongs to (OUT/<film>/shards/), on
        a local disk or in object storage."""
        parts = str(shard).rsplit("/", 2)
        if len(parts) < 3 or parts[1] != SHARDS_DIR:
            return {}  # a shard file given on its own has no film folder to hold decisions
        film_dir = parts[0]
        if film_dir not in self._film_reviews:
            self._film_reviews[film_dir] = read_review_file(storage.join(film_dir, REVIEW_FILE))
        return self._film_reviews[film_dir]

    def trainable(self, index: int) -> bool:
        """May this clip be part of a training sample (usable, or unusable ones included)?"""
        return self.include_unusable or self.rows[index][USABLE_COLUMN]

    def __len__(self) -> int:
        return len(self.rows)

    def media_bytes(self, index: int, column: str) -> bytes:
        """One clip's `video` or `first_frame` bytes. The last few row groups read are kept: the
        clips of a game sequence are neighbours and usually share one."""
        where = self.media[index]
        key = (where.shard, where.row_group, column)
        if key not in self._groups:
            self._groups[key] = read_group_column(where, column)
            while len(self._groups) > CACHED_GROUPS:
                self._groups.popitem(last=False)
        self._groups.move_to_end(key)
        data = self._groups[key][where.row]
        if not data:
            raise ValueError(
                f"{where.shard}: clip {self.rows[index]['clip_id']} has no {column} bytes"
            )
        return data

    def __getstate__(self):  # DataLoader workers get the catalog without another worker's cache
        return {**self.__dict__, "_groups": OrderedDict()}


def _check_one_clip_per_position(rows: list[dict], sources: list[str]) -> None:
    """Two different clips at one (film, clip_index) mean two datasets of the same film (other
    settings) were mixed: game sequences would jump between them."""
    seen: dict[tuple, str] = {}
    for row in rows:
        key = (row["film_id"], row["clip_index"])
        if seen.setdefault(key, row["clip_id"]) != row["clip_id"]:
            raise ValueError(
                f"{', '.join(sources)}: film {row['film_id'][:8]} has two different clips "
                f"at clip_index {row['clip_index']}: shards of two datasets of one film "
                f"are mixed; give one of them"
            )


def _clip_shards(location: str | Path) -> list[Path | str]:
    """A file as given; under a folder, the clip shards (`clips-*.parquet`) the pipeline writes
    (resolved, so one film named twice is read once). In object storage: the shards of the
    films whose summary.json is committed, read in place, byte range by byte range."""
    if storage.is_remote(location):
        if not storage.is_folder(location):
            return [str(location)]
        return [
            str(storage.join(film, SHARDS_DIR, shard))
            for film in FilmFolder.discover(location)
            for shard in storage.list_names(storage.join(film, SHARDS_DIR))
            if shard.startswith("clips") and shard.endswith(".parquet")
        ]
    path = Path(location)
    if path.is_file():
        return [path.resolve()]
    return [p.resolve() for p in shard_paths(path) if p.name.startswith("clips")]


def instruction_of(row: dict) -> str | None:
    """The clip's game instruction; composed from the caption fields by the captioning side's
    own rule (prompts.game) when the shard has none."""
    return row.get("instruction") or row_instruction(row)


def is_captioned(row: dict) -> bool:
    """A clip a game turn can be made of: it is ok and every field of a turn is filled."""
    return (
        row["status"] == "ok"
        and bool(row["instruction"])
        and bool(row["motion_description"])
        and row["motion_scope"] is not None
        and all(row[f] is not None for f in GAME_STATES)
    )


def captioned_runs(rows: list[dict], include_unusable: bool = True) -> list[list[int]]:
    """Runs of consecutive captioned clips (by clip_index) within each film, in time order.

    A missing, uncaptioned or (unless included) unusable clip ends a run: a sequence never jumps
    over a gap in the film.
    """
    by_film = defaultdict(list)
    for index, row in enumerate(rows):
        by_film[row["film_id"]].append(index)
    runs: list[list[int]] = []
    for film in sorted(by_film):
        ordered = sorted(by_film[film], key=lambda i: rows[i]["clip_index"])
        run: list[int] = []
        for index in ordered:
            captioned = is_captioned(rows[index]) and (
                include_unusable or rows[index][USABLE_COLUMN]
            )
            gap = run and rows[index]["clip_index"] != rows[run[-1]]["clip_index"] + 1
            if gap or not captioned:
                runs, run = _close(runs, run), []
            if captioned:
                run.append(index)
        runs = _close(runs, run)
    return runs


def _close(runs: list, run: list) -> list:
    return runs + [run] if run else runs


def game_sequences(
    rows: list[dict], max_turns: int, include_unusable: bool = True
) -> list[list[int]]:
    """One sequence per captioned clip: up to `max_turns` clips ending at it (it is the target)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    return [
        run[max(0, end - max_turns + 1) : end + 1]
        for run in captioned_runs(rows, include_unusable)
        for end in range(len(run))
    ]


class ShotDataset(torch.utils.data.Dataset):
    """Samples are lists of catalog indices (one clip for phase a, a game sequence for b and c).

    Items come as (sample index, uid): the uid is the sample's position in the global stream and
    seeds its diffusion noise, so a sample's loss does not depend on which rank or batch it is in.
    """

    def __init__(
        self,
        catalog: ClipCatalog,
        samples: list[list[int]],
        frame_size: tuple[int, int],
        num_frames: int,
        with_video: bool,
    ):
        if not samples:
            raise ValueError(
                f"{', '.join(catalog.sources)}: no training samples: no ok clip has the fields this "
                "phase needs (motion_description, motion_scope; for game sequences also "
                f"instruction and the states {', '.join(GAME_STATES)})"
            )
        self.catalog, self.samples = catalog, samples
        self.frame_size, self.num_frames, self.with_video = frame_size, num_frames, with_video

    def __len__(self) -> int:
        return len(self.samples)

    def summary(self) -> str:
        """How many samples, and how many clips the shards marked unusable were left out."""
        left_out = 0 if self.catalog.include_unusable else self.catalog.unusable
        return f"{len(self)} samples ({left_out} clips marked not usable left out)"

    def __getitem__(self, item: tuple[int, int]) -> dict:
        index, uid = item
        clips = self.samples[index]
        turns = [self._turn(c) for c in clips]
        sample = {"uid": uid, "turns": turns}
        if self.with_video:
            sample["video"] = self._video(clips[-1])
        return sample

    def _turn(self, clip: int) -> dict:
        row = self.catalog.rows[clip]
        first = decode_image(self.catalog.media_bytes(clip, "first_frame"))
        return {
            "clip_id": row["clip_id"],
            "film_id": row["film_id"],
            "clip_index": row["clip_index"],
            "first_frame": resize_frames(first[None], self.frame_size)[0],
            "motion_description": row["motion_description"],
            "action": row["action"],
            "instruction": row["instruction"],
            "motion_scope": float(row["motion_scope"]),
            **{f: int(row[f]) for f in GAME_STATES},
        }

    def _video(self, clip: int) -> torch.Tensor:
        frames = decode_mp4(self.catalog.media_bytes(clip, "video"))
        if len(frames) < self.num_frames:  # 16 frames -> 17: the VAE wants 4k+1, repeat the last
            pad = np.repeat(frames[-1:], self.num_frames - len(frames), axis=0)
            frames = np.concatenate([frames, pad])
        return resize_frames(frames[: self.num_frames], self.frame_size)


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    """N x H x W x 3 uint8 -> N x 3 x h x w uint8 (antialiased when shrinking)."""
    video = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
    if tuple(video.shape[-2:]) == tuple(size):
        return video.contiguous()
    resized = F.interpolate(
        video.float(), size=size, mode="bilinear", antialias=True, align_corners=False
    )
    return resized.round().clamp(0, 255).to(torch.uint8)


def collate(samples: list[dict]) -> dict:
    batch = {
        "uid": torch.tensor([s["uid"] for s in samples]),
        "turns": [s["turns"] for s in samples],
    }
    if "video" in samples[0]:
        batch["video"] = torch.stack([s["video"] for s in samples])
    return batch


class StepBatches(torch.utils.data.Sampler):
    """Infinite micro-batches for one rank, starting at `start_step`.

    A step takes `accum` micro-batches of batch_size on each rank: a global batch of
    batch_size x world_size x accum samples. Epoch e is the permutation of all samples seeded by
    (seed, e), padded by wrapping to a multiple of the global batch so every rank takes the same
    number of batches (DDP needs that); micro-batch k of a step covers the k-th batch_size x
    world_size slice of the step's global batch, rank r its r-th batch_size part. So a step sees
    the same samples, with the same sample ids, whatever the split into ranks and micro-batches.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        start_step: int = 0,
        accum: int = 1,
    ):
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.rank, self.world_size, self.start_step = rank, world_size, start_step
        self.accum = accum
        self.global_batch = batch_size * world_size * accum
        self.steps_per_epoch = -(-num_samples // self.global_batch)

    def __iter__(self):
        for step in itertools.count(self.start_step):
            for micro in range(self.accum):
                yield self.batch_for_step(step, micro)

    def batch_for_step(self, step: int, micro: int = 0) -> list[tuple[int, int]]:
        epoch, offset = divmod(step, self.steps_per_epoch)
        order = self._epoch_order(epoch)
        begin = (
            offset * self.global_batch
            + micro * self.batch_size * self.world_size
            + self.rank * self.batch_size
        )
        positions = range(begin, begin + self.batch_size)
        base = epoch * self.steps_per_epoch * self.global_batch
        return [(order[p % self.num_samples], base + p) for p in positions]

    def _epoch_order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.num_samples, generator=generator).tolist()

    def __len__(self) -> int:  # infinite; DataLoader only needs a number
        return 2**31


def make_loader(
    dataset: ShotDataset,
    batch_size: int,
    seed: int,
    rank: int,
    world_size: int,
    start_step: int,
    num_workers: int,
    accum: int = 1,
) -> torch.utils.data.DataLoader:
    sampler = StepBatches(len(dataset), batch_size, seed, rank, world_size, start_step, accum)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        persistent_workers=False,
        multiprocessing_context=_SpawnedWorkers() if num_workers else None,
    )


class _WorkerThatExitsAtOnce(multiprocessing.context.SpawnProcess):
    """A DataLoader worker process that ends with os._exit once torch's worker loop returns.

    The loop returns only after the loader told it to stop, and its result queue may still be
    sending a batch the loader no longer wants: the queue's feeder thread, inside torch's C++
    code that shares a tensor's memory, waits for the GIL. If the interpreter is finalising by
    then, that thread is ended with pthread_exit, whose unwinding through the C++ frame calls
    std::terminate: "terminate called without an active exception", the worker dies of SIGABRT
    and the trainer's process is told "DataLoader worker ... is killed by signal: Aborted"
    (3 loaders in 20 dropped after 4 batches, under load; core dump of 2026-11-26:
    THPStorage_shareFd -> PyEval_RestoreThread -> take_gil -> PyThread_exit_thread). Nothing the
    worker holds is wanted once its loop has returned, so it leaves without finalising."""

    def run(self):
        super().run()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class _SpawnedWorkers(multiprocessing.context.SpawnContext):
    """Spawned (not forked: the trainer's process runs thread pools) workers that exit at once."""

    Process = _WorkerThatExitsAtOnce


def clip_samples(catalog: ClipCatalog) -> list[list[int]]:
    """Phase (a): every ok (usable) clip with a motion description and a motion scope, alone."""
    return [
        [i]
        for i, row in enumerate(catalog.rows)
        if row["status"] == "ok"
        and row["motion_description"]
        and row["motion_scope"] is not None
        and catalog.trainable(i)
    ]


def game_sequence_dataset(config, with_video: bool) -> ShotDataset:
    """The game sequences of phases (b) and (c) over the configured shards."""
    catalog = ClipCatalog(config.shards, config.include_unusable)
    record_motion_levels(config, catalog)
    return ShotDataset(
        catalog,
        game_sequences(catalog.rows, config.max_turns, config.include_unusable),
        (config.frame_height, config.frame_width),
        config.num_frames,
        with_video=with_video,
    )


def record_motion_levels(config, catalog: ClipCatalog) -> None:
    """Find the levels file the clips were labelled with; set `motion_levels` (its path) and
    `level_scopes` (its representative values) on the config, which the checkpoint saves."""
    from stages.motion_levels import LevelsError, load_levels, resolve_levels_path

    versions = sorted({r["motion_levels_version"] for r in catalog.rows} - {None})
    if len(versions) > 1:
        raise ValueError(
            f"{', '.join(catalog.sources)}: clips labelled with several motion-level versions "
            f"{versions}: relabel them with one file (animegamer motion-calibrate --apply)"
        )
    if not versions and not config.motion_levels:
        return
    try:
        path = resolve_levels_path(
            config.motion_levels or _levels_file(versions[0], catalog.sources)
        )
        levels = load_levels(path)
    except LevelsError as exc:
        raise ValueError(f"motion_levels: {exc}") from None
    if versions and levels.version != versions[0]:
        raise ValueError(
            f"motion_levels={path}: version {levels.version}, but the clips were labelled "
            f"with {versions[0]}"
        )
    config.motion_levels = str(path)
    config.level_scopes = list(levels.representative or [])


def _levels_file(version: str, sources: list[str]) -> str:
    """`motion_levels/<version>.json` in a shard folder or one above it (where motion-calibrate
    writes), else the bundled file of that name."""
    for source in sources:
        for folder in [Path(source).resolve(), *Path(source).resolve().parents]:
            candidate = folder / "motion_levels" / f"{version}.json"
            if candidate.is_file():
                return str(candidate)
    return version
