"""How a running evaluation reports progress: a light module, so that a command, a client or a
wire adapter can name the type without loading the runner (numpy, the tracer, the frameworks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    batch_size: int
    run: str  # the level label of the run in progress, or "warmup"
    done: int
    target: int


ProgressCallback = Callable[[Progress], None]
