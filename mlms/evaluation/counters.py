"""The devices' cumulative energy counters and power readings, nothing above them.

    NVIDIA GPU  NVML's total energy consumption (millijoules since the driver loaded) and its
                power reading, for the physical GPU behind ``cuda:N`` in this process (through
                ``CUDA_VISIBLE_DEVICES``: ``mlms.cuda_visible``); also its SM clock and the
                reasons the driver gives for holding it down
    CPU         RAPL's package domains through powercap (``intel-rapl:N/energy_uj``, wrapping at
                ``max_energy_range_uj``), summed over the sockets

Standard library only (and ``mlms.cuda_visible``, which is too): the power sampler's child
process imports it and starts fast.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from mlms.cuda_visible import nvml_handle

if TYPE_CHECKING:
    from mlms.evaluation.record import EnergySource


class NoCounter(Exception):
    """The device's energy counter cannot be read; the message says why."""


class Clocks(NamedTuple):
    """A GPU's SM clock now and the reasons its driver holds the clocks where they are (a
    bitmask of ``CLOCK_LIMITS``)."""

    sm_mhz: float
    limits: int


#: NVML's clock event reasons (``nvmlClocksEventReason*``, the bits ``nvmlDeviceGetCurrent
#: ClocksEventReasons`` answers with), by the names records carry.
CLOCK_LIMITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def limit_names(limits: int) -> list[str]:
    """The names of the bits set in ``limits``; a bit NVML added later as ``bit_0x...``."""
    return [
        CLOCK_LIMITS.get(1 << bit, f"bit_{1 << bit:#x}")
        for bit in range(limits.bit_length())
        if limits >> bit & 1
    ]


class EnergyCounter(Protocol):
    """One device's cumulative energy counter and power reading."""

    source: EnergySource

    def joules(self) -> float:
        """Energy (J) since a fixed moment; only differences mean anything."""
        ...

    def watts(self) -> float:
        """Power (W) now, as the device reports it."""
        ...

    def clocks(self) -> Clocks | None:
        """The SM clock and what holds it; None for a device without (a CPU)."""
        ...

    def max_sm_mhz(self) -> float | None:
        """The highest SM clock the device runs at; None for a device without."""
        ...

    def close(self) -> None: ...


class NvmlCounter:
    """NVML's counters of the physical GPU behind ``device`` (``cuda:N`` of this process)."""

    source: EnergySource = "nvml"

    def __init__(self, device: str) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NoCounter(f"NVML is not installed (nvidia-ml-py): {exc}") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoCounter(f"NVML did not start: {exc}") from None
        try:
            self._handle = nvml_handle(pynvml, device)
            self.joules()  # GPUs before Volta have no energy counter
        except (pynvml.NVMLError, LookupError) as exc:
            pynvml.nvmlShutdown()
            raise NoCounter(f"NVML has no energy counter for {device}: {exc}") from None

    def joules(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3

    def watts(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3

    def clocks(self) -> Clocks:
        nvml = self._nvml
        return Clocks(
            float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)),
            int(nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle)),
        )

    def max_sm_mhz(self) -> float:
        return float(self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class RaplCounter:
    """The package domains of RAPL under ``root`` (``intel-rapl:N`` named ``package-*``; their
    subdomains are parts of them, and ``psys`` overlaps them), summed.

    Each domain's counter wraps at its ``max_energy_range_uj``; a wrap is counted as long as
    the counter is read at least once per wrap period (262 kJ: over twenty minutes at 200 W),
    so a metered window must be shorter than that."""

    source: EnergySource = "rapl"

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise NoCounter(
                f"{root} does not exist: this kernel exposes no RAPL counters (virtual machines "
                "usually have none)"
            )
        domains = sorted(
            path
            for path in root.glob("intel-rapl:*")
            if re.fullmatch(r"intel-rapl:\d+", path.name)
            and _text(path / "name").startswith("package")
        )
        if not domains:
            raise NoCounter(f"no RAPL package domain under {root} (intel-rapl:N named package-N)")
        self._files = [path / "energy_uj" for path in domains]
        self._ranges = [int(_text(path / "max_energy_range_uj")) for path in domains]
        self._last = self._raw()
        self._total_uj = 0
        self._watched = (time.perf_counter(), 0.0)

    def _raw(self) -> list[int]:
        return [int(_text(path)) for path in self._files]

    def joules(self) -> float:
        raw = self._raw()
        for now, last, span in zip(raw, self._last, self._ranges, strict=True):
            self._total_uj += now - last if now >= last else now + span - last
        self._last = raw
        return self._total_uj / 1e6

    def watts(self) -> float:
        """The average power since the previous call (RAPL has no power reading of its own)."""
        now, joules = time.perf_counter(), self.joules()
        then, before = self._watched
        self._watched = (now, joules)
        return (joules - before) / (now - then)

    def clocks(self) -> None:
        return None

    def max_sm_mhz(self) -> None:
        return None

    def close(self) -> None:
        pass


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError:
        raise NoCounter(
            f"{path} is not readable by this user (RAPL counters are often root-only)"
        ) from None
    except OSError as exc:
        raise NoCounter(f"cannot read {path}: {exc.strerror or exc}") from None


def open_counter(device: str, powercap: Path) -> EnergyCounter:
    """The counter of ``device`` (``cpu`` or ``cuda:N``, RAPL under ``powercap``); NoCounter
    says why there is none."""
    if device == "cpu":
        return RaplCounter(powercap)
    if device.partition(":")[0] != "cuda":
        raise NoCounter(f"no energy counter is known for device {device!r}")
    return NvmlCounter(device)
