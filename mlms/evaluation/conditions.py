"""The conditions of a measured run: what the machine did beside it that moves its latency
while the model stays the same.

    GPU  the SM clock (mean and lowest over the run, against the GPU's highest) and every
         reason NVML gave for holding the clocks down, sampled with the power in the power
         sampler's child (``mlms.evaluation.power_sampler``), so they come with energy
    host the share of all CPU time that the hypervisor gave to other guests (steal, from
         ``/proc/stat``): on a shared VM a launch-bound run slows down with it

Both are read outside the timed loop (the steal before and after it, the clocks in another
process), so reading them costs the run nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mlms.evaluation.counters import limit_names
from mlms.evaluation.power_sampler import PowerSamples
from mlms.evaluation.record import RunConditions

#: Past these a run's latency may not repeat, and ``mlms eval`` says so: the hypervisor took
#: this share of the host's CPU time, or the SM clock averaged below this share of its highest.
STEAL_WARNING = 0.05
CLOCK_WARNING = 0.95
#: Where Linux counts each CPU state's time; its first line sums every core.
PROC_STAT = Path("/proc/stat")
#: The fields of that line up to steal (user nice system idle iowait irq softirq steal); guest
#: time comes after and is already counted in user.
_STEAL_FIELD = 7


@dataclass(frozen=True)
class CpuTimes:
    """The host's CPU time (all cores, in the kernel's ticks): stolen, and in all."""

    steal: int
    total: int


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The host's CPU time so far; None where ``path`` cannot be read (not Linux)."""
    try:
        with path.open() as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) <= _STEAL_FIELD + 1:
        return None
    ticks = [int(value) for value in fields[1 : _STEAL_FIELD + 2]]
    return CpuTimes(steal=ticks[_STEAL_FIELD], total=sum(ticks))


class Steal:
    """The share of CPU time stolen over a block (``host_steal``); None until it ends, and
    where it could not be read or no tick passed."""

    def __init__(self) -> None:
        self.share: float | None = None


@contextmanager
def host_steal(path: Path = PROC_STAT) -> Iterator[Steal]:
    """Measures the steal over the block."""
    steal = Steal()
    before = cpu_times(path)
    yield steal
    after = cpu_times(path)
    if before is not None and after is not None and after.total > before.total:
        steal.share = (after.steal - before.steal) / (after.total - before.total)


def run_conditions(
    samples: PowerSamples | None, max_sm_mhz: float | None, steal: float | None
) -> RunConditions | None:
    """The record's view of one run's conditions; None where nothing was read."""
    if samples is None or samples.sm_mhz_mean is None:
        return None if steal is None else RunConditions(cpu_steal=steal)
    return RunConditions(
        sm_clock_mhz=samples.sm_mhz_mean,
        sm_clock_min_mhz=samples.sm_mhz_min,
        sm_clock_max_mhz=max_sm_mhz,
        clock_limits=limit_names(samples.limits),
        cpu_steal=steal,
    )


def unsteady(conditions: RunConditions) -> str | None:
    """Why a run's latency may not repeat, in one line; None where the machine held still."""
    said = []
    steal = conditions.cpu_steal
    if steal is not None and steal >= STEAL_WARNING:
        said.append(f"the hypervisor took {steal:.0%} of the host's CPU time (steal)")
    mean, top = conditions.sm_clock_mhz, conditions.sm_clock_max_mhz
    if mean is not None and top and mean < CLOCK_WARNING * top:
        held = [name for name in conditions.clock_limits if name != "gpu_idle"]
        why = f" ({', '.join(held)})" if held else ""
        said.append(f"the GPU's SM clock averaged {mean:.0f} of its {top:.0f} MHz{why}")
    if not said:
        return None
    return " and ".join(said) + " during the run: its latency may not repeat"
