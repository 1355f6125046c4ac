"""What collecting layers and GPU activities costs the predicts it measures, beside
torch.profiler, side by side in one run.

One predictor; rounds that run a block of predicts under each configuration in turn (the
order rotates each round), timed on the host around ``predict``:

  plain                    nothing collected
  mlms layers              the layer events of the framework level on CUDA (``HookedLayers``),
                           run on whatever device is asked for
  torch.profiler cpu       ProfilerActivity.CPU with shapes (the CPU framework level's source)
  on a CUDA device also:
  mlms cupti               CuptiCollector at hardware (API calls + kernels, copies, sets)
  mlms cupti api           CuptiCollector at system_library (API calls only)
  mlms layers+cupti        the hardware level: both
  mlms layers+cupti api    layers and API calls (what the kernels' records add, by difference)
  mlms layers+cupti 0.1ms  the hardware level with the interpreter's thread switch interval at
                           0.1 ms instead of 5: a thread that waits for the GIL the predicting
                           thread holds (CUPTI's, calling back into Python) waits that much less
  mlms layers+cupti nogc   the hardware level with Python's garbage collector paused for the
                           block (the layers' records make objects it would scan)
  mlms cupti kernels       CuptiCollector recording kernels, copies and sets, no API calls
  mlms layers+cupti runtime  the hardware level recording the runtime's API calls, not the
                           driver's
  mlms layers+cupti shared buffer  the hardware level with one CUPTI activity buffer for the
                           process rather than one per thread
  mlms layers+cupti 8MiB   the hardware level with 8 MiB activity buffers rather than 64: a
                           buffer over glibc's 32 MiB mmap ceiling is mapped afresh each time,
                           its pages first written inside launches (page faults); one under
                           it may be reused from the heap, its pages written before
  torch.profiler cuda      ProfilerActivity.CUDA
  torch.profiler cpu+cuda  both activities

Prints each configuration's p50, its slowdown over plain (the median over rounds of its block's
p50 over plain's block's in the same round: ``round_ratios``) and what it added per layer call;
and, to say where a slowdown comes from, the host's time to issue one forward (the first
layer's start to the last one's end, where layers are collected) and the GPU's busy time and
kernels per predict (kernels, copies and sets, where CUPTI collects them), each
configuration's launch on a GPU (the host's part of a predict: until the forward returned),
plain's device work alone (its launches queued behind a spinning kernel), with the API
records a predict, how often CUPTI called back into Python during a block, the page faults a
predict took on the predicting thread (minor faults: memory first written), and in how many
rounds its launch took longer than plain's device work alone (host-bound). A forward that takes
the host longer than the GPU is busy leaves the GPU waiting: the collectors' host cost then
shows in the p50; while the GPU is the longer one it hides.

    .venv/bin/python benchmarks/layer_capture_overhead.py [--model resnet50] [--device cpu]
        [--batch-sizes 1] [--rounds 6 | --rounds 36,12] [--block 20] [--threads N]
        [--only LABEL,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.errors import Unavailable
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.predictors.torch_layer_costs import LayerCosts
from mlms.predictors.torch_layer_hooks import HookedLayers
from mlms.store.factory import default_store

Contexts = Callable[[Any], list[AbstractContextManager[Any]]]
GPU_KINDS = ("kernel", "memcpy", "memset")


def configurations(device: str) -> dict[str, Contexts]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    def layers(predictor: Any) -> AbstractContextManager[Any]:
        hooked = HookedLayers(torch, predictor.module, LayerCosts(torch, predictor.module))
        return contextlib.contextmanager(hooked.capture)()

    configs: dict[str, Contexts] = {
        "plain": lambda p: [],
        "mlms layers": lambda p: [layers(p)],
        "torch.profiler cpu": lambda p: [
            profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        ],
    }
    if device.startswith("cuda"):
        from mlms.tracer.cupti import API_KINDS, BUFFER_BYTES, CuptiCollector
        from mlms.tracer.levels import TraceLevel

        class CountingCollector(CuptiCollector):
            """Counts CUPTI's calls back into Python (a buffer asked for or handed back: each
            takes the GIL on CUPTI's thread) while the block runs, its own sync and flush
            aside."""

            def __enter__(self) -> Any:
                self.callbacks, self._counting = 0, False
                capture = super().__enter__()
                self._counting = True
                return capture

            def __exit__(self, *exc: object) -> None:
                self._counting = False
                super().__exit__(*exc)

            def _buffer_requested(self) -> tuple[int, int]:
                self.callbacks += self._counting
                return super()._buffer_requested()

            def _buffer_completed(self, activities: Any) -> None:
                self.callbacks += self._counting
                super()._buffer_completed(activities)

        def cupti(
            level: TraceLevel = TraceLevel.HARDWARE,
            api: tuple[str, ...] = API_KINDS,
            per_thread_buffers: bool = True,
            buffer_bytes: int = BUFFER_BYTES,
        ) -> AbstractContextManager[Any]:
            return CountingCollector(
                level,
                sync=torch.cuda.synchronize,
                api=api,
                per_thread_buffers=per_thread_buffers,
                buffer_bytes=buffer_bytes,
            )

        calls_only = TraceLevel.SYSTEM_LIBRARY
        configs |= {
            "mlms cupti": lambda p: [cupti()],
            "mlms cupti api": lambda p: [cupti(calls_only)],
            "mlms layers+cupti": lambda p: [layers(p), cupti()],
            "mlms layers+cupti api": lambda p: [layers(p), cupti(calls_only)],
            "mlms layers+cupti 0.1ms": lambda p: [switch_interval(1e-4), layers(p), cupti()],
            "mlms layers+cupti nogc": lambda p: [collector_paused(), layers(p), cupti()],
            "mlms cupti kernels": lambda p: [cupti(api=())],
            "mlms layers+cupti runtime": lambda p: [layers(p), cupti(api=("RUNTIME",))],
            "mlms layers+cupti shared buffer": lambda p: [
                layers(p),
                cupti(per_thread_buffers=False),
            ],
            "mlms layers+cupti 8MiB": lambda p: [layers(p), cupti(buffer_bytes=8 << 20)],
            "torch.profiler cuda": lambda p: [profile(activities=[ProfilerActivity.CUDA])],
            "torch.profiler cpu+cuda": lambda p: [
                profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            ],
        }
    return configs


@contextlib.contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """The interpreter's thread switch interval at ``seconds`` while the block runs: how long
    a thread that wants the GIL waits for a busy one to let it go."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs, as it was after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def measure(
    model: str,
    device: str,
    batch_size: int,
    rounds: int,
    block: int,
    threads: int | None = None,
    only: set[str] | None = None,
) -> dict[str, dict[str, float]]:
    """p50 ms, slowdown over plain, microseconds added per layer call, the host's forward and
    the GPU's busy time per configuration (``only``: those labels and plain)."""
    manifest = get_model(model)
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    spec = manifest.inputs[0]
    batch = np.random.default_rng(0).standard_normal((batch_size, *spec.shape)).astype(spec.dtype)
    configs = {
        label: contexts
        for label, contexts in configurations(device).items()
        if only is None or label in only or label == "plain"
    }
    blocks: dict[str, dict[int, list[float]]] = defaultdict(dict)  # label -> round -> ms
    forward_ms: dict[str, list[float]] = defaultdict(list)
    launch_ms: dict[str, dict[int, list[float]]] = defaultdict(dict)  # label -> round -> ms
    faults: dict[str, list[float]] = defaultdict(list)
    gpu: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    calls = 0
    unavailable: dict[str, str] = {}
    options = PredictorOptions(device=device, intra_op_threads=threads)
    with predictor_class("torch")(manifest, asset.path, options) as p:
        for _ in range(3):
            p.predict(batch)
        labels = list(configs)
        for round_ in range(rounds):
            turn = labels[round_ % len(labels) :] + labels[: round_ % len(labels)]
            for label in turn:
                if label in unavailable:
                    continue
                contexts = configs[label](p)
                try:
                    with ExitStack() as stack:
                        entered = [stack.enter_context(c) for c in contexts]
                        p.launches.clear()
                        before = minor_faults()
                        blocks[label][round_] = predict_times(p, batch, block)
                        faults[label].append((minor_faults() - before) / block)
                        launch_ms[label][round_] = [ns / 1e6 for ns in p.launches]
                except Unavailable as exc:  # e.g. CUPTI taken by another profiler
                    unavailable[label] = str(exc)
                    continue
                for context in contexts:
                    if hasattr(context, "callbacks"):
                        gpu[label]["cupti_callbacks"].append(context.callbacks)
                for capture in entered:  # a LayerCapture, a CuptiCapture or a profiler
                    if isinstance(getattr(capture, "records", None), list):
                        for key, value in gpu_times(capture, block).items():
                            gpu[label][key].append(value)
                    elif isinstance(getattr(capture, "events", None), list) and capture.events:
                        calls = len(capture.events) // block
                        forward_ms[label] += forward_spans(capture.events, calls)
        # The device's work of a plain predict with the host out of the way (its launches queued
        # behind a spinning kernel): what a launch past it leaves the device waiting for.
        plain_launches = [int(ms * 1e6) for ms in pooled(launch_ms["plain"])]
        alone = p.device_times(batch, 5, max(plain_launches)) if plain_launches else []
    base = statistics.median(pooled(blocks["plain"]))
    device_ms = _median([ns / 1e6 for ns in alone])
    rows = {}
    for label, timed in blocks.items():
        p50 = statistics.median(pooled(timed))
        ratios = round_ratios(timed, blocks["plain"])
        rows[label] = {
            "p50_ms": p50,
            "slowdown": statistics.median(ratios),
            "slowdown_pooled": p50 / base,
            "round_ratios": ratios,
            "us_per_layer_call": (p50 - base) * 1e3 / calls if calls else float("nan"),
            "samples": sum(map(len, timed.values())),
            "forward_host_ms": _median(forward_ms[label]),
            "launch_ms": _median(pooled(launch_ms[label])),
            "host_bound_rounds": host_bound_rounds(launch_ms[label], device_ms),
            "faults_per_predict": _median(faults[label]),
            **{key: _median(gpu[label][key]) for key in GPU_TIMES},
        }
    rows["plain"]["layer_calls"] = calls
    rows["plain"]["device_alone_ms"] = device_ms
    return rows | {label: {"unavailable": why} for label, why in unavailable.items()}


