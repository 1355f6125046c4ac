"""Where a predict's host part gets its speed: the CPU its thread runs on, or the load.

An evaluation's launch (the host's part of a GPU predict: until the forward returned) at batch 1
moved by up to 45 % between evaluations of one sweep seconds apart, eager and compiled alike,
while each evaluation's own median held to a few per cent. This script tells apart the two
things that change from one evaluation to the next: the CPU the measuring thread lands on, and
the model's load (its Python objects and host memory, made anew each time). With the
product's predictor and its own timing (``Predictor.launches``):

  reloads, free     the model loaded afresh for each block, the thread where the OS puts it
                    (what evaluations do): the spread over loads, and the CPUs the thread sat on
  one load, per CPU one load, its thread pinned to each CPU in turn: the spread over CPUs
  reloads, pinned   the model loaded afresh for each block, the thread pinned to one CPU (the
                    first one the host lets it use): the spread over loads alone

Each row: the block's launch p50 and whole predict p50 (ms), the CPU(s) the thread ran on
and their NUMA node. A spread over CPUs as wide as over free reloads, with pinned reloads
steady, puts the evaluations' spread on where the thread runs; the reverse, on the load.

    .venv/bin/python benchmarks/host_placement.py [--model resnet50] [--device cuda:0]
        [--precision fp32] [--compile MODE] [--loads 8] [--cpus all|0,2,4] [--block 200]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.store.factory import default_store

WARMUP = 20


def current_cpu() -> int:
    """The CPU the calling thread last ran on (field 39 of its /proc stat line)."""
    line = Path("/proc/thread-self/stat").read_text()
    return int(line[line.rindex(")") + 2 :].split()[36])


def numa_node(cpu: int) -> int | None:
    nodes = list(Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*"))
    return int(nodes[0].name.removeprefix("node")) if nodes else None


def siblings(cpu: int) -> str:
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    return path.read_text().strip() if path.exists() else "?"


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """The calling thread on ``cpu`` alone while the block runs (None: as it was)."""
    before = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def block(predictor: Any, batch: np.ndarray, count: int) -> dict[str, Any]:
    """``count`` predicts after a warm-up: launch and predict p50 (ms), the CPUs the thread ran
    on (sampled every tenth predict)."""
    for _ in range(WARMUP):
        predictor.predict(batch)
    predictor.launches.clear()
    times, cpus = [], Counter()
    for index in range(count):
        began = time.perf_counter_ns()
        predictor.predict(batch)
        times.append((time.perf_counter_ns() - began) / 1e6)
        if index % 10 == 0:
            cpus[current_cpu()] += 1
    launches = [ns / 1e6 for ns in predictor.launches]
    cpu = cpus.most_common(1)[0][0]
    return {
        "launch_ms": statistics.median(launches) if launches else float("nan"),
        "predict_ms": statistics.median(times),
        "cpu": cpu,
        "cpus": len(cpus),
        "node": numa_node(cpu),
    }


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    manifest = get_model(args.model)
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    spec = manifest.inputs[0]
    shape = (1, *spec.shape)
    batch = np.random.default_rng(0).standard_normal(shape).astype(spec.dtype)
    options = PredictorOptions(
        device=args.device, precision=args.precision, compile=args.compile or None
    )
    cpus = args.cpus
    load = predictor_class("torch")
    out: dict[str, list[dict[str, Any]]] = {"reloads, free": [], "one load, per CPU": []}
    for index in range(args.loads):
        with load(manifest, asset.path, options) as predictor:
            out["reloads, free"].append({"load": index, **block(predictor, batch, args.block)})
    with load(manifest, asset.path, options) as predictor:
        block(predictor, batch, args.block)  # compiled: the compile, outside every pinned block
        for cpu in cpus:
            with pinned(cpu):
                out["one load, per CPU"].append(block(predictor, batch, args.block))
    first = cpus[0]
    out[f"reloads, pinned to CPU {first}"] = []
    for index in range(args.loads):
        with pinned(first), load(manifest, asset.path, options) as predictor:
            row = {"load": index, **block(predictor, batch, args.block)}
            out[f"reloads, pinned to CPU {first}"].append(row)
    return out


def spread(rows: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in rows if r[key] == r[key]]
    if not values:
        return "-"
    low, high, mid = min(values), max(values), statistics.median(values)
    return f"{mid:.3f} ({low:.3f}-{high:.3f}, max/min {high / low:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", default="", help="a torch.compile mode (default: eager)")
    parser.add_argument("--loads", type=int, default=8)
    parser.add_argument("--cpus", default="all", help="'all' (those the process may use) or a list")
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    if args.cpus == "all":
        args.cpus = allowed
    else:
        named = args.cpus.split(",")
        args.cpus = [int(c) for c in named if c.strip().isdigit()]
        if len(args.cpus) != len(named) or not set(args.cpus) <= set(allowed):
            parser.error(f"--cpus {','.join(named)!r}: expected 'all' or CPUs among {allowed}")
    if args.loads < 0 or args.block < 1:
        parser.error(f"--loads {args.loads} --block {args.block}: expected 0 or more, 1 or more")
    print(
        f"{args.model} on {args.device}, {args.precision}, {args.compile or 'eager'}, batch 1: "
        f"{args.block} predicts a block; {len(allowed)} CPUs allowed "
        f"(NUMA nodes {sorted({numa_node(c) for c in allowed}, key=str)}; "
        f"CPU {allowed[0]}'s siblings {siblings(allowed[0])})"
    )
    out = run(args)
    for name, rows in out.items():
        launch, whole = spread(rows, "launch_ms"), spread(rows, "predict_ms")
        print(f"{name}: launch p50 {launch}; predict p50 {whole}")
        for row in rows:
            where = f"cpu {row['cpu']:>3} node {row['node']}" + (
                f" ({row['cpus']} cpus)" if row["cpus"] > 1 else ""
            )
            label = f"load {row['load']}" if "load" in row else ""
            print(
                f"  {label:8} {where:26} launch {row['launch_ms']:7.3f}  "
                f"predict {row['predict_ms']:7.3f}"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
