"""Do Kineto and mlms's CUPTI collector give the same kernel durations? A probe on the GPU.

The lower bounds time layers through torch.profiler (Kineto) and the evaluations they are set
against through mlms's own CUPTI collector; a bias between the two tools would move every
layer's bound against its measurement. Here the same network runs the same predicts under each
tool in turn (rounds alternate the order); kernels are matched by their place in the launch
order of each predict, and each position's median duration under Kineto is set against its
median under ours.

    python3 benchmarks/collector_probe.py [--model resnet50] [--batch-sizes 1,64]
        [--predicts 20] [--rounds 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def kineto_kernels(torch: Any, net: Any, x: Any, predicts: int) -> list[list[tuple[str, float]]]:
    """(name, microseconds) of each predict's kernels in start order, through torch.profiler
    with CPU and CUDA activities (what ``mlms.bounds.timing`` uses)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for index in range(predicts):
            with record_function(f"predict#{index}"):
                net(x)
                torch.cuda.synchronize()
    ranges = sorted(
        (
            e
            for e in prof.events()
            if e.name.startswith("predict#") and e.device_type != DeviceType.CUDA
        ),
        key=lambda e: e.time_range.start,
    )
    kernels = sorted(
        (
            e
            for e in prof.events()
            if e.device_type == DeviceType.CUDA
            and not e.name.startswith(("predict#", "Memcpy", "Memset"))
        ),
        key=lambda e: e.time_range.start,
    )
    return _split(
        [(k.name, k.time_range.start, k.time_range.end - k.time_range.start) for k in kernels],
        [(r.time_range.start, r.time_range.end) for r in ranges],
    )


def cupti_kernels(torch: Any, net: Any, x: Any, predicts: int) -> list[list[tuple[str, float]]]:
    """The same through mlms's collector (what a hardware-level evaluation uses), on the host
    clock as evaluations see it."""
    import time

    from mlms.tracer.cupti import CuptiCollector
    from mlms.tracer.levels import TraceLevel

    windows = []
    with CuptiCollector(TraceLevel.HARDWARE, sync=torch.cuda.synchronize) as capture:
        for _ in range(predicts):
            start = time.time_ns()
            net(x)
            torch.cuda.synchronize()
            windows.append((start / 1e3, time.time_ns() / 1e3))
    kernels = sorted((e for e in capture.events() if e.kind == "kernel"), key=lambda e: e.start_ns)
    return _split(
        [(k.name, k.start_ns / 1e3, (k.end_ns - k.start_ns) / 1e3) for k in kernels], windows
    )


def _split(
    kernels: list[tuple[str, float, float]], windows: list[tuple[float, float]]
) -> list[list[tuple[str, float]]]:
    """Kernels (name, start us, duration us) grouped by the predict window they started in."""
    per_predict: list[list[tuple[str, float]]] = [[] for _ in windows]
    for name, start, duration in kernels:
        for index, (begin, end) in enumerate(windows):
            if begin <= start <= end:
                per_predict[index].append((name, duration))
                break
    return per_predict


def compare(
    kineto: list[list[tuple[str, float]]], cupti: list[list[tuple[str, float]]]
) -> dict[str, Any]:
    counts = {len(p) for p in kineto + cupti}
    if len(counts) != 1:
        return {"error": f"kernels per predict differ: {sorted(counts)}"}
    positions = counts.pop()
    names_k = [name for name, _ in kineto[0]]
    names_c = [name for name, _ in cupti[0]]
    same_names = sum(a == b for a, b in zip(names_k, names_c, strict=True))
    k = np.median(np.array([[d for _, d in p] for p in kineto]), axis=0)
    c = np.median(np.array([[d for _, d in p] for p in cupti]), axis=0)
    diff = k - c
    ratio = k / np.maximum(c, 1e-9)
    return {
        "kernels_per_predict": positions,
        "same_names": same_names,
        "kineto_sum_us": float(k.sum()),
        "cupti_sum_us": float(c.sum()),
        "diff_us_median": float(np.median(diff)),
        "diff_us_p10_p90": [float(np.percentile(diff, 10)), float(np.percentile(diff, 90))],
        "ratio_median": float(np.median(ratio)),
        "ratio_p10_p90": [float(np.percentile(ratio, 10)), float(np.percentile(ratio, 90))],
        "kineto_longer": int((diff > 0).sum()),
        "cupti_longer": int((diff < 0).sum()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument("--predicts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch
    import torchvision

    if not torch.cuda.is_available():
        print("collector_probe: no CUDA device here; it compares two GPU profilers")
        return 2
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    net = getattr(torchvision.models, args.model)().cuda().eval()
    out = {}
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        x = torch.rand(batch, 3, 224, 224, device="cuda")
        samples: dict[str, list[list[tuple[str, float]]]] = defaultdict(list)
        with torch.inference_mode():
            for _ in range(5):
                net(x)
            torch.cuda.synchronize()
            for round_ in range(args.rounds):
                order = ("kineto", "cupti") if round_ % 2 == 0 else ("cupti", "kineto")
                for tool in order:
                    collect = kineto_kernels if tool == "kineto" else cupti_kernels
                    samples[tool] += collect(torch, net, x, args.predicts)
        row = compare(samples["kineto"], samples["cupti"])
        out[str(batch)] = row
        print(f"{args.model} batch {batch}: " + json.dumps(row))
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
