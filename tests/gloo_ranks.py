"""Real rank traces for the tests: two processes on this CPU, joined by torch.distributed's
gloo backend, run a tensor-parallel MLP (torch's ``parallelize_module``: a column-parallel
then a row-parallel linear) and an all-reduce under torch.profiler, and each writes its Kineto
trace, as a user of a multi-process run gets them.

    python tests/gloo_ranks.py RANK WORLD PORT FOLDER    (one process; ``record`` starts all)
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

STEPS = 3


def record(folder: Path, world: int = 2) -> list[Path]:
    """Run ``world`` ranks to completion; their traces, ``rank<N>.json`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(world), str(port), str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    failures = []
    for rank, process in enumerate(processes):
        _, errors = process.communicate(timeout=120)
        if process.returncode != 0:
            failures.append(f"rank {rank}: {errors[-2000:]}")
    if failures:
        raise RuntimeError("gloo ranks failed: " + "\n".join(failures))
    return [folder / f"rank{rank}.json" for rank in range(world)]


def _rank(rank: int, world: int, port: int, folder: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    mlp = parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    batch = torch.randn(64, 256)
    trace = folder / f"rank{rank}.json"
    with (
        torch.inference_mode(),
        profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=STEPS),
            record_shapes=True,
            on_trace_ready=lambda done: done.export_chrome_trace(str(trace)),
        ) as profiler,
    ):
        for _ in range(STEPS + 1):
            hidden = mlp(batch)
            dist.all_reduce(hidden)
            profiler.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
