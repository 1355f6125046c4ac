"""The CUDA path's layer capture now against the one it replaced (module hooks recording shapes
on the measured path, at commit 8f5840c), side by side in one run, on the CPU with one thread.

A small input keeps the kernels short, so the host-side cost of the capture shows as it does on
a GPU at batch size 1. Rounds rotate the order of: no capture, the old capture, the new one.

    .venv/bin/python benchmarks/layer_capture_history.py [--model resnet50] [--size 64]
        [--rounds 12] [--commit 8f5840c]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch
import torchvision

from mlms.predictors.torch_layer_costs import LayerCosts
from mlms.predictors.torch_layer_hooks import HookedLayers


def module_at(commit: str, path: str, folder: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    file = folder / "old_layer_hooks.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location("old_layer_hooks", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--commit", default="8f5840c")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        old = module_at(args.commit, "mlms/predictors/torch_layer_hooks.py", Path(folder))
    model = getattr(torchvision.models, args.model)().eval()
    x = torch.randn(1, 3, args.size, args.size)
    costs = LayerCosts(torch, model)
    hooked = HookedLayers(torch, model, costs)
    configs = {
        "none": contextlib.nullcontext,
        f"hooks ({args.commit})": lambda: contextlib.contextmanager(old.hook_layer_events)(
            torch, model, costs
        ),
        "now": lambda: contextlib.contextmanager(hooked.capture)(),
    }
    labels = list(configs)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    calls = 0
    with torch.inference_mode():
        for _ in range(5):
            model(x)
        for round_ in range(args.rounds):
            for label in labels[round_ % 3 :] + labels[: round_ % 3]:
                with configs[label]() as capture:
                    for _ in range(10):
                        start = time.perf_counter_ns()
                        model(x)
                        samples[label].append((time.perf_counter_ns() - start) / 1e6)
                if label == "now":
                    calls = len(capture.events) // 10
    base = statistics.median(samples["none"])
    print(f"{args.model} 1x3x{args.size}x{args.size}, CPU, 1 thread: {calls} layer calls a predict")
    for label, values in samples.items():
        p50 = statistics.median(values)
        extra = (p50 - base) * 1e3 / calls
        print(f"  {label:18} p50 {p50:8.3f} ms  x{p50 / base:6.3f}  +{extra:6.2f} us a call")


if __name__ == "__main__":
    sys.exit(main())
