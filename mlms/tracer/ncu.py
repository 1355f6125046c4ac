"""The counter run: one predict under Nsight Compute (``ncu``), in a child process.

Why ncu and not CUPTI's range profiler through cupti-python: counters need kernel replay, which
the profiler API does per range with a config image and counter-data image that the caller
builds and decodes pass by pass; cupti-python 13.4 ships helpers for PM sampling (time-sliced,
not per kernel) but none for per-kernel range replay, so every metric pass would be hand-driven.
ncu does exactly that replay, per kernel, with save-and-restore of device memory, is installed
with every CUDA toolkit, and its ``gpu__time_duration`` is the reference the validation compares
our CUPTI durations against. It runs with ``--cache-control none --clock-control none`` so the
GPU keeps its own clocks and caches, as in the traced runs.

The child loads the same model asset on the same device, runs the warm-up predicts, and opens
the profiled range (cudaProfilerStart/Stop) around exactly one predict of the given batch.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlms.errors import Unavailable
from mlms.tracer.counters import CounterRow, parse_ncu_csv, wanted_metrics

MARK = "MLMS_NCU_RESULT "


@dataclass
class CounterRun:
    rows: list[CounterRow]
    latency_ns: int  # the profiled predict, replay included
    wall_seconds: float
    metrics: list[str]
    command: list[str] = field(default_factory=list)


def ncu_executable() -> str:
    path = shutil.which("ncu")
    if path is None:
        raise Unavailable(
            "hardware counters (trace level 'full') need Nsight Compute's ncu on PATH"
        )
    return path


def available_metrics(ncu: str, device_index: int) -> set[str]:
    """Base metric names this device's ncu can collect."""
    out = subprocess.run(
        [ncu, "--query-metrics", "--devices", str(device_index)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    return set(re.findall(r"^([a-z0-9]+__[a-z0-9_]+)", out, re.MULTILINE))


def collect(
    *,
    model: str,
    framework: str,
    asset_path: Path,
    device: str,
    batch: np.ndarray,
    warmup: int,
    workdir: Path,
    metrics: list[str] | None = None,
    timeout_s: float = 900,
) -> CounterRun:
    """Run one predict of ``batch`` under ncu and return its per-kernel counter rows.

    ``metrics`` defaults to every metric of ``mlms.tracer.counters`` this device's ncu has.
    """
    ncu = ncu_executable()
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    metrics = metrics or wanted_metrics(available_metrics(ncu, index))
    workdir.mkdir(parents=True, exist_ok=True)
    batch_path, log_path = workdir / "batch.npy", workdir / "ncu.csv"
    np.save(batch_path, batch)
    command = [
        ncu,
        "--profile-from-start", "off",
        "--cache-control", "none",
        "--clock-control", "none",
        "--target-processes", "all",
        "--metrics", ",".join(metrics),
        "--csv", "--page", "raw", "--print-units", "base",
        "--print-kernel-base", "mangled",
        "--log-file", str(log_path),
        sys.executable, "-m", "mlms.tracer.ncu",
        "--model", model, "--framework", framework, "--asset", str(asset_path),
        "--device", device, "--batch", str(batch_path), "--warmup", str(max(warmup, 1)),
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    wall = time.perf_counter() - began
    result = next(
        (
            json.loads(line[len(MARK) :])
            for line in done.stdout.splitlines()
            if line.startswith(MARK)
        ),
        None,
    )
    if done.returncode != 0 or result is None or not log_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise Unavailable(
            f"the ncu counter run failed (exit {done.returncode}): {' | '.join(tail)}"
        )
    rows = parse_ncu_csv(log_path.read_text())
    return CounterRun(rows, int(result["latency_ns"]), wall, metrics, command)


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m mlms.tracer.ncu")
    for name in ("--model", "--framework", "--asset", "--device", "--batch"):
        parser.add_argument(name, required=True)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.registry import predictor_class
    from mlms.zoo.resolve import resolve_model

    batch = np.load(args.batch)
    options = PredictorOptions(device=args.device)
    with predictor_class(args.framework)(resolve_model(args.model), Path(args.asset), options) as p:
        for _ in range(args.warmup):
            p.predict(batch)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        began = time.perf_counter_ns()
        p.predict(batch)
        latency = time.perf_counter_ns() - began
        torch.cuda.profiler.stop()
    print(MARK + json.dumps({"latency_ns": latency}), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1:])
