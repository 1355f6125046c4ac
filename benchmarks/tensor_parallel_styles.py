"""Two ways to apply a transformers model's tensor-parallel plan, on this CPU with gloo (2 ranks):
torch's ``parallelize_module`` (what mlms uses: DTensor weights) and transformers 5's own
``transformers.distributed.tensor_parallel.apply_tensor_parallelism`` (local weights under
``no_grad``). Prints each one's host time per forward of llama_mini's shape (batch 1, 16 tokens:
host-bound, as the split tinyllama_1b is on two H200s) and its largest logit difference from
the unsplit model. Needs transformers >= 5.24 (5.17's function takes the model's own plan).

    .venv/bin/python benchmarks/tensor_parallel_styles.py
"""

from __future__ import annotations

import fnmatch
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mlms.assets.transformer_models import CONFIGURED
from mlms.assets.transformers_import import import_transformers
from mlms.evaluation.tensor_parallel import free_port

FORWARDS = 30


def rank(number: int, port: int, how: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=number, world_size=2
    )
    mesh = init_device_mesh("cpu", (2,))
    transformers = import_transformers()
    config = transformers.LlamaConfig(**CONFIGURED["llama_mini"][4], attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = model(input_ids=ids).logits
    plan = config.base_model_tp_plan
    if how == "torch parallelize_module":
        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        parallelize_module(model.model, mesh, {k: styles[v]() for k, v in plan.items()})
    else:
        from transformers.distributed.tensor_parallel import apply_tensor_parallelism

        names = [name for name, _ in model.model.named_modules()]
        expanded = {n: s for p, s in plan.items() for n in names if fnmatch.fnmatchcase(n, p)}
        apply_tensor_parallelism(model.model, mesh, expanded)
    with torch.no_grad():
        for _ in range(5):
            model.model(input_ids=ids, use_cache=False)
        began = time.perf_counter()
        for _ in range(FORWARDS):
            model.model(input_ids=ids, use_cache=False)
        ms = (time.perf_counter() - began) / FORWARDS * 1e3
        difference = float((model(input_ids=ids).logits - whole).abs().max())
    if number == 0:
        print(f"| {how} | {ms:.2f} | {difference:.2e} |", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    print("| applied by | ms per forward (host) | max abs logit difference |")
    print("|---|---:|---:|")
    for how in ("torch parallelize_module", "transformers apply_tensor_parallelism"):
        mp.spawn(rank, args=(free_port(), how), nprocs=2)
