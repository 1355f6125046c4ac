"""mlms's predict of a split model against a bare loop's, in the same two processes: blocks of
predicts interleaved, so that neither the host's pace (which moves from one process to the next)
nor the GPUs' clocks favour a side.

Each rank loads tinyllama_1b (bf16, 512 tokens) twice, both from the same seeded weights and
split by the config's plan with torch's ``parallelize_module``: once through mlms's own
predictor (``SplitTorchPredictor``, as a rank of ``--tensor-parallel 2`` loads it; its
``predict`` is what the runner times) and once as the bare loop of
``benchmarks/tensor_parallel_gpu.py`` does (its ``bare_predict``: a closure over the body and the
head, compiled alike, the logits copied to the host). The two take turns, ``--blocks`` blocks of
``--per-block`` predicts at each batch size, the ranks aligned before each predict (as mlms's
ranks agree on each); a predict's time is the slowest rank's.

    python3 benchmarks/tensor_parallel_compile_ab.py --out OUT           # 2 GPUs
    .venv/bin/python benchmarks/tensor_parallel_compile_ab.py --dry      # small, gloo, here
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.tensor_parallel_gpu import bare_predict, joined_pair  # noqa: E402
from mlms.evaluation.tensor_parallel_rank import release_graphs  # noqa: E402

SHAPES = {"tinyllama_1b": (512, (1, 16)), "llama_mini": (32, (1, 4))}

Predict = Callable[[torch.Tensor], np.ndarray]
#: What ``--variants`` may name (loaded in the order given there).
VARIANTS = ("mlms", "bare", "zoo_split", "mlms_last", "bare_last")
#: Predicts of each side under the profiler (``--profile``), and the rows of each table.
PROFILED = 20
DIFFERING = 12


def _mlms(name: str, device: torch.device, precision: str, mode: str, folder: str) -> Predict:
    """mlms's predictor of one rank, loaded from the seeded weights rank 0 stored."""
    from mlms.assets.architectures import architecture_of
    from mlms.catalog.zoo import get_model
    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.tensor_parallel import SplitTorchPredictor

    manifest = get_model(name)
    weights = Path(folder) / "weights.pt"
    if dist.get_rank() == 0:
        torch.manual_seed(0)
        torch.save(architecture_of(manifest).state_dict(), weights)
    dist.barrier()
    options = PredictorOptions(device=str(device), precision=precision, compile=mode)
    return SplitTorchPredictor(manifest, weights, options).predict


def _zoo_split(name: str, device: torch.device, dtype: torch.dtype, mode: str) -> Predict:
    """The zoo's network of ``name`` freshly seeded, split by mlms's ``split`` and compiled as
    mlms's predictor compiles it (the module), called as the bare loop calls its closure: what
    differs from ``mlms`` is the predictor around the module and the weights' path into it."""
    from torch.distributed.device_mesh import init_device_mesh

    from mlms.assets.architectures import architecture_of
    from mlms.catalog.zoo import get_model
    from mlms.predictors.tensor_parallel import split

    torch.manual_seed(0)
    module = architecture_of(get_model(name)).eval().to(device, dtype)
    module = split(torch, module, init_device_mesh(device.type, (2,)))
    forward = torch.compile(module, mode=mode)

    def predict(ids: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return forward(ids).float().cpu().numpy()

    return predict


def rank_main(rank: int, args: argparse.Namespace, port: int, folder: str) -> None:
    on_gpu = not args.dry
    device = joined_pair(rank, port, on_gpu)
    group = dist.new_group(backend="gloo")
    name = "llama_mini" if args.dry else "tinyllama_1b"
    seq_len, batch_sizes = SHAPES[name]
    batch_sizes = tuple(args.batch_sizes or batch_sizes)
    precision = "fp32" if args.dry else "bf16"
    dtype = torch.float32 if args.dry else torch.bfloat16
    # A hang (a collective one rank never joins) ends the run with every thread's stack.
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    builders: dict[str, Callable[[], Predict]] = {
        "mlms": lambda: _mlms(name, device, precision, args.mode, folder),
        "bare": lambda: bare_predict(name, device, dtype, args.mode)[0],
        "zoo_split": lambda: _zoo_split(name, device, dtype, args.mode),
        # Each side again, loaded after the others: whether being first is what costs, and how
        # far two copies of one predict differ (the method's own resolution).
        "mlms_last": lambda: _mlms(name, device, precision, args.mode, folder),
        "bare_last": lambda: bare_predict(name, device, dtype, args.mode)[0],
    }
    variants = {key: builders[key]() for key in args.variants}
    found: dict[str, dict[str, float]] = {}
    for batch_size in batch_sizes:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 32000, (batch_size, seq_len), generator=generator).to(device)
        times: dict[str, list[int]] = {key: [] for key in variants}
        began = time.perf_counter()
        for predict in variants.values():
            for _ in range(5):
                predict(ids)
        warm = time.perf_counter() - began
        if args.pin_host:
            _pin_host(rank)
        order = list(variants)
        for block in range(args.blocks):
            turn = block % len(order)
            for key in order[turn:] + order[:turn]:
                for _ in range(args.per_block):
                    dist.barrier(group=group)
                    start = time.perf_counter_ns()
                    variants[key](ids)
                    times[key].append(time.perf_counter_ns() - start)
        slowest = {}
        for key, mine in times.items():
            every = [torch.empty(len(mine), dtype=torch.int64) for _ in range(2)]
            dist.all_gather(every, torch.tensor(mine, dtype=torch.int64), group=group)
            slowest[key] = statistics.median(torch.stack(every).amax(0).tolist()) / 1e6
        found[str(batch_size)] = slowest | {"warm_s": warm}
        if rank == 0:
            line = "  ".join(f"{key} {value:.3f}" for key, value in slowest.items())
            print(f"batch {batch_size}: p50 ms {line}  (compile + warm-up {warm:.0f} s)")
        if args.profile:
            profiled = _profiled(variants, ids, group, on_gpu)
            found[str(batch_size)]["profile"] = profiled  # type: ignore[assignment]
            if rank == 0:
                print(_differences(batch_size, profiled), flush=True)
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        print(f"\n| batch | mlms p50 (ms) | bare p50 (ms) | mlms / bare | compile {args.mode} |")
        print("|---:|---:|---:|---:|---|")
        for batch, row in found.items():
            print(f"| {batch} | {row['mlms']:.3f} | {row['bare']:.3f} | "
                  f"{row['mlms'] / row['bare']:.3f} | |", flush=True)  # fmt: skip
        others = [key for key in variants if key not in ("mlms", "bare")]
        if others:
            print("\n| batch | variant | p50 (ms) | / bare | / mlms |\n|---:|---|---:|---:|---:|")
            for batch, row in found.items():
                for key in others:
                    print(f"| {batch} | {key} | {row[key]:.3f} | {row[key] / row['bare']:.3f} | "
                          f"{row[key] / row['mlms']:.3f} |", flush=True)  # fmt: skip
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"compile_ab_{args.mode}.json").write_text(json.dumps(found, indent=1))
    # Leaving the process group has its own clock: a rank stuck there shows where.
    faulthandler.dump_traceback_later(60, exit=True)
    release_graphs(on_gpu)
    dist.barrier(group=group)
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        print("the ranks left their process group", flush=True)


