"""The contract of a per-clip stage.

A stage is a dataclass-configured object with ONE method, `process(clip) -> clip`, which fills
fields of the clip. `setup()` runs once per worker before the first clip (load a model there, not
in `__init__`, so that a stage object stays cheap to build, copy and ship to a worker).
`resources` is data the executor reads to place the stage; stage code never imports Ray.
A stage that works better on batches (a model server) overrides `process_batch`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from core.record import Clip


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0


class ClipStage(ABC):
    name: str = "stage"
    resources: Resources = Resources()

    def setup(self) -> None:  # noqa: B027 - optional hook, not every stage loads state
        """Load heavy state once per worker. The default has nothing to load."""

    @abstractmethod
    def process(self, clip: Clip) -> Clip:
        """Fill this stage's fields of `clip` and return it."""

    def process_batch(self, clips: list[Clip]) -> list[Clip]:
        """Run `process` on each clip; one clip's failure is recorded on it, never lost."""
        return [self.process_safely(clip) for clip in clips]

    def process_safely(self, clip: Clip) -> Clip:
        try:
            return self.process(clip)
        except Exception as exc:  # a bad clip must not take its film down with it
            clip.fail(self.name, f"{type(exc).__name__}: {exc}")
            return clip
