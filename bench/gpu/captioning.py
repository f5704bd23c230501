"""Captioning's throughput: an InternVL2.5-8B-shaped checkpoint with random weights, written locally,
captions the sample film's clips through the project's caption_film with each engine
(transformers, lmdeploy's TurboMind and PyTorch engines)."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
import traceback
from pathlib import Path

from bench.gpu import models
from bench.gpu.common import Settings, one_line, peak_memory_gib, release_memory


def caption_rows(settings: Settings):
    shape = models.INTERNVL_TINY if settings.tiny else models.INTERNVL_2_5_8B
    checkpoint = settings.workdir / ("internvl-tiny" if settings.tiny else "internvl2_5-8b-random")
    began = time.perf_counter()
    shutil.rmtree(checkpoint, ignore_errors=True)
    models.write_internvl(checkpoint, shape, settings.new_tokens, device=settings.device)
    written = time.perf_counter() - began
    release_memory()
    for engine in settings.engines:
        try:
            for row in caption_with(engine, checkpoint, settings):
                yield {**row, "checkpoint_write_s": round(written, 1)}
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            yield {"setting": engine, "error": one_line(exc)}
        release_memory()


def check_turbomind() -> None:
    """lmdeploy silently runs its PyTorch engine when TurboMind is missing: refuse instead, so a
    row labelled TurboMind measured TurboMind."""
    from stages.captioning.engines import import_lmdeploy

    import_lmdeploy()
    from lmdeploy import turbomind

    if not turbomind.is_available():
        raise RuntimeError(
            f"lmdeploy's TurboMind extension does not load here "
            f"({getattr(turbomind, '_import_error', None)}); lmdeploy would fall back to its "
            f"PyTorch engine (row lmdeploy-pytorch)"
        )


class CountingEngine:
    """Passes requests to an engine and counts the requests it answered with an error (a
    failed request is a caption_failed clip, which must not pass for a fast one)."""

    def __init__(self, engine):
        self.engine, self.errors, self.first_error = engine, 0, None

    def load(self) -> None:
        self.engine.load()

    def generate(self, requests):
        completions = self.engine.generate(requests)
        failed = [c.error for c in completions if c.error]
        self.errors += len(failed)
        self.first_error = self.first_error or (failed[0] if failed else None)
        return completions


def caption_with(engine_name: str, checkpoint: Path, settings: Settings):
    """Caption the sample film with one loaded engine: a warm-up run, then one timed run per
    batch size (clips per engine call)."""
    from pipeline.passes.caption_films import caption_film
    from stages.captioning.engines import make_engine
    from stages.captioning.stage import CaptionConfig

    engine_kind, _, backend = engine_name.partition("-")
    config = CaptionConfig(
        model=str(checkpoint),
        engine=engine_kind,
        lmdeploy_backend=backend or "turbomind",
        device=settings.device,
        executor="local",
        max_retries=0,  # random weights never answer validly: one attempt per prompt
        max_new_tokens=settings.new_tokens,
        batch_size=settings.caption_batches[0],
        session_len=8192,
        include_unusable=True,  # engine throughput over every clip, whatever quality decided
    )
    if backend == "turbomind":
        check_turbomind()
    engine = make_engine(config)
    began = time.perf_counter()
    engine.load()
    loaded = time.perf_counter() - began
    counted = CountingEngine(engine)
    try:
        warm_up = caption_copy(settings, f"{engine_name}-warm-up", config, counted, caption_film)
        for batch in settings.caption_batches:
            counted.errors, counted.first_error = 0, None
            # both engines and the stage read the batch size from the config they hold
            config = dataclasses.replace(config, batch_size=batch)
            engine.config = config  # type: ignore[attr-defined]
            timed = caption_copy(settings, f"{engine_name}-{batch}", config, counted, caption_film)
            yield caption_row(engine_name, batch, timed, counted, settings) | {
                "load_s": round(loaded, 1),
                "warm_up_s": warm_up["seconds"],
            }
    finally:
        close = getattr(getattr(engine, "pipe", None), "close", None)
        if close:
            close()
        del engine, counted


def caption_copy(settings: Settings, name: str, config, engine, caption_film) -> dict:
    """Caption a fresh copy of the sample film (nothing cached): the caption summary as JSON."""
    from pipeline.data.ip import load_ip

    film = settings.workdir / f"film-{name}"
    shutil.rmtree(film, ignore_errors=True)
    shutil.copytree(settings.film, film)
    return caption_film(film, config, load_ip("sintel"), engine=engine).to_dict()


def caption_row(engine_name: str, batch: int, timed: dict, counted, settings: Settings) -> dict:
    seconds = max(timed["seconds"], 1e-9)
    # a skipped clip costs no model time: only the clips sent to the engine are throughput
    sent = sum(n for status, n in timed["by_status"].items() if not status.startswith("skipped"))
    row = {
        "setting": f"{engine_name}, batch {batch} clips, {settings.new_tokens} new tokens, "
        "both prompts",
        "clips": sent,
        "film_clips": timed["clips"],
        "requests": timed["requests"],
        "seconds": timed["seconds"],
        "statuses": timed["by_status"],
        "engine_errors": counted.errors,
        "peak_mem_gib": peak_memory_gib(settings.device),
    }
    if counted.errors:  # failed requests are not throughput
        row["error"] = (
            f"{counted.errors} of {timed['requests']} requests failed: {counted.first_error}"
        )
        return row
    row["clips_per_s"] = round(sent / seconds, 2)
    row["gen_tokens_per_s"] = round(timed["requests"] * settings.new_tokens / seconds, 1)
    return row
