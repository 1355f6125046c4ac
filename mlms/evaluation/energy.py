"""Energy of a measured run: joules from the device's own cumulative energy counter.

    NVIDIA GPU  NVML's total energy consumption (millijoules since the driver loaded) and its
                power reading, for the GPU of ``cuda:N``
    CPU         RAPL's package domains through powercap (``intel-rapl:N/energy_uj``, wrapping at
                ``max_energy_range_uj``), summed over the sockets

The counter is read before and after each run; the joules and the average watts come from it
alone. Power is sampled on a background thread beside the run for the peak only: on A100 and
H100 the driver's power reading covers part of each interval, so it never gives the energy. The
idle power is measured once per evaluation, before the model loads. Both counters cover the
whole device (every process on the GPU, every core of the package), as the driver sees it.

Where no counter can be read, the meter says why (``EnergyResult.reason``), never a zero.
``MLMS_ENERGY=off`` turns collection off.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from mlms.evaluation.record import EnergyResult, EnergySource

#: Where Linux exposes RAPL.
POWERCAP = Path("/sys/class/powercap")
#: Power samples per second beside a run, and before it for the idle power.
SAMPLE_HZ = 20
IDLE_SECONDS = 0.5


class NoCounter(Exception):
    """The device's energy counter cannot be read; the message says why."""


class EnergyCounter(Protocol):
    """One device's cumulative energy counter and power reading."""

    source: EnergySource

    def joules(self) -> float:
        """Energy (J) since a fixed moment; only differences mean anything."""
        ...

    def watts(self) -> float:
        """Power (W) now, as the device reports it."""
        ...

    def close(self) -> None: ...


class NvmlCounter:
    """NVML's counters of GPU ``index`` (NVML's index, as ``cuda:N`` is throughout mlms)."""

    source: EnergySource = "nvml"

    def __init__(self, index: int) -> None:
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
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.joules()  # GPUs before Volta have no energy counter
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise NoCounter(f"NVML has no energy counter for GPU {index}: {exc}") from None

    def joules(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3

    def watts(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class RaplCounter:
    """The package domains of RAPL under ``root`` (``intel-rapl:N`` named ``package-*``; their
    subdomains are parts of them, and ``psys`` overlaps them), summed.

    Each domain's counter wraps at its ``max_energy_range_uj``; a wrap is counted as long as
    the counter is read at least once per wrap period (minutes at full power): the power
    sampler reads it many times a second."""

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
        self._lock = threading.Lock()  # the sampler's thread reads it too
        self._last = self._raw()
        self._total_uj = 0
        self._watched = (time.perf_counter(), 0.0)

    def _raw(self) -> list[int]:
        return [int(_text(path)) for path in self._files]

    def joules(self) -> float:
        with self._lock:
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


def open_counter(device: str, powercap: Path | None = None) -> EnergyCounter:
    """The counter of ``device`` (``cpu`` or ``cuda:N``); NoCounter says why there is none."""
    if device == "cpu":
        return RaplCounter(powercap or POWERCAP)
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise NoCounter(f"no energy counter is known for device {device!r}")
    return NvmlCounter(int(index or 0))


class PowerSampler:
    """Reads ``read`` (watts) ``hz`` times a second on a thread of its own until stopped.

    Its thread sleeps between readings in ``Event.wait`` and the reading itself (NVML through
    ctypes, a sysfs file) runs without the GIL, so the measured loop loses no time to it."""

    def __init__(self, read: Callable[[], float], hz: float = SAMPLE_HZ) -> None:
        self.samples: list[float] = []
        self._read = read
        self._interval = 1 / hz
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mlms-power", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.samples.append(self._read())
            except Exception:  # a reading the driver failed: one sample less, never the run
                continue

    def __enter__(self) -> PowerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Metered:
    """One run's energy, filled in when its ``EnergyMeter.measure`` block ends."""

    def __init__(self, meter: EnergyMeter) -> None:
        self._meter = meter
        self.joules: float | None = None
        self.seconds = 0.0
        self.samples: list[float] = []
        self.failure: str | None = None  # the counter failed a reading

    def result(self, inferences: int) -> EnergyResult:
        """The record's view of the run that made ``inferences`` inferences."""
        meter = self._meter
        if self.joules is None:
            return EnergyResult(source=meter.source, reason=meter.reason or self.failure)
        if self.joules <= 0:
            return EnergyResult(
                source=meter.source,
                reason=f"the {meter.source} counter did not advance over the run's "
                f"{self.seconds:.3f} s: too short for its resolution",
                seconds=self.seconds,
                idle_watts=meter.idle_watts,
            )
        return EnergyResult(
            source=meter.source,
            joules=self.joules,
            seconds=self.seconds,
            joules_per_inference=self.joules / inferences,
            inferences_per_joule=inferences / self.joules,
            average_watts=self.joules / self.seconds,
            peak_watts=max(self.samples) if self.samples else None,
            idle_watts=meter.idle_watts,
            power_samples=len(self.samples),
        )


class EnergyMeter:
    """Meters the runs of one evaluation on one device; ``reason`` is set when it cannot."""

    def __init__(self, counter: EnergyCounter | None, reason: str | None = None) -> None:
        self._counter = counter
        self.reason = reason
        self.source: EnergySource | None = counter.source if counter else None
        self.idle_watts: float | None = None

    def measure_idle(self, seconds: float = IDLE_SECONDS) -> None:
        """The device's power with nothing of ours on it: the counter over ``seconds``."""
        if self._counter is None:
            return
        with self.measure() as idle:
            time.sleep(seconds)  # the measurement window itself
        if idle.joules:
            self.idle_watts = idle.joules / idle.seconds
        elif idle.samples and max(idle.samples) > 0:  # a counter coarser than the window
            self.idle_watts = sum(idle.samples) / len(idle.samples)

    @contextmanager
    def measure(self) -> Iterator[Metered]:
        """Meters the block: the counter before and after it, power sampled beside it."""
        metered = Metered(self)
        counter = self._counter
        if counter is None:
            yield metered
            return
        with PowerSampler(counter.watts) as sampler:
            began, start = time.perf_counter(), _read(counter)
            yield metered
            end, ended = _read(counter), time.perf_counter()
        metered.samples = sampler.samples
        if isinstance(start, str) or isinstance(end, str):
            metered.failure = next(r for r in (start, end) if isinstance(r, str))
        else:
            metered.joules, metered.seconds = end - start, ended - began


def _read(counter: EnergyCounter) -> float | str:
    """The counter's joules, or why the reading failed: energy never fails an evaluation."""
    try:
        return counter.joules()
    except Exception as exc:  # NoCounter, or the driver's error mid-run (a GPU fallen off)
        return f"reading the {counter.source} counter failed: {exc}"


@contextmanager
def energy_meter(device: str, powercap: Path | None = None) -> Iterator[EnergyMeter]:
    """The meter of ``device`` for one evaluation, its idle power measured first."""
    if os.environ.get("MLMS_ENERGY", "").strip().lower() == "off":
        yield EnergyMeter(None, "energy collection is off (MLMS_ENERGY=off)")
        return
    try:
        counter = open_counter(device, powercap)
    except NoCounter as exc:
        yield EnergyMeter(None, str(exc))
        return
    try:
        meter = EnergyMeter(counter)
        meter.measure_idle()
        yield meter
    finally:
        counter.close()
