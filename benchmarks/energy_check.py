"""Energy per inference on the GPU, checked against the driver's counter read by another process,
and what collecting it costs. Run by the GPU run kit's gpu_halves plan; prints one table
and writes it (and every number) under --out.

For each model, precision and batch size (resnet50 at 1, 16, 64, 256 and BERT-base at 32 x 512
tokens, fp32 and fp16, inputs on the device), through mlms's own evaluation:

1. Joules: a sidecar process polls NVML's total energy counter (mJ) every millisecond and logs
   each change with the wall clock; each batch size's model-level run (its "run 1: model"
   span, the window mlms meters) is looked up in that log. Target: mlms's joules over the
   driver's within 2 %.
2. Cost: evaluations with energy collection (the default) and without (MLMS_ENERGY=off)
   interleaved, on/off then off/on, round after round; each batch size's p50 with over
   without in each round, the median of those ratios and their spread (min .. max over the
   rounds): where the spread is wider than the target, the noise hides any effect and the
   check is inconclusive. Target: <= 1.01.
3. What else moved: each run's conditions as mlms recorded them (the SM clock's mean and lowest,
   read with the power, so in the runs with energy only; the host's CPU steal in every run),
   to name the cause where the rounds disagree.

    python3 benchmarks/energy_check.py --out DIR [--rounds 3] [--min-seconds 2]
        [--configs resnet50:fp32:1,resnet50:fp16:1/16,bert_base:fp16:32]
    python3 benchmarks/energy_check.py --out DIR --hw cpu --smoke   # this script's logic, no GPU
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from mlms.errors import HardwareNotFound
from mlms.evaluation.energy import energy_meter
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest, RunConditions
from mlms.evaluation.runner import evaluate
from mlms.store.factory import default_store

MODEL_RUN = "run 1: model"


class Config(NamedTuple):
    model: str
    precision: str
    batch_sizes: list[int]
    seq_len: int | None


GPU_CONFIGS = [
    Config(model, precision, sizes, seq_len)
    for precision in ("fp32", "fp16")
    for model, sizes, seq_len in (("resnet50", [1, 16, 64, 256], None), ("bert_base", [32], 512))
]
SMOKE_CONFIGS = [Config("digits_cnn", "fp32", [1, 4], None)]
SEQ_LEN = {"bert_base": 512}  # the BERT-base configuration's sequence length


def parse_configs(text: str) -> list[Config]:
    """``model:precision:size[/size...]`` separated by commas, in that order, the batch sizes
    of one model and precision joined into one evaluation."""
    configs: dict[tuple[str, str], list[int]] = {}
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{item!r} is not model:precision:batch[/batch...]")
        model, precision, sizes = parts
        if precision not in ("fp32", "fp16"):
            raise ValueError(f"precision {precision!r} in {item!r}: expected fp32 or fp16")
        try:
            batches = [int(size) for size in sizes.split("/")]
        except ValueError:
            raise ValueError(f"batch sizes {sizes!r} in {item!r}: expected integers") from None
        if min(batches) < 1:
            raise ValueError(f"batch sizes {sizes!r} in {item!r}: expected positive integers")
        known = configs.setdefault((model, precision), [])
        known += [size for size in batches if size not in known]
    return [
        Config(model, precision, sorted(sizes), SEQ_LEN.get(model))
        for (model, precision), sizes in configs.items()
    ]


class RunWindows(SpanProcessor):
    """The wall-clock window (ns) of each batch size's model-level run, in order."""

    def __init__(self) -> None:
        self.windows: list[tuple[int, int]] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == MODEL_RUN and span.start_time and span.end_time:
            self.windows.append((span.start_time, span.end_time))


# -- the sidecar: NVML's counter from a process of its own ---------------------------------------