def minor_faults() -> int:
    """The calling thread's minor page faults so far (memory first written, or mapped anew)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def pooled(timed: dict[int, list[float]]) -> list[float]:
    """Every predict's milliseconds of every round."""
    return [ms for times in timed.values() for ms in times]


def round_ratios(timed: dict[int, list[float]], plain: dict[int, list[float]]) -> list[float]:
    """Per round, a configuration's block p50 over plain's in the same round. A slow stretch of
    the host (seen on the H200s at batch 1: the p50 up 20-65 % for 20-40 s) that spans a round
    slows both blocks alike and cancels here, where a p50 over all rounds would take it in for
    whichever configurations it happened to fall on; the slowdown is these ratios' median."""
    return [
        statistics.median(times) / statistics.median(plain[round_])
        for round_, times in timed.items()
        if round_ in plain
    ]


def host_bound_rounds(launches: dict[int, list[float]], device_ms: float) -> float:
    """How many rounds' blocks took the host longer to launch a predict (their p50) than the
    device takes to run one: the rounds where the host set the pace, so a collector's host cost
    showed in them whole. Where the two are close (resnet50 at batch 16 on the H200) a slowdown
    follows how many rounds a slow stretch of the host made host-bound, for every collector
    alike. NaN without the device's time (on the CPU, or no launches timed)."""
    if device_ms != device_ms or not launches:
        return float("nan")
    return float(sum(statistics.median(ms) > device_ms for ms in launches.values() if ms))


