"""One measured evaluation at a time per device, across processes on this machine.

An exclusive ``flock`` on ``$MLMS_HOME/locks/<device key>.lock``: a second evaluation of the
same device waits (queues) instead of running beside the first; the wait is reported. A GPU's
key is its UUID (``mlms.hardware.device_key``), so two processes that number it
differently (``cuda:1`` in one, ``cuda:0`` in another pinned by ``CUDA_VISIBLE_DEVICES``)
still take turns on it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlms.hardware import FreeCheck, GpuInfo, device_key, gpu_key


@contextmanager
def exclusive_device(folder: Path, device: str) -> Iterator[float]:
    """Hold ``device`` (``cpu`` or ``cuda:N`` of this process); yields the seconds spent
    waiting for it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = _path(folder, device_key(device))
    start = time.perf_counter()
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield time.perf_counter() - start
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)


def is_held(folder: Path, key: str) -> bool:
    """Whether some process (this one included) holds the lock of ``key`` now."""
    path = _path(folder, key)
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # never taken on this machine
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return False
    finally:
        os.close(descriptor)


def free_gpus(folder: Path) -> FreeCheck:
    """``mlms.hardware.resolve``'s test of a free GPU: its lock under ``folder`` is
    not held. A GPU found free may be taken before the caller locks it; the caller then
    queues on it, as on a busy one."""

    def free(gpu: GpuInfo) -> bool:
        return not is_held(folder, gpu_key(gpu))

    return free


def _path(folder: Path, key: str) -> Path:
    return folder / f"{key}.lock"
