"""One measured evaluation at a time per device, across processes on this machine.

An exclusive ``flock`` on ``$MLMS_HOME/locks/<device>.lock``: a second evaluation of the same
device waits (queues) instead of running beside the first; the wait is reported.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive_device(folder: Path, device: str) -> Iterator[float]:
    """Hold the device; yields the seconds spent waiting for it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{device.replace(':', '_')}.lock"
    start = time.perf_counter()
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield time.perf_counter() - start
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)