def _pin_host(rank: int) -> None:
    """The calling thread (the one that launches every kernel) on one core of its own for the
    timed blocks, after the compiles, whose worker processes would inherit it: a host-bound
    predict then keeps one core's pace instead of the scheduler's moves between cores."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[(2 * rank + 2) % len(cores)]})


def _profiled(
    variants: dict[str, Predict], ids: torch.Tensor, group: dist.ProcessGroup, on_gpu: bool
) -> dict[str, dict[str, dict[str, float]]]:
    """Each side's ``PROFILED`` predicts under torch.profiler (CPU and CUDA), one side after the
    other: per side, the host's self time per predict of each operator and the GPU's time per
    predict of each kernel and copy (microseconds)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sides: dict[str, dict[str, dict[str, float]]] = {}
    for key, predict in variants.items():
        with torch.profiler.profile(activities=activities) as profiler:
            for _ in range(PROFILED):
                dist.barrier(group=group)
                predict(ids)
        host: dict[str, float] = {}
        gpu: dict[str, float] = {}
        for event in profiler.key_averages():
            # The sides' compiled graphs and regions pair up by kind, not by hash or number.
            name = re.sub(r"CompiledFxGraph \w+|Region: \d+/\d+", _kind, event.key)
            if event.device_type == torch.autograd.DeviceType.CPU:
                host[name] = host.get(name, 0.0) + event.self_cpu_time_total / PROFILED
            else:
                gpu[name] = gpu.get(name, 0.0) + event.self_device_time_total / PROFILED
        sides[key] = {"host_us": host, "gpu_us": gpu}
    return sides


def _kind(match: re.Match[str]) -> str:
    return match.group(0).split()[0]


def _differences(batch_size: int, sides: dict[str, dict[str, dict[str, float]]]) -> str:
    """Rank 0's profile of both sides: the totals per predict, and the operators and kernels
    whose time differs most between them."""
    mine, theirs = sides["mlms"], sides["bare"]
    lines = [f"\nbatch {batch_size}, rank 0, per predict under torch.profiler (us)", "",
             "| what | mlms | bare | mlms - bare |", "|---|---:|---:|---:|"]  # fmt: skip
    for part in ("host_us", "gpu_us"):
        total = sum(mine[part].values()), sum(theirs[part].values())
        lines.append(f"| all of {part} | {total[0]:.1f} | {total[1]:.1f} | "
                     f"{total[0] - total[1]:+.1f} |")  # fmt: skip
        names = mine[part].keys() | theirs[part].keys()
        apart = sorted(names, key=lambda n: -abs(mine[part].get(n, 0) - theirs[part].get(n, 0)))
        for name in apart[:DIFFERING]:
            a, b = mine[part].get(name, 0.0), theirs[part].get(name, 0.0)
            lines.append(f"| {part[:-3]}: `{name[:90]}` | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="llama_mini on this CPU (gloo)")
    parser.add_argument("--mode", default="default", help="torch.compile's mode, both sides")
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--per-block", type=int, default=10)
    parser.add_argument("--hang-s", type=float, default=400.0, help="stacks and exit after")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--batch-sizes", type=lambda v: [int(b) for b in v.split(",")])
    parser.add_argument(
        "--variants",
        type=lambda v: v.split(","),
        default=["mlms", "bare"],
        help="loaded in this order: mlms, bare, zoo_split (the zoo's module split, called as "
        "bare), mlms_last and bare_last (each loaded again); mlms and bare are needed",
    )
    parser.add_argument(
        "--pin-host", action="store_true", help="each rank's thread on a core of its own, timed"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then each side's predicts under torch.profiler: what differs, host and GPU",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown or not {"mlms", "bare"} <= set(args.variants):
        parser.error(f"--variants {','.join(args.variants)}: expected mlms, bare and any of "
                     f"{', '.join(VARIANTS[2:])}")  # fmt: skip
    from mlms.evaluation.tensor_parallel import free_port

    with tempfile.TemporaryDirectory(prefix="compile-ab-") as folder:
        mp.spawn(rank_main, args=(args, free_port(), folder), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
