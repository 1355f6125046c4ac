"""What the layer events' wrappers cost per layer call, on the host, where nothing else hides it.

A model of ``--leaves`` leaf modules that do next to nothing (ReLU on a 4-element tensor) and
one operator outside them per ``--every`` leaves (an add: the path the wrappers' function mode
times) is run plain and under ``HookedLayers.capture`` (the framework level's layers on a CUDA
device; here on the CPU, the same Python), in alternating blocks. Prints each block kind's p50
and the microseconds the capture adds per layer call: the wrappers' own cost, which at batch 1
on a GPU lands in full in the predict's latency (the host issues the forward slower than the
GPU runs it). First the seconds of ``sum(range(10**8))``, to set one host's Python speed
beside another's.

    .venv/bin/python benchmarks/layer_wrapper_cost.py [--leaves 175] [--every 10] [--rounds 10]
        [--block 200]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from mlms.predictors.torch_layer_costs import LayerCosts
from mlms.predictors.torch_layer_hooks import HookedLayers


class Chain(torch.nn.Module):
    """``leaves`` ReLUs in groups of ``every``, each group's output added to its input."""

    def __init__(self, leaves: int, every: int) -> None:
        super().__init__()
        self.groups = torch.nn.ModuleList(
            torch.nn.Sequential(*(torch.nn.ReLU() for _ in range(min(every, leaves - start))))
            for start in range(0, leaves, every)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for group in self.groups:
            x = group(x) + x
        return x


def block_times(model: Chain, x: torch.Tensor, block: int) -> list[float]:
    """Microseconds of each of ``block`` forwards."""
    times = []
    for _ in range(block):
        began = time.perf_counter_ns()
        model(x)
        times.append((time.perf_counter_ns() - began) / 1e3)
    return times


def measure(leaves: int, every: int, rounds: int, block: int) -> dict[str, float]:
    torch.set_num_threads(1)
    model, x = Chain(leaves, every).eval(), torch.randn(4)
    hooked = HookedLayers(torch, model, LayerCosts(torch, model))
    calls = leaves + len(model.groups)  # the leaves and the adds outside them
    plain: list[float] = []
    captured: list[float] = []
    with torch.inference_mode():
        block_times(model, x, block)  # warm-up
        for _ in range(rounds):
            plain += block_times(model, x, block)
            with contextlib.contextmanager(hooked.capture)() as capture:
                captured += block_times(model, x, block)
            assert len(capture.events) == calls * block, "a layer call went unrecorded"
    base, traced = statistics.median(plain), statistics.median(captured)
    return {
        "layer_calls": calls,
        "plain_us": base,
        "captured_us": traced,
        "ratio": traced / base,
        "us_per_layer_call": (traced - base) / calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=175)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=200)
    args = parser.parse_args()
    for name, value in (("--leaves", args.leaves), ("--every", args.every)):
        if value < 1:
            parser.error(f"{name} {value}: expected a positive number")
    began = time.perf_counter()
    sum(range(10**8))
    print(f"reference: sum(range(10**8)) in {time.perf_counter() - began:.2f} s on this host")
    row = measure(args.leaves, args.every, args.rounds, args.block)
    print(
        f"{row['layer_calls']} layer calls a forward: plain p50 {row['plain_us']:.1f} us, "
        f"captured {row['captured_us']:.1f} us ({row['ratio']:.3f}x): "
        f"{row['us_per_layer_call']:.2f} us per layer call"
    )


if __name__ == "__main__":
    main()
