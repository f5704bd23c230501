"""What one task or one stage replica asks the scheduler for. Stages declare it (stage code never
imports Ray); the executor reads it to place work (pipeline/executors/)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0

    def needs_gpu(self) -> bool:
        return self.gpus > 0
