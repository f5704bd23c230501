"""A short film's CPU, part by part: where the folder of 20 six-second films (bench/clip_folder.py)
spends its time, per film, against a bare decode of the same files.

    python -m bench.film_costs [--films 20] [--set run.decode_once_mib=0]

The folder is cut in this one process (the local executor: one task at a time), and each part
below is timed on the process clock (its threads included) by wrapping the pipeline's own
function, wherever a module holds it by name. Parts nest: `prepare` holds the probe, the samples,
the crop, the field decision, the player bars and the overlay film pass; the overlay pass holds
its text detector. A short film is decoded once (`run.decode_once_mib`): its prepare holds the
one decode and its segment as well; `--set run.decode_once_mib=0` shows them apart, each
decoding. One process on one core, so the figures add up to CPU, not to wall time.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.clip_folder import make_clip_folder
from bench.decoding import bare_decode

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


class PartClock:
    """CPU seconds and calls of each wrapped function, under its label."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.labels: list[str] = []  # in the order wrapped: parents before their parts

    def wrap(self, owner: object, name: str, label: str) -> None:
        """Time `owner.name`, and the same function wherever a project module imported it."""
        original = getattr(owner, name)
        self.labels.append(label)
        timed = self._timed(original, label)
        setattr(owner, name, timed)
        for module in list(sys.modules.values()):
            if module.__name__.startswith(("pipeline.", "stages.")):
                if getattr(module, name, None) is original:
                    setattr(module, name, timed)

    def _timed(self, fn: Callable, label: str) -> Callable:
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            began = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - began
                self.seconds[label] = self.seconds.get(label, 0.0) + spent
                self.calls[label] = self.calls.get(label, 0) + 1

        return timed


def timed_parts() -> PartClock:
    from core.video import HeldFrames
    from pipeline.running import film_tasks, folder_passes
    from stages.burned_in.overlays import FilmOverlays
    from stages.burned_in.text_detector import TextDetector
    from stages.crop import BorderCrop
    from stages.probe import Probe
    from stages.sources import field_pass, film_samples

    parts = [
        (film_tasks, "prepare_film", "prepare"),
        (Probe, "process", "  probe"),
        (HeldFrames, "decode", "  the one decode, held for the segment"),
        (field_pass, "sampled_and_probed", "  samples and field runs (one decode)"),
        (film_samples, "sample_film", "  samples (a decode of their own)"),
        (BorderCrop, "process", "  crop"),
        (field_pass, "find_fields", "  field decision"),
        (FilmOverlays, "without_player", "  player bars"),
        (FilmOverlays, "process", "  overlay film pass"),
        (TextDetector, "grey_map", "    its text detector"),
        (film_tasks, "run_stored_segment", "segment (in prepare when decoded once)"),
        (film_tasks, "finalize_film", "finalize"),
        (folder_passes, "quality_pass", "folder quality pass"),
    ]
    clock = PartClock()
    for owner, name, label in parts:
        clock.wrap(owner, name, label)
    return clock


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--films", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], help="a setting, KEY=VALUE")
    args = parser.parse_args(argv)
    from pipeline.data.config import load_config
    from pipeline.data.ip import load_ip
    from pipeline.executors import make_executor
    from pipeline.running.runner import run_films

    films = make_clip_folder(OUT / "clip_folder")[: args.films]
    out = OUT / "dataset-film-costs"
    shutil.rmtree(out, ignore_errors=True)
    clock = timed_parts()
    executor = make_executor("local", None, progress=False)
    executor.start()
    decode = sum(bare_decode(f)["cpu"] for f in films) / len(films)
    began = time.process_time()
    config = load_config(None, ["run.progress=false", *args.set])
    run_films(films, out, config, load_ip(None), executor)
    whole = (time.process_time() - began) / len(films)
    print(
        f"{len(films)} films: {whole * 1e3:.0f} ms of CPU a film, a bare decode "
        f"{decode * 1e3:.0f} ms (x{whole / decode:.2f})"
    )
    for label in (label for label in clock.labels if label in clock.seconds):
        per_film = clock.seconds[label] / len(films) * 1e3
        print(f"{per_film:7.0f} ms a film  {label} ({clock.calls[label]} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
