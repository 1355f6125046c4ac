"""Energy of a measured run: joules from the device's own cumulative energy counter
(``mlms.evaluation.counters``: NVML on NVIDIA GPUs, RAPL on CPUs).

The counter is read before and after each run; the joules and the average watts come from it
alone. Power is sampled beside the run by a child process (``mlms.evaluation.power_sampler``)
for the peak only, so the measured process runs no thread of ours: on A100 and H100 the
driver's power reading covers part of each interval, so it never gives the energy. The idle
power and the counter's update period are measured before an evaluation's model loads, at most
once every ``IDLE_REUSE_SECONDS`` per device and process: the evaluations after it within that
time (a sweep's follow each other within seconds) take its reading rather than wait another
window each, and a window right after an evaluation would find the device still settling
from it rather than idle. Both counters cover the whole device (every process on the GPU, every
core of the package), as the driver sees it.

A counter that changes every ``period`` seconds leaves each end of a window up to one period
off, so a run's joules carry ``± 2 × period × average watts``: the record says how much, and
short windows show it.

Where no counter can be read, the meter says why (``EnergyResult.reason``), never a zero.
``MLMS_ENERGY=off`` turns collection off.
"""

from __future__ import annotations

import itertools
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from mlms.evaluation.counters import EnergyCounter, NoCounter, open_counter
from mlms.evaluation.power_sampler import PowerSampler, PowerSamples, SamplerFailed
from mlms.evaluation.record import EnergyResult, EnergySource

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Where Linux exposes RAPL.
POWERCAP = Path("/sys/class/powercap")
#: The idle window, and how often the counter is read in it to find its update period.
IDLE_SECONDS = 0.5
POLL_SECONDS = 0.001
#: How long one device's idle reading serves the evaluations after it in this process.
IDLE_REUSE_SECONDS = 60.0


@dataclass(frozen=True)
class IdleReading:
    """A device's idle power and its counter's update period, and when they were read."""

    watts: float | None
    counter_period_s: float | None
    at: float  # time.monotonic()


#: The last idle reading of each device (as this process's CUDA_VISIBLE_DEVICES maps it) and
#: powercap root in this process.
_IDLE: dict[tuple[str, ...], IdleReading] = {}
_IDLE_LOCK = threading.Lock()


class Metered:
    """One run's energy, filled in when its ``EnergyMeter.measure`` block ends."""

    def __init__(self, meter: EnergyMeter) -> None:
        self._meter = meter
        self.joules: float | None = None
        self.seconds = 0.0
        self.samples: PowerSamples | None = None
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
                counter_period_s=meter.counter_period_s,
            )
        period = meter.counter_period_s
        return EnergyResult(
            source=meter.source,
            joules=self.joules,
            seconds=self.seconds,
            joules_per_inference=self.joules / inferences,
            inferences_per_joule=inferences / self.joules,
            average_watts=self.joules / self.seconds,
            peak_watts=self.samples.peak if self.samples else None,
            idle_watts=meter.idle_watts,
            power_samples=self.samples.count if self.samples else 0,
            counter_period_s=period,
            # 2 × period × (joules / seconds) / joules
            joules_uncertainty=2 * period / self.seconds if period is not None else None,
        )