def sidecar(index: int, log: Path) -> None:
    """Polls GPU ``index``'s total energy counter until SIGTERM, logging each new value as
    ``<time.time_ns()> <mJ>``."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    last = None
    with log.open("w") as out:
        print("ready", flush=True)
        while not stopping:
            value = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            if value != last:
                out.write(f"{time.time_ns()} {value}\n")
                out.flush()  # read while it runs
                last = value
            time.sleep(0.001)
    pynvml.nvmlShutdown()


class CounterLog(NamedTuple):
    """The sidecar's log: when each value of the counter was first seen."""

    times: list[int]
    millijoules: list[int]

    @classmethod
    def read(cls, path: Path, past_ns: int = 0, timeout: float = 5.0) -> CounterLog:
        """The log as far as it goes, once it has a change after ``past_ns`` (the counter
        moves at idle too) or ``timeout`` seconds have passed."""
        deadline = time.perf_counter() + timeout
        while True:
            text = path.read_text()
            whole = text[: text.rfind("\n") + 1]  # a line being written is left for later
            pairs = [tuple(map(int, line.split())) for line in whole.splitlines()]
            if (pairs and pairs[-1][0] > past_ns) or time.perf_counter() > deadline:
                return cls([t for t, _ in pairs], [mj for _, mj in pairs])
            time.sleep(0.01)

    def at(self, when_ns: int) -> int:
        """The counter as a process reading it at ``when_ns`` saw it."""
        index = bisect.bisect_right(self.times, when_ns) - 1
        if index < 0:
            raise ValueError(f"the sidecar's log starts after {when_ns}")
        return self.millijoules[index]

    def joules(self, start_ns: int, end_ns: int) -> float:
        return (self.at(end_ns) - self.at(start_ns)) / 1e3

    def update_ms(self) -> float | None:
        """The median time between the counter's changes."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:], strict=False)]
        return statistics.median(gaps) / 1e6 if gaps else None


class Sidecar:
    def __init__(self, index: int, log: Path) -> None:
        self.log = log
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--sidecar", str(index), str(log)],
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> Sidecar:
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            raise SystemExit(
                f"energy_check: the NVML sidecar did not start (rc {self._process.wait()})"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.send_signal(signal.SIGTERM)
        self._process.wait(timeout=30)


# -- the evaluations -------------------------------------------------------------------------------


def evaluate_once(
    config: Config, args: argparse.Namespace, energy: bool
) -> tuple[EvaluationRecord, list[tuple[int, int]]]:
    request = EvaluationRequest(
        model=config.model,
        framework="torch",
        hw=args.hw,
        batch_sizes=config.batch_sizes,
        iterations=args.iterations,
        warmup=args.warmup,
        min_seconds=args.min_seconds,
        precision=config.precision,
        seq_len=config.seq_len,
        input_on_device=args.hw != "cpu",
    )
    windows = RunWindows()
    if energy:
        os.environ.pop("MLMS_ENERGY", None)
    else:
        os.environ["MLMS_ENERGY"] = "off"
    try:
        record = evaluate(request, store=default_store(), processors=(windows,))
    finally:
        os.environ.pop("MLMS_ENERGY", None)
    if len(windows.windows) != len(config.batch_sizes):
        raise SystemExit(
            f"energy_check: {len(windows.windows)} {MODEL_RUN!r} spans for "
            f"{len(config.batch_sizes)} batch sizes"
        )
    return record, windows.windows


def measure(config: Config, args: argparse.Namespace) -> dict[int, dict[str, list]]:
    """``args.rounds`` rounds of one evaluation with energy and one without, in alternating
    order: per batch size, the p50s with and without, and the energy and window of each run
    with."""
    rows = {
        size: {"on": [], "off": [], "runs": [], "conditions": [], "order": []}
        for size in config.batch_sizes
    }
    # Unrecorded: builds the asset, starts CUDA and cuDNN's algorithm choice for each shape.
    evaluate_once(config, argparse.Namespace(**{**vars(args), "min_seconds": 0.0}), False)
    for number in range(args.rounds):
        for energy in (True, False) if number % 2 == 0 else (False, True):
            record, windows = evaluate_once(config, args, energy)
            for result, window in zip(record.results, windows, strict=True):
                row = rows[result.batch_size]
                row["on" if energy else "off"].append(result.latency_ms.p50)
                row["order"].append({"energy": energy, "p50_ms": result.latency_ms.p50})
                row["conditions"].append(result.conditions)
                if energy:
                    row["runs"].append((result.energy, window))
    return rows


def _row(
    config: Config, size: int, row: dict[str, list], counter: CounterLog | None
) -> dict[str, Any]:
    ratios = [on / off for on, off in zip(row["on"], row["off"], strict=True)]
    out: dict[str, Any] = {
        "model": config.model if config.seq_len is None else f"{config.model} x{config.seq_len}",
        "precision": config.precision,
        "batch": size,
        "p50_on_ms": statistics.median(row["on"]),
        "p50_off_ms": statistics.median(row["off"]),
        "p50_ratio": statistics.median(ratios),
        "p50_spread": f"{min(ratios):.3f}..{max(ratios):.3f}",
        "p50_ratios": ratios,
        **_host_episodes(row["on"], row["off"]),
        "p50_runs": row["order"],
        **_conditions(row["conditions"]),
    }
    energies = [energy for energy, _ in row["runs"] if energy.joules is not None]
    if not energies:
        out["energy"] = row["runs"][0][0].reason
        return out
    out.update(
        {
            "j_per_inf": statistics.median(e.joules_per_inference for e in energies),
            "inf_per_j": statistics.median(e.inferences_per_joule for e in energies),
            "avg_w": statistics.median(e.average_watts for e in energies),
            "peak_w": max(e.peak_watts or 0.0 for e in energies),
            "idle_w": statistics.median(e.idle_watts or 0.0 for e in energies),
            "seconds": statistics.median(e.seconds for e in energies),
            "j_pm_pct": statistics.median(100 * (e.joules_uncertainty or 0.0) for e in energies),
        }
    )
    if counter is not None:
        pairs = [(e.joules, counter.joules(*window)) for e, window in row["runs"] if e.joules]
        ratios = [ours / theirs for ours, theirs in pairs]
        out["mlms_j"] = [ours for ours, _ in pairs]
        out["driver_j"] = [theirs for _, theirs in pairs]
        out["j_ratio_worst"] = max(ratios, key=lambda r: abs(r - 1))
    return out


def _host_episodes(on: list[float], off: list[float]) -> dict[str, Any]:
    """The fastest run with energy over the fastest without, and how many runs of each kind
    were slower than the fastest of all by more than ``SLOW``: a host that slows for a while
    slows runs of both kinds, which energy collection alone would not."""
    fastest = min(on + off)
    return {
        "p50_best_ratio": min(on) / min(off),
        "slow_on": sum(p50 > fastest * SLOW for p50 in on),
        "slow_off": sum(p50 > fastest * SLOW for p50 in off),
    }


#: A run this much slower than the fastest of its configuration counts as slowed.
SLOW = 1.10


def _conditions(seen: list[RunConditions | None]) -> dict[str, Any]:
    """The SM clock's median mean and its lowest over the runs that read it, and the largest
    CPU steal of any run (%), with every run's, in order."""
    read = [c for c in seen if c is not None]
    clocked = [c for c in read if c.sm_clock_mhz is not None]
    steal = [100 * c.cpu_steal for c in read if c.cpu_steal is not None]
    out: dict[str, Any] = {"steal_pcts": steal, "steal_pct": max(steal, default=None)}
    if clocked:
        out |= {
            "sm_mhz": statistics.median(c.sm_clock_mhz for c in clocked),
            "sm_min": min(c.sm_clock_min_mhz for c in clocked),
            "sm_mhz_runs": [c.sm_clock_mhz for c in clocked],
            "clock_limits": sorted({name for c in clocked for name in c.clock_limits}),
        }
    return out


