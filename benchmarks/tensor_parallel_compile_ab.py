"""How mlms compiles a split model against how a bare loop does, in the same two processes:
blocks of predicts interleaved, so that neither the host's pace from one process to the next
nor the GPUs' clocks favour a side.

Each rank builds tinyllama_1b (bf16, 512 tokens) twice from the same seed and splits it by the
config's plan with torch's ``parallelize_module``: once as mlms loads it (its ``NextTokenModel``
split by ``mlms.predictors.tensor_parallel.split``, compiled as ``TorchPredictor`` compiles a
model: ``torch.compile`` of the module) and once as the bare loop of
``benchmarks/tensor_parallel_gpu.py`` does (a closure over the body and the head). Then the
variants take turns, ``--blocks`` blocks of ``--per-block`` predicts each at every batch size,
each predict timed around the forward and the logits' copy to the host, the slowest rank's.

    python3 benchmarks/tensor_parallel_compile_ab.py                     # 2 GPUs
    .venv/bin/python benchmarks/tensor_parallel_compile_ab.py --dry      # small, gloo, here
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SHAPES = {"tinyllama_1b": (512, (1, 16)), "llama_mini": (32, (1, 4))}


def _models(name: str, device: Any, dtype: Any, mesh: Any) -> dict[str, Any]:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from mlms.assets.transformer_models import CONFIGURED, NextTokenModel
    from mlms.assets.transformers_import import import_transformers
    from mlms.predictors.tensor_parallel import split

    transformers = import_transformers()
    values = CONFIGURED[name][4]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**values)
    mine = NextTokenModel(transformers.LlamaForCausalLM(config), "llama").eval().to(device, dtype)
    split(torch, mine, mesh)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**values, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).eval().to(device, dtype)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {key: styles[style]() for key, style in config.base_model_tp_plan.items()}
    parallelize_module(model.model, mesh, plan)

    def bare(ids: torch.Tensor) -> torch.Tensor:
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        return model.lm_head(hidden[:, -1])

    return {"mlms_module": mine, "mlms_forward": mine.forward, "bare": bare}


def rank_main(rank: int, args: argparse.Namespace, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    on_gpu = not args.dry
    device = torch.device(f"cuda:{rank}" if on_gpu else "cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(
        "nccl" if on_gpu else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        device_id=device if on_gpu else None,
    )
    group = dist.new_group(backend="gloo")
    mesh = init_device_mesh(device.type, (2,))
    name = "llama_mini" if args.dry else "tinyllama_1b"
    seq_len, batch_sizes = SHAPES[name]
    dtype = torch.float32 if args.dry else torch.bfloat16
    wanted = args.variants.split(",")
    variants = {key: torch.compile(fn, mode=args.mode) for key, fn in
                _models(name, device, dtype, mesh).items() if key in wanted}  # fmt: skip
    # A hang (a collective one rank never joins) ends the run with every thread's stack.
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    found: dict[str, dict[str, float]] = {}
    for batch_size in batch_sizes:
        ids = torch.randint(
            0, 32000, (batch_size, seq_len), generator=torch.Generator().manual_seed(0)
        )
        ids = ids.to(device)
        times: dict[str, list[int]] = {key: [] for key in variants}
        began = time.perf_counter()
        with torch.no_grad():
            for fn in variants.values():
                for _ in range(5):
                    fn(ids).float().cpu().numpy()
            warm = time.perf_counter() - began
            order = list(variants)
            for block in range(args.blocks):
                for key in order[block % len(order) :] + order[: block % len(order)]:
                    for _ in range(args.per_block):
                        dist.barrier(group=group)
                        start = time.perf_counter_ns()
                        variants[key](ids).float().cpu().numpy()
                        times[key].append(time.perf_counter_ns() - start)
        slowest = {}
        for key, mine in times.items():
            every = [torch.empty(len(mine), dtype=torch.int64) for _ in range(2)]
            dist.all_gather(every, torch.tensor(mine, dtype=torch.int64), group=group)
            slowest[key] = statistics.median(torch.stack(every).amax(0).tolist()) / 1e6
        found[str(batch_size)] = slowest | {"warm_s": warm}
        if rank == 0:
            line = "  ".join(f"{k} {v:.3f}" for k, v in slowest.items())
            print(
                f"batch {batch_size}: p50 ms {line}  (compile + warm-up {warm:.0f} s)", flush=True
            )
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        print(f"\n| batch | variant | p50 (ms) | / bare | mode {args.mode} |")
        print("|---:|---|---:|---:|---|")
        for batch, row in found.items():
            for key in variants:
                print(f"| {batch} | {key} | {row[key]:.3f} | {row[key] / row['bare']:.3f} | |")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"compile_ab_{args.mode}.json").write_text(json.dumps(found, indent=1))
    dist.barrier(group=group)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="llama_mini on this CPU (gloo)")
    parser.add_argument("--mode", default="default", help="torch.compile's mode")
    parser.add_argument("--variants", default="mlms_module,mlms_forward,bare")
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--per-block", type=int, default=10)
    parser.add_argument("--hang-s", type=float, default=400.0, help="stacks and exit after")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from mlms.evaluation.tensor_parallel import free_port

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    mp.spawn(rank_main, args=(args, free_port()), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