class EnergyMeter:
    """Meters the runs of one evaluation on one device; ``reason`` is set when it cannot."""

    def __init__(
        self,
        counter: EnergyCounter | None,
        reason: str | None = None,
        sampler: PowerSampler | None = None,
    ) -> None:
        self._counter = counter
        self._sampler = sampler
        self.reason = reason
        self.source: EnergySource | None = counter.source if counter else None
        self.idle_watts: float | None = None
        self.counter_period_s: float | None = None
        #: The device's highest SM clock, as the power sampler read it (None on a CPU).
        self.max_sm_mhz: float | None = sampler.max_sm_mhz if sampler else None

    def measure_idle(self, seconds: float = IDLE_SECONDS) -> None:
        """The device's power with nothing of ours on it (the counter over ``seconds``) and
        the counter's update period (the median time between its changes meanwhile)."""
        if self._counter is None:
            return
        with self.measure() as idle:
            self.counter_period_s = _update_period(self._counter, seconds)
        if idle.joules:
            self.idle_watts = idle.joules / idle.seconds
        elif idle.samples and idle.samples.peak:  # a counter coarser than the window
            self.idle_watts = idle.samples.mean

    def take_idle(self, reading: IdleReading) -> None:
        """An earlier meter's idle reading of the same device, instead of a window of its own."""
        self.idle_watts, self.counter_period_s = reading.watts, reading.counter_period_s

    @contextmanager
    def measure(self) -> Iterator[Metered]:
        """Meters the block: the counter before and after it, power sampled beside it."""
        metered = Metered(self)
        counter = self._counter
        if counter is None:
            yield metered
            return
        sampling = self._sample(PowerSampler.start) is not None
        began, start = time.perf_counter(), _read(counter)
        yield metered
        end, ended = _read(counter), time.perf_counter()
        if sampling:
            metered.samples = self._sample(PowerSampler.stop)
        if isinstance(start, str) or isinstance(end, str):
            metered.failure = next(r for r in (start, end) if isinstance(r, str))
        else:
            metered.joules, metered.seconds = end - start, ended - began

    def _sample(self, step: Callable[[PowerSampler], T]) -> T | Literal[False] | None:
        """``step(sampler)``'s result (False for none); None without a sampler, or once it
        has failed, which costs the peak watts only."""
        if self._sampler is None:
            return None
        try:
            result = step(self._sampler)
        except SamplerFailed as exc:
            log.warning("power sampling stopped: %s", exc)
            self.close()
            return None
        return False if result is None else result

    def close(self) -> None:
        """Ends the power sampler's child."""
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None


def _read(counter: EnergyCounter) -> float | str:
    """The counter's joules, or why the reading failed: energy never fails an evaluation."""
    try:
        return counter.joules()
    except Exception as exc:  # NoCounter, or the driver's error mid-run (a GPU fallen off)
        return f"reading the {counter.source} counter failed: {exc}"


def _update_period(counter: EnergyCounter, seconds: float) -> float | None:
    """The median time between the counter's changes, read every millisecond for
    ``seconds``; None where it changed fewer than three times (or a reading failed)."""
    changed: list[float] = []
    try:
        last, end = counter.joules(), time.perf_counter() + seconds
        while time.perf_counter() < end:
            time.sleep(POLL_SECONDS)
            if (value := counter.joules()) != last:
                changed.append(time.perf_counter())
                last = value
    except Exception:
        return None
    gaps = [after - before for before, after in itertools.pairwise(changed)]
    return statistics.median(gaps) if len(gaps) >= 2 else None


@contextmanager
def energy_meter(device: str, powercap: Path | None = None) -> Iterator[EnergyMeter]:
    """The meter of ``device`` for one evaluation, its idle power measured first."""
    if os.environ.get("MLMS_ENERGY", "").strip().lower() == "off":
        yield EnergyMeter(None, "energy collection is off (MLMS_ENERGY=off)")
        return
    root = powercap or POWERCAP
    try:
        counter = open_counter(device, root)
    except NoCounter as exc:
        yield EnergyMeter(None, str(exc))
        return
    try:
        sampler = PowerSampler(device, root)
    except NoCounter as exc:
        log.warning("no peak power for %s: %s", device, exc)
        sampler = None
    meter = EnergyMeter(counter, sampler=sampler)
    try:
        _idle(meter, (device, os.environ.get("CUDA_VISIBLE_DEVICES", ""), str(root)))
        yield meter
    finally:
        meter.close()
        counter.close()


def _idle(meter: EnergyMeter, key: tuple[str, ...]) -> None:
    """The device's idle reading of the last ``IDLE_REUSE_SECONDS``, else a new one kept for
    the meters after it; a window that read nothing is not kept."""
    with _IDLE_LOCK:
        reading = _IDLE.get(key)
    if reading is not None and time.monotonic() - reading.at < IDLE_REUSE_SECONDS:
        meter.take_idle(reading)
        return
    meter.measure_idle()
    if meter.idle_watts is not None:
        with _IDLE_LOCK:
            _IDLE[key] = IdleReading(meter.idle_watts, meter.counter_period_s, time.monotonic())
