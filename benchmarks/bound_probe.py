"""Why memory-bound layers ran slower alone than inside their model: a probe on the lent GPU.

For layers of resnet50 and mobilenet_v2 at batch sizes 1 and 64, each one's kernel time inside
the running model, and alone: back to back on one input (``b2b``), after its input was
rewritten in place (``mul_``, what ``mlms.bounds.timing`` can do for any layer), and right
after its real producer in the model wrote its input (``producer``). Kernel times through
Kineto's links from each call's range (the producer's own kernels are in a range of their
own). Run on the GPU:

    python3 benchmarks/bound_probe.py
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function

DEV = "cuda"


def wrap(module: Any, tag: str) -> Callable[[], None]:
    orig = module.forward

    def fwd(*a: Any) -> Any:
        with record_function(tag):
            return orig(*a)

    module.forward = fwd
    return lambda: setattr(module, "forward", orig)


def device_us(prof: Any, prefix: str) -> float:
    times = [
        e.device_time_total
        for e in prof.events()
        if e.device_type.name == "CPU" and e.name.startswith(prefix)
    ]
    return statistics.median(times) if times else float("nan")


def probe(net: Any, batch: int, producer: Any, layer: Any) -> dict[str, float]:
    """``producer`` and ``layer`` are modules of ``net``; the layer reads the producer's output
    (for an add, the layer is the block and the producer its last batch norm)."""
    captured: dict[str, Any] = {}

    def keep(module: Any, inputs: Any, output: Any) -> None:  # None: the output stays
        captured.setdefault("in", inputs[0].clone())

    hook = producer.register_forward_hook(keep)
    x = torch.rand(batch, 3, 224, 224, device=DEV)
    net(x)
    hook.remove()
    restore = wrap(layer, "model")
    for _ in range(3):
        net(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            net(x)
        torch.cuda.synchronize()
    row = {"in model": device_us(prof, "model")}
    restore()
    source = captured["in"]
    fixed = producer(source.clone()).clone()
    held = [fixed]

    def produce() -> None:
        held[0] = producer(source)

    cases = {
        "b2b": (lambda: None, lambda: layer(fixed)),
        "mul_": (lambda: fixed.mul_(1), lambda: layer(fixed)),
        "producer": (produce, lambda: layer(held[0])),
    }
    for name, (prime, call) in cases.items():
        for _ in range(3):
            prime()
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for s in range(20):
                for _ in range(4):
                    with record_function("prime"):
                        prime()
                    with record_function(f"call#{s}"):
                        call()
                torch.cuda.synchronize()
        row[name] = device_us(prof, "call")
    return row


def main() -> None:
    torch.backends.cudnn.benchmark = False
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "(kernel us per call)")
    columns = ["in model", "b2b", "mul_", "producer"]
    print(f"{'layer':34s}" + "".join(f"{c:>10s}" for c in columns))
    with torch.inference_mode():
        rn = torchvision.models.resnet50().to(DEV).eval()
        mb = torchvision.models.mobilenet_v2().to(DEV).eval()
        block = mb.features[5].conv  # expand, depthwise, 192->32 projection, bn
        cases = {
            "resnet50 layer1.1.bn1 < conv1": (rn, rn.layer1[1].conv1, rn.layer1[1].bn1),
            "resnet50 layer1.1.relu < bn1": (rn, rn.layer1[1].bn1, rn.layer1[1].relu),
            "resnet50 layer2.1.conv2 < relu": (rn, rn.layer2[1].relu, rn.layer2[1].conv2),
            "mobilenet_v2 5 proj < dw": (mb, block[1], block[2]),
        }
        for batch in (1, 64):
            for name, (net, producer, layer) in cases.items():
                row = probe(net, batch, producer, layer)
                print(f"{name + f' bs{batch}':34s}" + "".join(f"{row[c]:10.2f}" for c in columns))


if __name__ == "__main__":
    main()
