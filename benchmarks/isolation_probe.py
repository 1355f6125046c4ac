"""Why does a memory-bound layer run a few percent slower alone than inside the model? One
torch.profiler session on the GPU reads the kernel time of resnet50's first bottleneck's first
ReLU (batch 64, in place on 64x64x56x56) inside the model, alone (1 and 16 calls back to back)
and right after the convolution and batch norm that produce its input.

    python benchmarks/isolation_probe.py
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function

RELU = ("clamp_min", "relu", "threshold")


def relu_kernels(prof) -> dict[str, list[list[float]]]:
    """Per range name, per range instance: the durations (us) of its ReLU kernels in order."""
    ranges = sorted(
        (e for e in prof.events() if e.name.startswith("probe:") and e.device_type.name == "CPU"),
        key=lambda e: e.time_range.start,
    )
    runs: list[list[float]] = [[] for _ in ranges]
    on_gpu = [e for e in prof.events() if e.device_type.name == "CUDA"]
    kernels = sorted(
        (e for e in on_gpu if not e.name.startswith("probe:")), key=lambda e: e.time_range.start
    )
    for kernel in kernels:
        if not any(word in kernel.name.lower() for word in RELU):
            continue
        for index, r in enumerate(ranges):
            if r.time_range.start <= kernel.time_range.start <= r.time_range.end:
                runs[index].append(kernel.time_range.elapsed_us())
                break
    grouped: dict[str, list[list[float]]] = defaultdict(list)
    for r, found in zip(ranges, runs, strict=True):
        grouped[r.name].append(found)
    return grouped


def main() -> None:
    model = torchvision.models.resnet50().eval().cuda()
    block = model.layer1[0]
    x = torch.rand(64, 3, 224, 224, device="cuda")
    with torch.inference_mode():
        stem = model.maxpool(model.relu(model.bn1(model.conv1(x))))
        alone = block.bn1(block.conv1(stem))
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                with record_function("probe:inside the model"):
                    model(x)
                    torch.cuda.synchronize()
            for calls in (1, 16):
                for _ in range(10):
                    with record_function(f"probe:alone, {calls} back to back"):
                        for _ in range(calls):
                            torch.relu_(alone)
                        torch.cuda.synchronize()
            for _ in range(10):
                with record_function("probe:after its producer"):
                    torch.relu_(block.bn1(block.conv1(stem)))
                    torch.cuda.synchronize()
    print(f"ReLU in place on {tuple(alone.shape)} ({alone.numel() * 4 / 1e6:.1f} MB), kernel us:")
    for name, runs in relu_kernels(prof).items():
        # Inside the model the stem's ReLU comes first: the bottleneck's is the second.
        picks = [r[1] for r in runs] if "model" in name else [us for r in runs for us in r]
        print(
            f"  {name[6:]:26s} median {statistics.median(picks):7.2f}  min {min(picks):7.2f}"
            f"  n {len(picks)}"
        )


if __name__ == "__main__":
    main()
