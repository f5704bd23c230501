"""`animegamer quality-calibrate`: re-take every clip's usable / reject decision with new thresholds.

Nothing is measured again: the decisions come from the stored quality_* values (docs/quality.md).
The folder's thresholds (OUT/quality.json) are updated first, then the shards of the films whose
decisions change are rewritten, each file atomically; an interrupted run is completed by running
the same command again (the rewrite depends only on the stored values and the thresholds).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from core.cli import input_errors, work_errors
from core.film import FilmFolder
from pipeline.data.config import ConfigError, PipelineConfig, apply_overrides

HELP = (
    "Re-take the quality decisions (usable, reject_reasons, duplicate_of) of a dataset folder "
    "with new reject.* thresholds, from the stored measurements (nothing is recomputed)."
)


def add_arguments(parser) -> None:
    parser.add_argument(
        "dataset", type=Path, help="dataset folder (OUT) or one film folder (OUT/<film>)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="reject.FIELD=VALUE",
        help="change one threshold (repeatable), e.g. --set reject.text_max_area=0.01",
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="start from the default thresholds instead of the folder's quality.json",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the counts per reason, write nothing"
    )
    parser.epilog = "thresholds (--set reject.FIELD=VALUE):\n" + "\n".join(
        f"  reject.{f.name} = {f.default!r}" for f in dataclasses.fields(PipelineConfig().reject)
    )


def run(args) -> int:
    from pipeline.passes.quality import (
        apply_quality,
        load_thresholds,
        read_pass_table,
        save_thresholds,
    )
    from stages.quality import RejectConfig, own_reasons

    with input_errors(ConfigError, FileNotFoundError, ValueError):
        if not args.dataset.is_dir() or not FilmFolder.discover(args.dataset):
            raise FileNotFoundError(f"{args.dataset}: no film folder with shards/ here")
        root = _dataset_root(args.dataset)
        config = PipelineConfig()
        if not args.defaults:
            config.reject, _ = load_thresholds(root, RejectConfig())
        for item in args.overrides:
            if not item.strip().startswith("reject."):
                raise ConfigError(f"--set {item!r}: only reject.* thresholds can be changed here")
        apply_overrides(config, args.overrides)
        config.reject.validate()  # a score threshold names a declared score and fits it
    thresholds = config.reject
    if args.dry_run:
        own: Counter[str] = Counter()
        clips = 0
        for film in FilmFolder.discover(args.dataset):  # one film's rows in memory at a time
            table = read_pass_table(film)
            clips += table.num_rows
            own.update(r for reasons in own_reasons(table, thresholds) for r in reasons)
        print(f"{clips} clips; own reasons with these thresholds (duplicates not searched):")
        for reason, count in sorted(own.items()):
            print(f"  {reason}: {count}")
        return 0
    with work_errors(OSError, ValueError):
        save_thresholds(root, thresholds)
        outcome = apply_quality(root, thresholds, config.run.progress)
    print(
        f"{outcome.usable} of {outcome.clips} clips usable in {outcome.films} film(s); "
        f"rewrote {outcome.rewritten_films} film(s); thresholds in {root / 'quality.json'}"
    )
    for reason, count in outcome.by_reason.items():
        print(f"  {reason}: {count}")
    return 0


def _dataset_root(location: Path) -> Path:
    """Thresholds belong to the dataset folder: a film folder's parent holds them."""
    return location.parent if (location / "shards").is_dir() else location
