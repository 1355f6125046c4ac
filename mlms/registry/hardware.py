"""What this machine has (CPU, memory, GPUs through NVML) and ``--hw`` alias matching."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
from functools import cache

from pydantic import BaseModel

from mlms.errors import HardwareNotFound

#: Alias -> pattern on the NVML device name. ``cpu`` always matches the host.
GPU_ALIASES: dict[str, str] = {
    "v100": r"V100",
    "a100": r"A100",
    "h100": r"H100",
    "h200": r"H200",
    "t4": r"\bT4\b",
    "l4": r"\bL4\b",
    "l40s": r"L40S",
    "a10": r"\bA10\b",
    "a10g": r"A10G",
    "p100": r"P100",
    "k80": r"K80",
    "b200": r"B200",
    "gb200": r"GB200",
    "rtx4090": r"4090",
    "gpu": r".",
}


class GpuInfo(BaseModel):
    index: int
    name: str
    alias: str
    memory_bytes: int
    compute_capability: str
    driver: str
    clocks_mhz: dict[str, int] = {}


class HardwareInfo(BaseModel):
    host: str
    cpu_brand: str
    cpu_cores_logical: int
    cpu_cores_physical: int | None
    memory_bytes: int
    machine: str
    gpus: list[GpuInfo] = []

    def aliases(self) -> list[str]:
        return ["cpu", *sorted({gpu.alias for gpu in self.gpus})]


@cache
def detect() -> HardwareInfo:
    import psutil

    return HardwareInfo(
        host=socket.gethostname(),
        cpu_brand=_cpu_brand(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_physical=psutil.cpu_count(logical=False),
        memory_bytes=psutil.virtual_memory().total,
        machine=platform.machine(),
        gpus=_nvml_gpus(),
    )


def alias_of(gpu_name: str) -> str:
    for alias, pattern in GPU_ALIASES.items():
        if alias != "gpu" and re.search(pattern, gpu_name, re.IGNORECASE):
            return alias
    return re.sub(r"[^a-z0-9]+", "_", gpu_name.lower()).strip("_")


def resolve(hw: str, info: HardwareInfo | None = None) -> str:
    """The device string (``cpu`` or ``cuda:N``) for a ``--hw`` alias on this machine."""
    info = info or detect()
    alias = hw.strip().lower()
    if alias == "cpu":
        return "cpu"
    known = set(GPU_ALIASES) | {gpu.alias for gpu in info.gpus}
    if alias not in known:
        raise HardwareNotFound(
            f"unknown hardware {hw!r}; expected cpu or a GPU alias such as "
            f"{', '.join(a for a in GPU_ALIASES if a != 'gpu')}"
        )
    for gpu in info.gpus:
        if alias in ("gpu", gpu.alias):
            return f"cuda:{gpu.index}"
    have = ", ".join(f"{g.alias} ({g.name})" for g in info.gpus) or "no GPU"
    raise HardwareNotFound(
        f"no {hw!r} device on this machine ({info.host}): it has cpu ({info.cpu_brand}) and {have}"
    )


def _cpu_brand() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_gpus() -> list[GpuInfo]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []  # no driver: a CPU-only machine
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            clocks = {}
            for label, clock in (("sm", pynvml.NVML_CLOCK_SM), ("mem", pynvml.NVML_CLOCK_MEM)):
                with contextlib.suppress(pynvml.NVMLError):
                    clocks[label] = pynvml.nvmlDeviceGetClockInfo(handle, clock)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=name,
                    alias=alias_of(name),
                    memory_bytes=pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                    compute_capability=f"{major}.{minor}",
                    driver=driver,
                    clocks_mhz=clocks,
                )
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
