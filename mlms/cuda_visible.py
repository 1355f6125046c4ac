"""Which physical GPU a ``cuda:N`` of this process is, from ``CUDA_VISIBLE_DEVICES`` alone.

CUDA numbers only the GPUs ``CUDA_VISIBLE_DEVICES`` shows a process (NVML indices or UUIDs,
``GPU-...``, or a prefix of one), while NVML sees every GPU of the host. Standard library only:
the power sampler's child imports it (through ``mlms.evaluation.counters``) and starts fast.
``mlms.hardware.visible_gpus`` maps a whole host's GPUs the same way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any


def cuda_visible_entries(env: Mapping[str, str] | None = None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as its entries (indices, ``GPU-`` UUIDs or their prefixes),
    or None where it is unset (CUDA then sees every GPU)."""
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",")] if value.strip() else []


def cuda_ordinal(device: str) -> int | None:
    """``cuda:N`` (or ``cuda``) -> N; None for ``cpu``."""
    kind, _, number = device.partition(":")
    if kind != "cuda":
        return None
    return int(number or 0)


def nvml_handle(pynvml: Any, device: str) -> Any:
    """NVML's handle of the physical GPU behind ``cuda:N`` in this process: ``N`` itself
    without ``CUDA_VISIBLE_DEVICES``, else its N-th entry (an index, or a UUID or a prefix of
    one). NVMLError where the driver has no such GPU, LookupError where the variable hides
    ``cuda:N``."""
    ordinal = cuda_ordinal(device) or 0
    entries = cuda_visible_entries()
    if entries is None:
        return pynvml.nvmlDeviceGetHandleByIndex(ordinal)
    if ordinal >= len(entries):
        raise LookupError(
            f"{device} is not visible here (CUDA_VISIBLE_DEVICES={','.join(entries)!r})"
        )
    entry = entries[ordinal]
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    with contextlib.suppress(pynvml.NVMLError):
        return pynvml.nvmlDeviceGetHandleByUUID(entry)
    # A prefix of a UUID, which CUDA takes and NVML does not.
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if uuid.lower().startswith(entry.lower()):
            return handle
    raise LookupError(f"CUDA_VISIBLE_DEVICES entry {entry!r} names no GPU that NVML lists")