def forward_spans(events: list[Any], calls: int) -> list[float]:
    """Milliseconds from each predict's first layer start to its last layer end (the events
    come in execution order, ``calls`` per predict)."""
    return [
        (max(e.end_ns for e in chunk) - chunk[0].start_ns) / 1e6
        for chunk in (events[i : i + calls] for i in range(0, len(events), calls))
    ]


def gpu_times(capture: Any, block: int) -> dict[str, float]:
    """Per predict of a CuptiCapture's ``block``: the GPU's busy time, its activities' time
    added up and its kernels' (ms on the host's clock), how many kernels and API records of
    the runtime and the driver; with the host nanoseconds one CUPTI tick lasted. CUPTI's
    ticks are not always nanoseconds: a profiler that registered its own timestamp source
    (torch.profiler's, a CPU cycle counter) leaves it to the next session, so durations go
    through the capture's clock map."""
    records, tick = capture.records, capture.clock.slope
    return {
        "gpu_busy_ms": gpu_busy(records) * tick / block,
        "gpu_summed_ms": gpu_summed(records) * tick / block,
        "kernel_ms": gpu_summed(records, ("kernel",)) * tick / block,
        "kernels_per_predict": sum(r["kind"] == "kernel" for r in records) / block,
        "runtime_per_predict": sum(r["kind"] == "runtime" for r in records) / block,
        "driver_per_predict": sum(r["kind"] == "driver" for r in records) / block,
        "cupti_tick_ns": tick,
    }


GPU_TIMES = (
    "gpu_busy_ms", "gpu_summed_ms", "kernel_ms", "kernels_per_predict", "runtime_per_predict",
    "driver_per_predict", "cupti_tick_ns", "cupti_callbacks",
)  # fmt: skip


def gpu_busy(records: list[dict[str, Any]]) -> float:
    """Millions of CUPTI ticks in which the GPU ran at least one of the kernels, copies and
    sets among ``records``: intervals that overlap (a kernel launched with programmatic
    dependent launch starts before the one it follows ends) count once."""
    busy, reach = 0, 0
    for start, end in sorted((r["start"], r["end"]) for r in records if r["kind"] in GPU_KINDS):
        busy += max(0, end - max(start, reach))
        reach = max(reach, end)
    return busy / 1e6


