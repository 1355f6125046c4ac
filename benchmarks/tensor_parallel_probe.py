"""Where a split forward's time goes on a 2-GPU host: a raw NCCL all-reduce of one layer's
activations, tinyllama_1b's forward unsplit on each GPU, and split over both by its config's
tensor-parallel plan (torch's ``parallelize_module``) under ``inference_mode`` and ``no_grad``,
then torch.profiler's table of the split forward (host-side dispatch against GPU time).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        PYTHONPATH=$PWD python3 benchmarks/tensor_parallel_probe.py      # on the GPU machine
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mlms.evaluation.tensor_parallel import free_port

SEQ_LEN = 512
ROUNDS = 10


def probe(rank: int, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from mlms.assets.transformer_models import CONFIGURED
    from mlms.assets.transformers_import import import_transformers

    torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}")
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, device_id=device
    )
    transformers = import_transformers()
    config = transformers.LlamaConfig(**CONFIGURED["tinyllama_1b"][4], attn_implementation="sdpa")
    activations = torch.randn(1, SEQ_LEN, config.hidden_size, device=device, dtype=torch.bfloat16)
    say(
        rank,
        "raw all_reduce of one layer's activations",
        timed(lambda: dist.all_reduce(activations)),
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to(device, torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (1, SEQ_LEN), device=device)

    def forward() -> None:
        model.model(input_ids=ids, use_cache=False)

    say(rank, "unsplit forward, inference_mode", timed(forward, torch.inference_mode))
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {key: styles[style]() for key, style in config.base_model_tp_plan.items()}
    parallelize_module(model.model, init_device_mesh("cuda", (2,)), plan)
    say(rank, "split forward, inference_mode", timed(forward, torch.inference_mode))
    say(rank, "split forward, no_grad", timed(forward, torch.no_grad))
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.inference_mode(), torch.profiler.profile(activities=activities) as profiler:
        forward()
        torch.cuda.synchronize()
    if rank == 0:
        print(profiler.key_averages().table(sort_by="cpu_time_total", row_limit=18), flush=True)
    dist.destroy_process_group()


def timed(
    work: Callable[[], object], mode: Callable[[], AbstractContextManager[object]] = torch.no_grad
) -> float:
    """Milliseconds per call, after three untimed calls."""
    with mode():
        for _ in range(3):
            work()
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(ROUNDS):
            work()
        torch.cuda.synchronize()
    return (time.perf_counter() - began) / ROUNDS * 1e3


def say(rank: int, what: str, ms: float) -> None:
    if rank == 0:
        print(f"{what}: {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    mp.spawn(probe, args=(free_port(),), nprocs=2)