# -- output ------------------------------------------------------------------------------------


COLUMNS = [
    "model", "precision", "batch", "p50_on_ms", "p50_off_ms", "p50_ratio", "p50_spread",
    "p50_best_ratio", "slow_on", "slow_off", "j_per_inf", "inf_per_j", "avg_w", "peak_w",
    "idle_w", "seconds", "j_pm_pct", "j_ratio_worst",
    "sm_mhz", "sm_min", "steal_pct",
]  # fmt: skip
#: The p50 target: collection costs at most 1 %.
P50_TARGET = 1.01


def table(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}" if abs(value) < 1 else f"{value:.4f}"[:8]
        return "" if value is None else str(value)

    cells = [[cell(row.get(c)) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    p50 = max(row["p50_ratio"] for row in rows)
    lines.append(
        f"p50 with / without energy collection, worst batch size's median over rounds: "
        f"{p50:.4f} (target <= {P50_TARGET})"
    )
    noisy = [
        row
        for row in rows
        if max(row["p50_ratios"]) - min(row["p50_ratios"]) > 2 * (P50_TARGET - 1)
    ]
    if noisy:
        lines.append(
            "inconclusive (the rounds' ratios spread wider than the target allows: noise "
            "larger than any effect): "
            + "; ".join(f"{_named(row)} ({row['p50_spread']})" for row in noisy)
        )
        lines += [
            f"{_named(row)}: fastest run with / without {row['p50_best_ratio']:.4f}; runs "
            f"over {SLOW:.2f}x the fastest: {row['slow_on']} with energy, {row['slow_off']} "
            "without"
            for row in noisy
        ]
    ratios = [row["j_ratio_worst"] for row in rows if "j_ratio_worst" in row]
    if ratios:
        worst = max(ratios, key=lambda r: abs(r - 1))
        lines.append(
            f"mlms joules / the driver's counter (sidecar), worst run: {worst:.4f} "
            "(target 0.98 .. 1.02)"
        )
    reasons = {row["energy"] for row in rows if "energy" in row}
    lines += [f"energy not measured: {reason}" for reason in reasons]
    return lines


def _named(row: dict[str, Any]) -> str:
    return f"{row['model']} {row['precision']} batch {row['batch']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=2.0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--hw", default="gpu")
    parser.add_argument("--smoke", action="store_true", help="digits_cnn only: the script's logic")
    parser.add_argument(
        "--configs",
        help="model:precision:batch[/batch...] separated by commas (default: resnet50 at 1, "
        "16, 64, 256 and bert_base at 32, fp32 and fp16)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected a positive count")
    try:
        chosen = parse_configs(args.configs) if args.configs else None
    except ValueError as exc:
        parser.error(f"--configs: {exc}")
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu"
    if args.hw != "cpu":
        from mlms import hardware

        try:
            device = hardware.resolve(args.hw)
        except HardwareNotFound as exc:
            raise SystemExit(f"energy_check: {exc}") from None
        with energy_meter(device) as meter:
            if meter.reason is not None:
                raise SystemExit(f"energy_check: no energy counter on {device}: {meter.reason}")
    configs = chosen or (SMOKE_CONFIGS if args.smoke else GPU_CONFIGS)
    log = args.out / "nvml_counter.log"
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    counter = None
    index = int(device.partition(":")[2] or 0)
    with Sidecar(index, log) if device != "cpu" else contextlib.nullcontext():
        for config in configs:
            measured = measure(config, args)
            if device != "cpu":
                last = max(window[1] for raw in measured.values() for _, window in raw["runs"])
                counter = CounterLog.read(log, past_ns=last)
            done = [_row(config, size, raw, counter) for size, raw in measured.items()]
            print(table(done), flush=True)  # as it goes: the whole table comes at the end
            rows += done
    lines = [
        f"energy per inference on {device}, inputs on the device: {args.rounds} rounds of an "
        f"evaluation with energy collection and one without (MLMS_ENERGY=off), alternating; "
        f"min {args.min_seconds} s per batch size",
        table(rows),
        *verdict(rows),
    ]
    if counter is not None:
        update = counter.update_ms()
        lines.append(
            f"the driver's energy counter changed {len(counter.times)} times; median "
            f"{update:.2f} ms between changes"
            if update
            else "the counter never changed"
        )
    lines.append(f"total {time.perf_counter() - began:.0f} s")
    text = "\n".join(lines)
    print(text)
    (args.out / "energy_check.txt").write_text(text + "\n")
    (args.out / "energy_check.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--sidecar":
        sidecar(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