def gpu_summed(records: list[dict[str, Any]], kinds: tuple[str, ...] = GPU_KINDS) -> float:
    """Millions of CUPTI ticks of the activities of ``kinds`` added up, overlaps counted
    twice: above ``gpu_busy`` by as much as they overlap."""
    return sum(r["end"] - r["start"] for r in records if r["kind"] in kinds) / 1e6


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def predict_times(predictor: Any, batch: np.ndarray, iterations: int) -> list[float]:
    """Milliseconds of each of ``iterations`` predicts, timed on the host."""
    times = []
    for _ in range(iterations):
        began = time.perf_counter_ns()
        predictor.predict(batch)
        times.append((time.perf_counter_ns() - began) / 1e6)
    return times


def table(rows: dict[str, dict[str, float]]) -> Iterator[str]:
    yield (
        f"  {'configuration':24} {'p50 ms':>9} {'slowdown':>9} {'pooled':>7} {'us/layer call':>14}"
        f" {'host fwd ms':>12} {'launch ms':>10} {'gpu busy ms':>12} {'kernel ms':>10}"
        f" {'kernels':>8} {'runtime':>8} {'driver':>8} {'callbacks':>9} {'faults':>7}"
        f" {'host-bound':>10}"
    )
    for label, row in rows.items():
        if "unavailable" in row:
            yield f"  {label:24} unavailable: {row['unavailable']}"
            continue
        extra = row["us_per_layer_call"] if label != "plain" else 0.0
        yield (
            f"  {label:24} {row['p50_ms']:9.3f} {row['slowdown']:9.3f}"
            f" {row['slowdown_pooled']:7.3f} {extra:14.2f}"
            f" {_cell(row['forward_host_ms'])} {_cell(row['launch_ms'], 10)}"
            f" {_cell(row['gpu_busy_ms'])}"
            f" {_cell(row['kernel_ms'], 10)}"
            f" {_cell(row['kernels_per_predict'], 8, 1)} {_cell(row['runtime_per_predict'], 8, 1)}"
            f" {_cell(row['driver_per_predict'], 8, 1)} {_cell(row['cupti_callbacks'], 9, 1)}"
            f" {_cell(row['faults_per_predict'], 7, 1)}"
            f" {_cell(row['host_bound_rounds'], 10, 0)}"
        )


def _cell(value: float, width: int = 12, digits: int = 3) -> str:
    return f"{'-':>{width}}" if value != value else f"{value:{width}.{digits}f}"


def rounds_per_batch(text: str, batch_sizes: list[int]) -> list[int]:
    """``--rounds``: one positive number for every batch size, or one per batch size."""
    parts = text.split(",")
    rounds = [int(p) for p in parts if p.strip().isdigit() and int(p) > 0]
    if len(rounds) != len(parts) or len(rounds) not in (1, len(batch_sizes)):
        sizes = ",".join(map(str, batch_sizes))
        raise ValueError(
            f"--rounds {text!r}: expected a positive number, or one per batch size ({sizes})"
        )
    return rounds * len(batch_sizes) if len(rounds) == 1 else rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument(
        "--rounds",
        default="6",
        help="rounds per configuration: one number, or one per batch size (1 is the noisiest: "
        "its blocks are shortest)",
    )
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument(
        "--threads", type=int, help="intra-op threads (default: torch's); 1 steadies a CPU run"
    )
    parser.add_argument(
        "--only", help="comma-separated configurations to measure beside plain (default: all)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(configurations(args.device)):
        unknown = ", ".join(sorted(only - set(configurations(args.device))))
        parser.error(f"--only {unknown!r}: expected among {', '.join(configurations(args.device))}")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    try:
        per_batch = rounds_per_batch(args.rounds, batch_sizes)
    except ValueError as error:
        parser.error(str(error))
    out = {}
    for batch_size, count in zip(batch_sizes, per_batch, strict=True):
        rows = measure(args.model, args.device, batch_size, count, args.block, args.threads, only)
        calls = rows["plain"]["layer_calls"]
        print(
            f"{args.model} on {args.device}, batch {batch_size}: {calls} layer calls a predict, "
            f"{count} rounds of {args.block} predicts per configuration"
        )
        print("\n".join(table(rows)))
        alone = rows["plain"]["device_alone_ms"]
        if alone == alone:
            print(
                f"  plain's device work alone: {alone:.3f} ms a predict; a launch longer than "
                "that leaves the device waiting, and a collector's host cost then shows"
            )
        out[str(batch_size)] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
