"""Validate the GPU levels on a real GPU: CUPTI vs ncu, leveled runs, layer joins.

Parts, each printed as a table and written to ``--out``/gpu_validation.json:
  env        versions, GPU, ncu, and this GPU's measured peaks (cached under MLMS_HOME)
  fixture    resnet18 bs 4: CUPTI records, layer events, model spans and the ncu counter rows
             of the same batch -> ``--out``/cupti_resnet18_bs4.json.gz (the CPU tests' fixture)
  leveled    resnet50 fp32 bs 1 and 64 at --trace-level full, and a model-level-only evaluation:
             each run's p50 and slowdown; full's model latency vs the model-only evaluation
  ncu        kernel durations from our CUPTI spans vs ncu's gpu__time_duration of the same
             launch (the full run's counter join): median relative difference
  offset     elementwise kernels of four sizes, timed by our CUPTI records and by ncu's
             gpu__time_duration: the two tools' fixed difference per kernel (run before leveled,
             whose ncu check then also reports the difference with that offset removed)
  layers     every layer: its kernels' total <= its latency; five layers with most non-GPU time
  profiler   slowdown of our CUPTI run vs torch.profiler (CUDA activities), same predictor
  conflict   our collector started inside torch.profiler(CUDA): detected and reported
  mllib      ML_LIBRARY in-process: cuDNN's API log through cudnnSetCallback

    python benchmarks/gpu_validation.py --out benchmarks/results [--parts env,fixture,...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.store.factory import default_store
from mlms.tracer.archive import read_spans, records_of
from mlms.tracer.cupti import CuptiCollector
from mlms.tracer.join import layer_gpu
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

PARTS = ("env", "offset", "leveled", "fixture", "mllib", "profiler", "conflict")
RESULTS: dict[str, Any] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument(
        "--full-runs",
        type=int,
        default=1,
        help="full evaluations in leveled, each followed by "
        "a model-only one (more runs: a better estimate of the run-to-run spread)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for part in args.parts.split(","):
        began = time.perf_counter()
        print(f"\n=== {part} ===", flush=True)
        try:
            globals()[f"part_{part}"](args)
        except Exception as exc:
            RESULTS[f"{part}_error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        print(f"[{part}: {time.perf_counter() - began:.1f} s]", flush=True)
        (args.out / "gpu_validation.json").write_text(json.dumps(RESULTS, indent=2, default=str))


def _predictor(model: str, device: str = "cuda:0"):
    manifest = get_model(model)
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    return predictor_class("torch")(manifest, asset.path, PredictorOptions(device=device))


def _batch(model: str, batch_size: int) -> np.ndarray:
    spec = get_model(model).inputs[0]
    rng = np.random.default_rng(0)
    return rng.standard_normal((batch_size, *spec.shape)).astype(spec.dtype)


def part_env(args) -> None:
    import torch

    from mlms.tracer import ncu, peaks

    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0),
        "python": sys.version.split()[0],
    }
    try:
        from importlib.metadata import version

        env["cupti-python"] = version("cupti-python")
        env["nvidia-cuda-cupti"] = version("nvidia-cuda-cupti")
    except Exception as exc:
        env["cupti-python"] = f"missing: {exc}"
    path = ncu.ncu_executable()
    env["ncu"] = subprocess.run([path, "--version"], capture_output=True, text=True).stdout[-60:]
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu",
         "--format=csv,noheader"],
        capture_output=True, text=True,
    )  # fmt: skip
    env["clocks"] = smi.stdout.strip()
    began = time.perf_counter()
    measured = peaks.peaks("cuda:0")
    env["peaks"] = measured.to_dict()
    env["peaks_seconds"] = round(time.perf_counter() - began, 1)
    maps = Path("/proc/self/maps").read_text().splitlines()
    env["libcupti"] = sorted({line.split()[-1] for line in maps if "libcupti" in line})
    RESULTS["env"] = env
    for key, value in env.items():
        print(f"{key:18} {value}")


def part_fixture(args) -> None:
    """resnet18 bs 4: three traced predicts (framework + CUPTI) and the ncu rows of the batch."""
    import torch

    from mlms.tracer import ncu, peaks

    model, batch_size = "resnet18", 4
    predictor = _predictor(model)
    batch = _batch(model, batch_size)
    for _ in range(3):
        predictor.predict(batch)
    tracer = Tracer(TraceLevel.FULL)
    with tracer.run(1, TraceLevel.HARDWARE):
        sync = torch.cuda.synchronize
        with predictor.profile_layers() as layers, CuptiCollector(sync=sync) as capture:
            for _ in range(3):
                with tracer.span("model", TraceLevel.MODEL, kind="model"):
                    predictor.predict(batch)
    models = [r for r in tracer.records() if r.level == TraceLevel.MODEL]
    counters = ncu.collect(
        model=model,
        framework="torch",
        asset_path=predictor.asset_path,
        device="cuda:0",
        batch=batch,
        warmup=3,
        workdir=Path("/tmp/ncu_fixture"),
    )
    csv_text = Path("/tmp/ncu_fixture/ncu.csv").read_text()
    from mlms.tracer.ml_library import WORK_CALLS, collect_cudnn

    with predictor.profile_layers() as cudnn_layers, collect_cudnn() as cudnn:
        predictor.predict(batch)
    calls = [m for m in cudnn.messages if m.function in WORK_CALLS]
    fixture = {
        "meta": {
            "model": model,
            "batch_size": batch_size,
            "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "predict_thread": threading.get_ident(),
            "ncu_metrics": counters.metrics,
        },
        "models": [
            {"start_ns": m.start_ns, "end_ns": m.end_ns, "thread": m.thread} for m in models
        ],
        "layers": [_event_dict(e) for e in layers.events],
        "cupti": {
            "clock": capture.clock.to_dict(),
            "dropped": capture.dropped,
            "records": capture.records,
        },
        "ncu_csv": "\n".join(line for line in csv_text.splitlines() if line.startswith('"')),
        "peaks": peaks.peaks("cuda:0").to_dict(),
        "ml_library": {
            "layers": [_event_dict(e) for e in cudnn_layers.events],
            "threads": {str(k): v for k, v in cudnn.threads.items()},
            "messages": [
                {"function": m.function, "time_ns": m.time_ns, "thread": m.thread, "text": m.text}
                for m in calls
            ],
        },
    }
    path = args.out / "cupti_resnet18_bs4.json.gz"
    path.write_bytes(gzip.compress(json.dumps(fixture).encode(), 9))
    kinds = defaultdict(int)
    for record in capture.records:
        kinds[record["kind"]] += 1
    api_threads = {r["thread"] for r in capture.records if r["kind"] in ("runtime", "driver")}
    summary = {
        "records": dict(kinds),
        "dropped": capture.dropped,
        "layers": len(layers.events),
        "ncu_rows": len(counters.rows),
        "ncu_seconds": round(counters.wall_seconds, 1),
        "api_threads": sorted(api_threads),
        "predict_thread": threading.get_ident(),
        "clock_slope": capture.clock.slope,
        "fixture_bytes": path.stat().st_size,
    }
    RESULTS["fixture"] = summary
    for key, value in summary.items():
        print(f"{key:16} {value}")
    predictor.close()


def _event_dict(event) -> dict[str, Any]:
    return {
        "name": event.name,
        "kind": event.kind,
        "level": int(event.level),
        "start_ns": event.start_ns,
        "end_ns": event.end_ns,
        "thread": event.thread,
        "layer_index": event.layer_index,
        "attributes": event.attributes,
    }


#: Elementwise kernels for the offset part: float32 element counts from a single element (pure
#: launch) to 16 Mi (tens of microseconds of DRAM traffic).
OFFSET_SIZES = (1, 1 << 16, 1 << 20, 1 << 24)
OFFSET_LAUNCHES = 40
_OFFSET_CHILD = """
import sys, torch
sizes = [int(n) for n in sys.argv[1].split(",")]
launches = int(sys.argv[2])
pairs = [(torch.rand(n, device="cuda"), torch.empty(n, device="cuda")) for n in sizes]
for a, b in pairs:
    torch.add(a, 1.0, out=b)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for a, b in pairs:
    for _ in range(launches):
        torch.add(a, 1.0, out=b)
        torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def part_offset(args) -> None:
    """The same elementwise launches timed by our CUPTI records and by ncu, in two processes.

    ncu's gpu__time_duration starts and ends with commands the front end runs around the grid;
    CUPTI's kernel record spans the grid's execution. NVIDIA documents a 0.5-2 us difference
    between the two (forums.developer.nvidia.com/t/360150). A difference that does not grow
    with the kernel's size is that definition, not a timing error of either tool.
    """
    import torch

    from mlms.tracer import ncu
    from mlms.tracer.counters import parse_ncu_csv

    sizes = ",".join(map(str, OFFSET_SIZES))
    log = Path("/tmp/ncu_offset.csv")
    subprocess.run(
        [ncu.ncu_executable(), "--profile-from-start", "off", "--cache-control", "none",
         "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
         "--page", "raw", "--print-units", "base", "--log-file", str(log),
         sys.executable, "-c", _OFFSET_CHILD, sizes, str(OFFSET_LAUNCHES)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    rows = parse_ncu_csv(log.read_text())
    pairs = [(torch.rand(n, device="cuda"), torch.empty(n, device="cuda")) for n in OFFSET_SIZES]
    for a, b in pairs:
        torch.add(a, 1.0, out=b)
    torch.cuda.synchronize()
    with CuptiCollector(sync=torch.cuda.synchronize) as capture:
        for a, b in pairs:
            for _ in range(OFFSET_LAUNCHES):
                torch.add(a, 1.0, out=b)
                torch.cuda.synchronize()
    kernels = sorted(
        (r for r in capture.records if r["kind"] == "kernel"), key=lambda r: r["start"]
    )
    expected = len(OFFSET_SIZES) * OFFSET_LAUNCHES
    if len(kernels) != expected or len(rows) != expected:
        raise RuntimeError(f"expected {expected} launches; CUPTI {len(kernels)}, ncu {len(rows)}")
    print(f"{'elements':>10} {'CUPTI us':>9} {'ncu us':>9} {'ncu - CUPTI us':>15}")
    table, differences = [], []
    for index, size in enumerate(OFFSET_SIZES):
        block = slice(index * OFFSET_LAUNCHES, (index + 1) * OFFSET_LAUNCHES)
        ours = statistics.median(r["end"] - r["start"] for r in kernels[block])
        theirs = statistics.median(r.values["gpu__time_duration.sum"] for r in rows[block])
        differences.append(theirs - ours)
        table.append({"elements": size, "cupti_ns": ours, "ncu_ns": theirs})
        print(f"{size:>10} {ours / 1e3:9.2f} {theirs / 1e3:9.2f} {(theirs - ours) / 1e3:15.2f}")
    offset = statistics.median(differences)
    print(f"offset (median over sizes): {offset / 1e3:.2f} us")
    RESULTS["offset"] = {"sizes": table, "offset_ns": offset}


def part_leveled(args) -> None:
    """resnet50 at full and at model level; the ncu comparison and the layer checks."""
    store = default_store()
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    common = {
        "model": "resnet50",
        "framework": "torch",
        "hw": "h100",
        "batch_sizes": sizes,
        "iterations": args.iterations,
        "min_seconds": args.min_seconds,
        "warmup": 50,
    }
    # Model-only evaluations before and after each full one: their spread is the run-to-run
    # noise that the full one's model latency is judged against.
    model_only = [evaluate(EvaluationRequest(**common, trace_level="model"), store=store)]
    fulls = []
    for _ in range(args.full_runs):
        fulls.append(evaluate(EvaluationRequest(**common, trace_level="full"), store=store))
        model_only.append(evaluate(EvaluationRequest(**common, trace_level="model"), store=store))
    full = fulls[0]
    spans = records_of(read_spans(store, full.trace_id))
    out: dict[str, Any] = {
        "model_only_ids": [r.id for r in model_only],
        "full_ids": [r.id for r in fulls],
    }
    print(f"{'bs':>3} {'run':16} {'p50 ms':>9} {'slowdown':>9} {'spans':>8} {'dropped':>8}")
    for index, result in enumerate(full.results):
        bs = result.batch_size
        rows = {}
        for label, level in result.levels.items():
            rows[label] = level.model_dump()
            print(
                f"{bs:>3} {label:16} {level.latency_ms['p50']:9.3f} {level.overhead:9.3f} "
                f"{level.spans:8d} {level.dropped:8d}"
            )
        only = [r.results[index].latency_ms.p50 for r in model_only]
        under_full = [r.results[index].latency_ms.p50 for r in fulls]
        reference = statistics.median(only)
        diff = statistics.median(under_full) / reference - 1
        spread = (max(only) - min(only)) / reference
        print(
            f"{bs:>3} model p50 under full {_ms(under_full)} ms vs model-only {_ms(only)} ms "
            f"(in run order): medians differ by {diff:+.2%}; model-only range {spread:.2%} "
            "of its median"
        )
        full_run = result.levels["full"].run
        batch_spans = _spans_of_batch(spans, bs)
        single = _duration_only_rows(bs)
        out[str(bs)] = {
            "levels": rows,
            "model_p50_full_ms": under_full,
            "model_p50_model_only_ms": only,
            "model_p50_diff": diff,
            "model_only_range": spread,
            "ml_library": _mllib_check(batch_spans, result.levels["ml_library"].run),
            "ncu": _ncu_check(batch_spans, full_run, single),
            "layers": _layer_check(batch_spans, full_run),
        }
    RESULTS["leveled"] = out


def _ms(values: list[float]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


def _spans_of_batch(spans, batch_size):
    """The spans under the batch_size=N span (its subtree, by parent links)."""
    root = next(s for s in spans if s.name == f"batch_size={batch_size}")
    children = defaultdict(list)
    for span in spans:
        children[span.parent_id].append(span)
    result, stack = [], [root.span_id]
    while stack:
        for child in children.get(stack.pop(), []):
            result.append(child)
            stack.append(child.span_id)
    return result


def _mllib_check(spans, run: int) -> dict[str, Any]:
    by_id = {s.span_id: s for s in spans}
    calls = [s for s in spans if s.run == run and s.level == TraceLevel.ML_LIBRARY]
    under_layer = [
        c
        for c in calls
        if c.parent_id in by_id and by_id[c.parent_id].level == TraceLevel.FRAMEWORK
    ]
    engines = defaultdict(int)
    for call in calls:
        engines[f"{call.name}:{call.attributes.get('engine_id')}"] += 1
    print(
        f"    ml_library: {len(calls)} cuDNN calls, {len(under_layer)} under a layer; "
        f"engines {dict(engines)}"
    )
    return {"calls": len(calls), "under_layer": len(under_layer), "engines": dict(engines)}


def _duration_only_rows(batch_size: int):
    """ncu on the same predict with gpu__time_duration alone: one pass, no kernel replay."""
    from mlms.evaluation.inputs import open_inputs
    from mlms.tracer import ncu

    manifest = get_model("resnet50")
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    batch = open_inputs(manifest, ["synthetic"], seed=0).take(0, batch_size).tensor
    run = ncu.collect(
        model="resnet50",
        framework="torch",
        asset_path=asset.path,
        device="cuda:0",
        batch=batch,
        warmup=10,
        workdir=Path(f"/tmp/ncu_duration_{batch_size}"),
        metrics=["gpu__time_duration.sum"],
    )
    return run.rows


def _rel(ours: int, reference: float) -> float:
    return abs(ours - reference) / reference


def _ncu_check(spans, run: int, single) -> dict[str, Any]:
    from mlms.tracer.counters import match_rows

    kernels = [s for s in spans if s.run == run and s.kind == "kernel"]
    matched = [s for s in kernels if "counter.duration_ns" in s.attributes]
    rel = [
        _rel(s.duration_ns, s.attributes["counter.duration_ns"])
        for s in matched
        if s.attributes["counter.duration_ns"] > 0
    ]
    # The duration-only run launches the same sequence: align it to the full run's launches.
    names = {s.attributes["counter.launch"]: s.name for s in matched}
    launches = sorted(names)
    aligned = match_rows([names[i] for i in launches], [r.name for r in single])
    to_single = dict(zip(launches, aligned, strict=True))
    rel_single, rel_single_long = [], []
    for span in matched:
        row = to_single.get(span.attributes["counter.launch"])
        if row is not None and single[row].values.get("gpu__time_duration.sum", 0) > 0:
            reference = single[row].values["gpu__time_duration.sum"]
            rel_single.append(_rel(span.duration_ns, reference))
            if reference >= 10_000:  # kernels of 10 us and more
                rel_single_long.append(_rel(span.duration_ns, reference))
    # The same comparison with the two tools' fixed per-kernel difference (part offset) removed.
    offset = RESULTS.get("offset", {}).get("offset_ns")
    rel_offset = [
        _rel(span.duration_ns + offset, single[row].values["gpu__time_duration.sum"])
        for span in matched
        if offset is not None
        and (row := to_single.get(span.attributes["counter.launch"])) is not None
        and single[row].values.get("gpu__time_duration.sum", 0) > 0
    ]
    signed = [
        s.duration_ns / s.attributes["counter.duration_ns"] - 1
        for s in matched
        if s.attributes["counter.duration_ns"] > 0
    ]
    bounds = defaultdict(int)
    for s in matched:
        bounds[s.attributes.get("counter.bound")] += 1
    check = {
        "kernel_spans": len(kernels),
        "matched": len(matched),
        "median_rel_diff": statistics.median(rel) if rel else None,
        "median_signed_diff": statistics.median(signed) if signed else None,
        "p90_rel_diff": float(np.percentile(rel, 90)) if rel else None,
        "duration_only_matched": len(rel_single),
        "duration_only_median_rel_diff": statistics.median(rel_single) if rel_single else None,
        "duration_only_ge_10us_matched": len(rel_single_long),
        "duration_only_ge_10us_median_rel_diff": (
            statistics.median(rel_single_long) if rel_single_long else None
        ),
        "duration_only_offset_removed_median_rel_diff": (
            statistics.median(rel_offset) if rel_offset else None
        ),
        "bound": dict(bounds),
    }
    print(
        f"    ncu (counter run): {len(matched)}/{len(kernels)} kernel spans matched; median "
        f"|ours-ncu|/ncu {check['median_rel_diff']} (signed {check['median_signed_diff']}); "
        f"p90 {check['p90_rel_diff']}; bound {dict(bounds)}"
    )
    print(
        f"    ncu (gpu__time_duration alone, one pass): {len(rel_single)} matched; median "
        f"|ours-ncu|/ncu {check['duration_only_median_rel_diff']}; kernels >= 10 us: "
        f"{len(rel_single_long)}, median {check['duration_only_ge_10us_median_rel_diff']}; "
        f"all kernels with the offset part's {offset} ns added to ours: median "
        f"{check['duration_only_offset_removed_median_rel_diff']}"
    )
    return check


def _layer_check(spans, run: int) -> dict[str, Any]:
    mine = [s for s in spans if s.run == run]
    layers = sorted((s for s in mine if s.level == TraceLevel.FRAMEWORK), key=lambda s: s.start_ns)
    api = [s for s in mine if s.level == TraceLevel.SYSTEM_LIBRARY]
    gpu = [s for s in mine if s.level == TraceLevel.HARDWARE and s.kind != "counters"]
    joined = layer_gpu(layers, api, gpu)
    violations = [j for j in joined if j.gpu_ns > j.latency_ns]
    attached = sum(len(j.kernels) for j in joined)
    by_name = defaultdict(list)
    for item in joined:
        by_name[item.name].append(item)
    table = sorted(
        (
            (
                name,
                statistics.median(i.latency_ns for i in items) / 1e3,
                statistics.median(i.gpu_ns for i in items) / 1e3,
                statistics.median(i.non_gpu_ns for i in items) / 1e3,
                statistics.median(len(i.kernels) for i in items),
            )
            for name, items in by_name.items()
        ),
        key=lambda row: -row[3],
    )
    print(
        f"    layers: {len(joined)} executions, {attached}/{len(gpu)} GPU activities attached, "
        f"{len(violations)} with kernels > latency"
    )
    print(f"    {'layer':34} {'latency us':>11} {'gpu us':>9} {'non-gpu us':>11} {'kernels':>8}")
    for row in table[:5]:
        print(f"    {row[0][:34]:34} {row[1]:11.1f} {row[2]:9.1f} {row[3]:11.1f} {row[4]:8}")
    return {
        "executions": len(joined),
        "gpu_activities": len(gpu),
        "attached": attached,
        "violations": len(violations),
        "top_non_gpu": [list(row) for row in table[:5]],
    }


def _p50_loop(predictor, batch, iterations: int) -> float:
    from layer_capture_overhead import predict_times

    return statistics.median(predict_times(predictor, batch, iterations))


def part_profiler(args) -> None:
    """Collection costs beside torch.profiler: ``layer_capture_overhead.py`` on cuda:0."""
    from layer_capture_overhead import measure, table

    out = {}
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        rows = measure("resnet50", "cuda:0", bs, rounds=3, block=25)
        print(f"bs {bs}: 3 rotating rounds of 25 predicts per configuration")
        print("\n".join(table(rows)))
        out[str(bs)] = rows
    RESULTS["profiler"] = out


def part_conflict(args) -> None:
    """Our collector inside torch.profiler(CUDA): a clear error; after it ends, ours works."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mlms.errors import Unavailable

    predictor = _predictor("resnet18")
    batch = _batch("resnet18", 1)
    out = {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        predictor.predict(batch)
        try:
            with CuptiCollector(sync=torch.cuda.synchronize) as capture:
                predictor.predict(batch)
            out["inside"] = f"no error; {len(capture.records)} records"
        except Unavailable as exc:
            out["inside"] = f"Unavailable: {exc}"
        predictor.predict(batch)
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    out["torch.profiler kernels"] = len(kernels)
    with CuptiCollector(sync=torch.cuda.synchronize) as capture:
        predictor.predict(batch)
    out["after"] = f"{len(capture.records)} records"
    RESULTS["conflict"] = out
    for key, value in out.items():
        print(f"{key:8} {value}")


def part_mllib(args) -> None:
    """ML_LIBRARY in-process: cuDNN's API log routed through cudnnSetCallback."""
    from mlms.tracer.ml_library import collect_cudnn

    predictor = _predictor("resnet18")
    batch = _batch("resnet18", 2)
    plain = _p50_loop(predictor, batch, 20)
    with collect_cudnn() as capture:
        logged = _p50_loop(predictor, batch, 5)
    events = capture.events()
    engines = defaultdict(int)
    for event in events:
        engines[f"{event.name}:{event.attributes.get('engine_id')}"] += 1
    out = {
        "messages": len(capture.messages),
        "events": len(events),
        "engines": dict(engines),
        "p50_plain_ms": plain,
        "p50_logged_ms": logged,
        "first_event": repr(events[0]) if events else None,
        "threads": sorted({m.thread for m in capture.messages}),
        "sample_message": capture.messages[0].text[:1500] if capture.messages else None,
    }
    RESULTS["mllib"] = out
    for key, value in out.items():
        print(f"{key:14} {value}")


if __name__ == "__main__":
    main()
