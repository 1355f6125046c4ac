"""XSP's model-level analyses: latency, throughput and energy against batch size, leveled
overheads.

Pure functions over evaluation records: the model-level latencies are the record's (its
model-level run, no profiler attached); each deeper leveled run's slowdown is read from it too.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mlms.evaluation.record import BatchResult, EvaluationRecord
from mlms.tracer.levels import TraceLevel

#: ``latency_by_batch``'s column where the record has energy.
ENERGY_COLUMN = "energy (J/inference)"
ENERGY_COLUMNS = [
    "batch size",
    "J/inference",
    "± (%)",
    "inferences/J",
    "average (W)",
    "peak (W)",
    "idle (W)",
    "seconds",
    "counter period (ms)",
    "source",
]


def latency_by_batch(record: EvaluationRecord) -> pd.DataFrame:
    """How do latency and throughput scale with batch size? Percentiles, mean, trimmed mean,
    throughput, energy per inference where measured and each leveled run's slowdown (x) per
    batch size."""
    measured = any(r.energy and r.energy.joules_per_inference for r in record.results)
    rows = []
    for result in record.results:
        stats = result.latency_ms
        row = {
            "batch size": result.batch_size,
            "iterations": result.iterations,
            "p50 (ms)": stats.p50,
            "p90 (ms)": stats.p90,
            "p95 (ms)": stats.p95,
            "p99 (ms)": stats.p99,
            "mean (ms)": stats.mean,
            "trimmed mean (ms)": stats.trimmed_mean,
            "throughput (inputs/s)": result.throughput,
        }
        if measured:
            row[ENERGY_COLUMN] = joules_per_inference(result)
        if result.samples is not None:
            row["samples"] = result.samples
        for label, level in result.levels.items():
            if label != TraceLevel.MODEL.label:
                row[f"{label} overhead (x)"] = level.overhead
        rows.append(row)
    return pd.DataFrame(rows)


def leveled_overheads(records: Sequence[EvaluationRecord]) -> pd.DataFrame:
    """What does each profiling level cost? One row per evaluation, batch size and leveled run:
    its p50 latency and its slowdown against the model-level run."""
    rows = [
        {
            "evaluation": record.id,
            "batch size": result.batch_size,
            "level": label,
            "run": level.run,
            "p50 (ms)": level.latency_ms.get("p50"),
            "overhead (x)": level.overhead,
            "spans": level.spans,
        }
        for record in records
        for result in record.results
        for label, level in result.levels.items()
    ]
    columns = ["evaluation", "batch size", "level", "run", "p50 (ms)", "overhead (x)", "spans"]
    return pd.DataFrame(rows, columns=columns)


def joules_per_inference(result: BatchResult) -> float:
    """The batch size's energy per inference; NaN where it was not measured."""
    energy = result.energy
    if energy is None or energy.joules_per_inference is None:
        return float("nan")
    return energy.joules_per_inference


def energy_by_batch(record: EvaluationRecord) -> pd.DataFrame:
    """Which batch size is the most efficient? Per measured batch size: joules per inference,
    inferences per joule, the average watts (all from the device's energy counter over the
    model-level run), the peak of the power sampled beside it and the idle power before the
    model loaded; the joules' uncertainty (± %) from the counter's update period, which each
    end of the window may be off by. Empty where nothing was measured (``energy_reasons`` says
    why)."""
    nan = float("nan")
    rows = [
        [
            result.batch_size,
            energy.joules_per_inference,
            nan if energy.joules_uncertainty is None else energy.joules_uncertainty * 100,
            energy.inferences_per_joule,
            energy.average_watts,
            energy.peak_watts,
            energy.idle_watts,
            energy.seconds,
            nan if energy.counter_period_s is None else energy.counter_period_s * 1e3,
            energy.source,
        ]
        for result in record.results
        if (energy := result.energy) is not None and energy.joules_per_inference is not None
    ]
    return pd.DataFrame(rows, columns=ENERGY_COLUMNS)


CONDITION_COLUMNS = [
    "batch size",
    "SM clock (MHz)",
    "lowest (MHz)",
    "highest (MHz)",
    "clock limits",
    "CPU steal (%)",
]


def conditions_by_batch(record: EvaluationRecord) -> pd.DataFrame:
    """Did the machine hold still? Per batch size, over its model-level run: the GPU's SM
    clock (mean and lowest of the samples, and the GPU's highest), the reasons the driver gave
    for holding the clocks down, and the share of the host's CPU time its hypervisor took.
    Empty where none was read (records before they were)."""
    nan = float("nan")
    rows = [
        [
            result.batch_size,
            nan if c.sm_clock_mhz is None else c.sm_clock_mhz,
            nan if c.sm_clock_min_mhz is None else c.sm_clock_min_mhz,
            nan if c.sm_clock_max_mhz is None else c.sm_clock_max_mhz,
            ", ".join(c.clock_limits),
            nan if c.cpu_steal is None else c.cpu_steal * 100,
        ]
        for result in record.results
        if (c := result.conditions) is not None
    ]
    return pd.DataFrame(rows, columns=CONDITION_COLUMNS)


def energy_reasons(record: EvaluationRecord) -> list[str]:
    """Why the batch sizes without energy have none, each reason once, as
    ``batch size 1: reason``; a record made before energy was measured says so."""
    reasons: dict[str, list[int]] = {}
    for result in record.results:
        energy = result.energy
        if energy is not None and energy.joules_per_inference is not None:
            continue
        reason = (
            "the record predates energy measurement"
            if energy is None
            else energy.reason or "not measured"
        )
        reasons.setdefault(reason, []).append(result.batch_size)
    return [
        f"batch size {', '.join(map(str, sizes))}: {reason}" for reason, sizes in reasons.items()
    ]
