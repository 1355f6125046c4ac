"""Why a memory-bound layer ran slower alone than inside its model: a probe on the lent GPU.

mobilenet_v2's 192->32 1x1 convolution at batch size 64 (a 38.5 MB input), its kernels and
their durations inside the running model, and alone: back to back on one input, once per
synchronize, right after its producers (the block's expansion and depthwise layers) wrote its
input, and after a 256 MB write that flushes the L2. The kernel is the same in every case; the
time follows whether the input is in the L2. (Earlier probes found neither the first call after
a synchronize slower nor the data's values, rand vs activations, mattering.) Run on the GPU:

    python3 benchmarks/bound_probe.py
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function

B, dev = 64, "cuda"


def kernels_of(event: Any) -> list[Any]:
    out = list(event.kernels)
    for child in event.cpu_children:
        out += kernels_of(child)
    return out


def wrap(module: Any, tag: str) -> None:
    orig = module.forward

    def fwd(*a: Any) -> Any:
        with record_function(tag):
            return orig(*a)

    module.forward = fwd


def table(prof: Any, prefixes: tuple[str, ...]) -> None:
    per: dict[tuple[str, str], list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CPU" and e.name.startswith(prefixes):
            for k in kernels_of(e):
                per.setdefault((e.name.split("#")[0], k.name[:90]), []).append(k.duration)
    for (tag, name), d in sorted(per.items()):
        print(f"  {tag:22s} {statistics.median(d):8.2f} us  n={len(d):3d}  {name}")


def main() -> None:
    with torch.inference_mode():
        net = torchvision.models.mobilenet_v2().to(dev).eval()
        target = next(
            m
            for m in net.modules()
            if isinstance(m, torch.nn.Conv2d) and m.in_channels == 192 and m.out_channels == 32
        )
        block = next(m for m in net.features if any(x is target for x in m.modules()))
        print(block)
        wrap(target, "model:conv")
        x = torch.rand(B, 3, 224, 224, device=dev)
        for _ in range(3):
            net(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                net(x)
            torch.cuda.synchronize()
        print("in model")
        table(prof, ("model:",))
        target.forward = torch.nn.Conv2d.forward.__get__(target)
        # the block's input, captured
        got = {}
        h = block.register_forward_pre_hook(lambda m, i: got.setdefault("x", i[0].clone()))
        net(x)
        h.remove()
        xin = got["x"]
        seq = block.conv  # [ConvBNReLU expand, ConvBNReLU dw, conv proj, bn]
        pre = torch.nn.Sequential(seq[0], seq[1])
        xc = pre(xin).clone()
        for _ in range(3):
            target(xc)
            pre(xin)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for s in range(20):
                for _i in range(4):
                    with record_function(f"alone b2b#{s}"):
                        target(xc)
                torch.cuda.synchronize()
            for s in range(20):
                with record_function(f"alone single#{s}"):
                    target(xc)
                torch.cuda.synchronize()
            for s in range(20):
                for _i in range(4):
                    y = pre(xin)
                    with record_function(f"after producer#{s}"):
                        target(y)
                torch.cuda.synchronize()
            big = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
            for s in range(20):
                for _i in range(4):
                    big.zero_()
                    with record_function(f"after L2 flush#{s}"):
                        target(xc)
                torch.cuda.synchronize()
        print("isolated")
        table(prof, ("alone", "after"))


if __name__ == "__main__":
    main()
