"""This GPU's measured ceilings, measured once per machine and cached under MLMS_HOME.

The roofline needs the peaks the card reaches here, not its datasheet: DRAM bandwidth from a
large device-to-device copy (bytes read plus bytes written), FP32 from a large matrix product
with TF32 off, tensor-core FLOP/s from the same product in TF32 (what PyTorch's convolutions use
by default). Each figure is the best of several timed repetitions on random data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mlms.config import mlms_home
from mlms.tracer.counters import Peaks


def peaks(device: str = "cuda:0", *, refresh: bool = False) -> Peaks:
    """The cached peaks of this device's model, measuring them on first use."""
    import torch

    name = torch.cuda.get_device_name(torch.device(device))
    path = cache_path(name)
    if path.exists() and not refresh:
        return Peaks(**json.loads(path.read_text())["peaks"])
    measured = measure(torch, torch.device(device))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": name, "peaks": measured.to_dict()}, indent=2))
    return measured


def cache_path(device_name: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")
    return mlms_home() / "peaks" / f"{slug}.json"


def measure(torch: Any, device: Any) -> Peaks:
    copy_bytes = 1 << 30
    source = torch.rand(copy_bytes // 4, device=device)
    target = torch.empty_like(source)
    bandwidth = 2 * copy_bytes / _best_seconds(torch, lambda: target.copy_(source))
    source = target = None  # free 2 GiB before the matrices
    n = 8192
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    flops = 2 * n**3
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = flops / _best_seconds(torch, lambda: a @ b)
        torch.backends.cuda.matmul.allow_tf32 = True
        tensor = flops / _best_seconds(torch, lambda: a @ b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return Peaks(flops_fp32=fp32, flops_tensor=tensor, dram_bytes_per_s=bandwidth)


def _best_seconds(torch: Any, work: Any, repeats: int = 10) -> float:
    work()  # warm-up: handles, allocator, clocks
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best
