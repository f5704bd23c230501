"""`animegamer export`: the clip shards in the layouts other trainers read.

webdataset  the released AnimeGamer decoder's training input (VDM_Decoder/sgm/webds.py,
            MetaDistributedWebDataset): tars of samples `<key>.id`, `<key>.mp4` (the clip),
            `<key>.txt` (the action T5 reads, "Softly talk"), `<key>.jpg|png` (the first frame,
            the CLIP condition), and beside each `NNNNNN.tar` a `NNNNNN.meta.jsonl` with one JSON
            line per sample whose `key` matches its `.id`: motion (the raw motion scope the
            decoder is conditioned on), motion_level, duration, fps, num_frames, caption (the game
            instruction), clip_id, film_id, clip_index. The release's reader attaches the meta
            fields it is asked for (`meta_names`) to the sample after its `.id`.
cogvideox   the folder diffusers' CogVideoX LoRA fine-tuning script reads (`--instance_data_root`
            with `--video_column videos.txt --caption_column prompts.txt`): videos/<clip_id>.mp4,
            videos.txt (one relative path a line) and prompts.txt (the game instruction, same line).

Only usable clips by default (a shard without the `usable` column: all usable), and only ok clips
with the text the layout needs; every clip left out is counted with its reason in
OUT/export_summary.json. Files are written under temporary names and renamed, and the output is a
pure function of the shards (sample order = shard order), so a rerun gives the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HELP = "Export clip shards as the release decoder's WebDataset tars or a CogVideoX LoRA folder."
FORMATS = ("webdataset", "cogvideox")
# read besides the trainer's light columns (trainer.data.CATALOG_COLUMNS): the sample metadata
TIMING_COLUMNS = ["num_frames", "fps", "start_time", "end_time"]
MEDIA = ["video", "first_frame"]


def add_arguments(parser) -> None:
    parser.add_argument("shards", nargs="+", help="shard files or film/dataset folders")
    parser.add_argument("--format", required=True, choices=FORMATS, help="layout to write")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--samples-per-tar", type=int, default=1000, help="webdataset: samples per tar file"
    )
    parser.add_argument(
        "--include-unusable",
        action="store_true",
        help="also export clips a shard marks not usable",
    )


def run(args) -> int:
    from core.cli import input_errors, work_errors

    # input errors (exit 2) inside, failed writes (exit 1) outside: core/cli.py's one rule
    with work_errors(OSError), input_errors(FileNotFoundError, ValueError):
        if args.samples_per_tar < 1:
            raise ValueError(f"--samples-per-tar {args.samples_per_tar}: must be at least 1")
        summary = export(
            args.shards, args.out, args.format, args.include_unusable, args.samples_per_tar
        )
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(summary["skipped"].items()))
    print(
        f"exported {summary['exported']} clip(s) to {args.out}"
        + (f"; left out {skipped}" if skipped else "")
    )
    return 0


def export(
    locations: list[str],
    out: Path,
    layout: str,
    include_unusable: bool = False,
    samples_per_tar: int = 1000,
) -> dict:
    """Write the layout; return {exported, skipped: {reason: count}} (also export_summary.json)."""
    if layout not in FORMATS:
        raise ValueError(f"unknown export format {layout!r} (known: {', '.join(FORMATS)})")
    skipped: Counter = Counter()
    chosen = (
        row
        for row in _rows(locations)
        if _keep(row, include_unusable, layout == "cogvideox", skipped)
    )
    out.mkdir(parents=True, exist_ok=True)
    if layout == "webdataset":
        exported = _write_webdataset(chosen, out, samples_per_tar)
    else:
        exported = _write_cogvideox(chosen, out)
    summary = {"format": layout, "exported": exported, "skipped": dict(skipped)}
    _write_atomic(out / "export_summary.json", json.dumps(summary, indent=1).encode())
    return summary


def _rows(locations: list[str]) -> Iterator[dict]:
    """Every clip row of the shards (light columns and media), row group by row group."""
    import pyarrow.parquet as pq

    from core.shards import check_schema_version, shard_paths

    paths = list(dict.fromkeys(p.resolve() for loc in locations for p in shard_paths(Path(loc))))
    if not paths:
        raise FileNotFoundError(f"no clip shards under {', '.join(map(str, locations))}")
    # Imported once there are shards to read: trainer.data imports torch (seconds), which a wrong
    # folder should not wait for.
    from prompts.game import action_text
    from trainer.shared.data import CATALOG_COLUMNS, instruction_of

    for path in paths:
        parquet = pq.ParquetFile(path)
        check_schema_version(parquet.schema_arrow, path)
        names = parquet.schema_arrow.names
        wanted = [*CATALOG_COLUMNS, *TIMING_COLUMNS, *MEDIA, "usable"]
        columns = [c for c in wanted if c in names]
        for group in range(parquet.num_row_groups):
            for row in parquet.read_row_group(group, columns=columns).to_pylist():
                row["usable"] = row.get("usable") is not False
                row["action"] = action_text(row.get("adverb"), row.get("motion_description"))
                row["instruction"] = instruction_of(row)
                yield row


def _keep(row: dict, include_unusable: bool, needs_instruction: bool, skipped: Counter) -> bool:
    reason = None
    if row.get("status") != "ok" or not row.get("video"):
        reason = "not ok (no video)"
    elif not (include_unusable or row["usable"]):
        reason = "not usable"
    elif not row["action"] or row.get("motion_scope") is None:
        reason = "no motion description or motion scope"
    elif needs_instruction and not row["instruction"]:
        reason = "no instruction"
    if reason:
        skipped[reason] += 1
    return reason is None


def _write_webdataset(rows: Iterator[dict], out: Path, per_tar: int) -> int:
    count, batch, index = 0, [], 0
    for row in rows:
        batch.append(row)
        if len(batch) == per_tar:
            _write_tar(batch, out, index)
            count, batch, index = count + len(batch), [], index + 1
    if batch:
        _write_tar(batch, out, index)
        count += len(batch)
    return count


def _write_tar(rows: list[dict], out: Path, index: int) -> None:
    # the release's reader finds the side file as name.split(".")[0] + ".meta.jsonl"
    name = f"{index:06d}"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for row in rows:
            key = row["clip_id"]
            for suffix, data in (
                ("id", key.encode()),
                ("mp4", row["video"]),
                ("txt", row["action"].encode()),
                (_image_suffix(row["first_frame"]), row["first_frame"]),
            ):
                if data:
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
    meta = "".join(json.dumps(_meta(row), sort_keys=True) + "\n" for row in rows)
    _write_atomic(out / f"{name}.tar", buffer.getvalue())
    _write_atomic(out / f"{name}.meta.jsonl", meta.encode())


def _meta(row: dict) -> dict:
    return {
        "key": row["clip_id"],
        "motion": row["motion_scope"],
        "motion_level": row.get("motion_level"),
        "duration": (row.get("end_time") or 0.0) - (row.get("start_time") or 0.0),
        "fps": row.get("fps"),
        "num_frames": row.get("num_frames"),
        "caption": row["instruction"],
        "clip_id": row["clip_id"],
        "film_id": row.get("film_id"),
        "clip_index": row.get("clip_index"),
    }


def _image_suffix(data: bytes | None) -> str:
    return "png" if data and data[:8] == b"\x89PNG\r\n\x1a\n" else "jpg"


def _write_cogvideox(rows: Iterator[dict], out: Path) -> int:
    videos, prompts = [], []
    (out / "videos").mkdir(exist_ok=True)
    for row in rows:
        relative = f"videos/{row['clip_id']}.mp4"
        _write_atomic(out / relative, row["video"])
        videos.append(relative)
        prompts.append(" ".join(row["instruction"].split()))  # one line each
    _write_atomic(out / "videos.txt", "".join(v + "\n" for v in videos).encode())
    _write_atomic(out / "prompts.txt", "".join(p + "\n" for p in prompts).encode())
    return len(videos)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    from core.cli import module_parser, run_command

    args = module_parser("python -m trainer.export", __doc__, add_arguments).parse_args(argv)
    return run_command("export", run, args)


if __name__ == "__main__":
    sys.exit(main())
