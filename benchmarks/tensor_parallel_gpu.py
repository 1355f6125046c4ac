"""A model split over two GPUs (``--tensor-parallel 2``) against a bare torch loop with the same
split: the cells of the GPU run kit's plan ``tensor_parallel`` on a 2-GPU host (``--dry`` here,
small, on the CPU with gloo).

Prints, and writes as JSON under ``--out``:
1. mlms p50 / bare p50 of tinyllama_1b (bf16, 512 tokens, inputs on the device) at batch 1 and 16,
   rounds interleaved, the side that goes first alternating (target <= 1.02). The bare loop: two
   processes, transformers' ``LlamaForCausalLM`` split by its config's ``base_model_tp_plan``
   with torch's ``parallelize_module`` directly, each predict timed around the forward and the
   logits' copy to the host (what mlms's predict does), the slowest rank's per iteration.
2. NCCL kernel time per iteration: mlms's hardware-level trace (CUPTI in each rank) against
   torch.profiler over the bare loop (target: within 2 %). A rank's NCCL kernel lasts until
   the last rank joins the collective, so its sum per iteration measures the ranks' skew, which
   differs from run to run; the transfer (per collective, the shortest kernel over the ranks:
   the last to join waited for no one) is what the two runs share. mlms's comes from its
   ``collectives`` analysis, torch.profiler's from its raw rank traces (at the first batch
   size), both kept as Kineto traces, one per rank (``kineto/rank*.json.gz``).
3. The scaling table: one GPU against two (speedup, efficiency, energy per inference), and
   time to first token / per output token with ``--generate``.

``--compile default`` compiles both loops (torch.compile traces through the split's DTensors);
``--compile reduce-overhead`` replays them as CUDA graphs, NCCL's collectives included.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@dataclass(frozen=True)
class Setup:
    model: str
    hw: str
    precision: str
    seq_len: int
    batch_sizes: tuple[int, ...]
    iterations: int
    min_seconds: float
    rounds: int
    profiled_iterations: int
    generate: int
    compile: str | None = None  # torch.compile's mode, in mlms and the bare loop alike

    @property
    def on_gpu(self) -> bool:
        return self.hw != "cpu"


GPU = Setup("tinyllama_1b", "gpu", "bf16", 512, (1, 16), 40, 1.0, 2, 20, 16)
DRY = Setup("llama_mini", "cpu", "fp32", 32, (1, 4), 5, 0.0, 1, 3, 4)


def mlms_eval(setup: Setup, store: Any, **changes: Any) -> Any:
    """One evaluation through mlms's own runner (the embedded client's path, no index)."""
    from mlms.evaluation.record import EvaluationRequest
    from mlms.evaluation.runner import evaluate

    values: dict[str, Any] = {
        "model": setup.model,
        "hw": setup.hw,
        "batch_sizes": list(setup.batch_sizes),
        "iterations": setup.iterations,
        "warmup": 5,
        "min_seconds": setup.min_seconds,
        "precision": setup.precision,
        "seq_len": setup.seq_len,
        "input_on_device": setup.on_gpu,
        "tensor_parallel": 2,
        "compile": setup.compile,
    }
    return evaluate(EvaluationRequest(**values | changes), store=store)


# --- the bare loop: two processes, the split applied with torch directly ---------------------


def joined_pair(rank: int, port: int, on_gpu: bool) -> torch.device:
    """This process as rank ``rank`` of two (NCCL between GPUs, gloo on the CPU), on its
    device."""
    device = torch.device(f"cuda:{rank}" if on_gpu else "cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    else:  # the host's cores shared between the ranks, as mlms's ranks share them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    dist.init_process_group(
        "nccl" if on_gpu else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        device_id=device if on_gpu else None,
    )
    return device


def bare_predict(
    name: str, device: torch.device, dtype: torch.dtype, mode: str | None
) -> tuple[Callable[[torch.Tensor], Any], Any]:
    """The bare loop's predict and its model's config: transformers' ``LlamaForCausalLM`` of
    the zoo's ``name`` (seeded), split over the default group by its config's plan with torch's
    ``parallelize_module``, the last token's logits copied to the host; compiled in ``mode``
    as mlms compiles its model (the body and the head in one region), when given."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from mlms.assets.transformer_models import CONFIGURED
    from mlms.assets.transformers_import import import_transformers

    transformers = import_transformers()
    config = transformers.LlamaConfig(**CONFIGURED[name][4], attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to(device, dtype)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {key: styles[style]() for key, style in config.base_model_tp_plan.items()}
    parallelize_module(model.model, init_device_mesh(device.type, (2,)), plan)

    def last_token_logits(ids: torch.Tensor) -> torch.Tensor:
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        return model.lm_head(hidden[:, -1])

    forward = torch.compile(last_token_logits, mode=mode) if mode else last_token_logits

    def predict(ids: torch.Tensor) -> Any:
        with torch.no_grad():  # as mlms's split predictor: DTensor is slow under inference_mode
            return forward(ids).float().cpu().numpy()

    return predict, config


def bare_rank(rank: int, setup: Setup, port: int, out: str, profile_dir: str | None) -> None:
    device = joined_pair(rank, port, setup.on_gpu)
    group = dist.new_group(backend="gloo")
    dtype = torch.bfloat16 if setup.precision == "bf16" else torch.float32
    predict, config = bare_predict(setup.model, device, dtype, setup.compile)

    results: dict[str, Any] = {}
    generator = torch.Generator().manual_seed(0)
    for batch_size in setup.batch_sizes:
        ids = torch.randint(0, config.vocab_size, (batch_size, setup.seq_len), generator=generator)
        ids = ids.to(device)
        for _ in range(5):
            predict(ids)
        latencies = []
        began = time.perf_counter()
        index = 0
        while True:
            more = torch.tensor(
                [int(index < setup.iterations or time.perf_counter() - began < setup.min_seconds)]
            )
            dist.all_reduce(more, op=dist.ReduceOp.MAX, group=group)
            if not more.item():
                break
            start = time.perf_counter_ns()
            predict(ids)
            latencies.append(time.perf_counter_ns() - start)
            index += 1
        mine = torch.tensor(latencies)
        every = [torch.empty_like(mine) for _ in range(2)]
        dist.all_gather(every, mine, group=group)
        slowest = torch.stack(every).amax(0).tolist()
        results[str(batch_size)] = {
            "p50_ms": statistics.median(slowest) / 1e6,
            "iterations": len(slowest),
        }
    if profile_dir is not None:
        results["profile"] = profile_bare(rank, setup, predict, config, device, profile_dir)
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    from mlms.evaluation.tensor_parallel_rank import release_graphs

    release_graphs(setup.on_gpu)
    dist.barrier(group=group)
    dist.destroy_process_group()


def profile_bare(
    rank: int, setup: Setup, predict: Any, config: Any, device: Any, folder: str
) -> dict[str, float]:
    """NCCL kernel time per predict under torch.profiler (CPU + CUDA) at each batch size, and
    the last batch size's trace kept as a Kineto file of this rank."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if setup.on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    per_predict = {}
    for batch_size in setup.batch_sizes:
        ids = torch.randint(0, config.vocab_size, (batch_size, setup.seq_len)).to(device)
        count = setup.profiled_iterations
        with torch.no_grad(), torch.profiler.profile(activities=activities) as profiler:
            for step in range(count):
                with torch.profiler.record_function(f"ProfilerStep#{step}"):
                    predict(ids)
        nccl = sum(
            event.device_time_total
            for event in profiler.events()
            if event.device_type == torch.autograd.DeviceType.CUDA and "nccl" in event.name.lower()
        )
        per_predict[str(batch_size)] = nccl / count / 1e3  # ms
        if batch_size == setup.batch_sizes[0]:
            path = Path(folder) / f"rank{rank}.json"
            profiler.export_chrome_trace(str(path))
            with open(path, "rb") as raw, gzip.open(f"{path}.gz", "wb", compresslevel=9) as packed:
                shutil.copyfileobj(raw, packed)
            path.unlink()
    return per_predict


def bare(setup: Setup, out: Path, profile_dir: Path | None = None) -> dict[str, Any]:
    from mlms.evaluation.tensor_parallel import free_port

    result = out / "bare.json"
    mp.spawn(
        bare_rank,
        args=(setup, free_port(), str(result), str(profile_dir) if profile_dir else None),
        nprocs=2,
    )
    return json.loads(result.read_text())


# --- mlms's trace: NCCL kernel time per predict ----------------------------------------------


def mlms_nccl_per_predict(store: Any, record: Any) -> dict[str, float]:
    """Per batch size, the NCCL kernel time of one predict on the slowest-communicating rank
    (ms), from the hardware-level run of the archive."""
    import duckdb

    from mlms.tracer.archive import local_archive

    archive = local_archive(store, record.trace_id)
    rows = duckdb.sql(
        f"""
        select batch_size, rank, sum(end_ns - start_ns) / 1e6 as ms,
               count(distinct parent_id) as calls
        from '{archive}'
        where level = 6 and kind = 'communication'
        group by all
        """
    ).fetchall()
    models = dict(
        duckdb.sql(
            f"select batch_size, count(*) / count(distinct rank) from '{archive}' "
            "where level = 2 and run = (select max(run) from "
            f"'{archive}' where level = 6) group by all"
        ).fetchall()
    )
    per: dict[str, float] = {}
    for batch_size, _rank, ms, _calls in rows:
        per[str(batch_size)] = max(per.get(str(batch_size), 0.0), ms / models[batch_size])
    return per


def mlms_transfer_per_predict(store: Any, record: Any) -> dict[str, float]:
    """Per batch size, the NCCL transfer of one predict (ms) by mlms's ``collectives``
    analysis of the evaluation's trace (rank 0's rows: the transfer is the ranks' shared)."""
    from mlms.analysis.distributed import collectives
    from mlms.analysis.engine import Spans
    from mlms.tracer.archive import local_archive

    spans = Spans.from_parquet([local_archive(store, record.trace_id)])
    table = collectives(spans)
    table = table[table["rank"] == 0]
    predicts = {r.batch_size: r.levels["hardware"].iterations for r in record.results}
    return {
        str(batch): float(rows["transfer total (ms)"].sum()) / predicts[int(batch)]
        for batch, rows in table.groupby("batch_size")
    }


def kineto_transfer_per_predict(folder: Path) -> float:
    """The NCCL transfer of one predict (ms) in torch.profiler's rank traces, read raw: the
    n-th NCCL kernel of each rank is the same collective; its shortest duration is the
    transfer. Predicts: the ``ProfilerStep#`` ranges on the host."""
    kernels, steps = [], set()
    for path in sorted(folder.glob("rank*.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        nccl = [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
        kernels.append([e["dur"] for e in sorted(nccl, key=lambda e: e["ts"])])
        steps.add(sum(1 for e in events if e.get("cat") == "user_annotation"
                      and e["name"].startswith("ProfilerStep#")))  # fmt: skip
    if len({len(k) for k in kernels}) != 1 or len(steps) != 1:
        raise SystemExit(f"{folder}: ranks with different NCCL kernels or steps: {steps}")
    transfer_us = sum(min(durations) for durations in zip(*kernels, strict=True))
    return transfer_us / 1e3 / steps.pop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry", action="store_true", help="small, on this CPU (gloo)")
    parser.add_argument("--parts", default="latency,nccl,scaling")
    parser.add_argument("--rounds", type=int, default=None, help="latency rounds (default 2)")
    parser.add_argument("--compile", default=None, help="torch.compile mode, in both loops")
    parser.add_argument(
        "--transfer-of",
        type=Path,
        metavar="CELL",
        help="no run: the NCCL transfer of an nccl cell brought back by the run kit "
        "(benchmarks/results/PLAN/cells/NAME, its store two folders up), added to its report",
    )
    args = parser.parse_args()
    if args.transfer_of is not None:
        return transfer_of(args.transfer_of)
    if args.out is None:
        parser.error("--out is required for a run")
    setup = DRY if args.dry else GPU
    if args.rounds is not None:
        setup = dataclasses.replace(setup, rounds=args.rounds)
    setup = dataclasses.replace(setup, compile=args.compile)
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    from mlms.store.local import LocalStore

    store = LocalStore(Path(os.environ.get("MLMS_HOME", "/tmp/mlms-tp")) / "store")
    report: dict[str, Any] = {"setup": setup.__dict__, "device": _device()}
    print(report["device"], flush=True)

    if "latency" in parts:
        rounds = []
        for number in range(setup.rounds):
            began = time.perf_counter()
            # The sides alternate which goes first, so that a drift of the host or the GPUs
            # over a round (clocks, caches warming) does not favour one side.
            bare_first = number % 2 == 1
            theirs = bare(setup, args.out) if bare_first else None
            record = mlms_eval(setup, store)
            mine = {str(r.batch_size): r.latency_ms.p50 for r in record.results}
            theirs = theirs or bare(setup, args.out)
            first = "bare" if bare_first else "mlms"
            rounds.append({"mlms": mine, "bare": theirs, "mlms_id": record.id, "first": first})
            seconds = time.perf_counter() - began
            print(f"round {number} ({first} first): mlms {mine}  bare {theirs}  "
                  f"({seconds:.0f} s)", flush=True)  # fmt: skip
        report["latency"] = rounds
        print("\n| batch | mlms p50 (ms) | bare p50 (ms) | mlms / bare |")
        print("|---:|---:|---:|---:|")
        for batch_size in map(str, setup.batch_sizes):
            mine = statistics.median(r["mlms"][batch_size] for r in rounds)
            theirs = statistics.median(r["bare"][batch_size]["p50_ms"] for r in rounds)
            print(f"| {batch_size} | {mine:.3f} | {theirs:.3f} | {mine / theirs:.3f} |")
        _save(args.out, report)

    if "nccl" in parts:
        kineto = args.out / "kineto"
        kineto.mkdir(exist_ok=True)
        # The CPU's deepest level is the layers', which a compiled split has none of.
        cpu_level = "model" if setup.compile else "framework"
        record = mlms_eval(setup, store, trace_level="hardware" if setup.on_gpu else cpu_level)
        theirs = bare(setup, args.out, kineto)["profile"]
        report["nccl"] = {"mlms_id": record.id, "bare_profile": theirs}
        if setup.on_gpu:
            mine = mlms_nccl_per_predict(store, record)
            report["nccl"]["mlms"] = mine
            first = str(setup.batch_sizes[0])
            transfer = {
                "mlms": mlms_transfer_per_predict(store, record)[first],
                "bare_profile": kineto_transfer_per_predict(kineto),
                "batch_size": first,
            }
            report["nccl"]["transfer"] = transfer
            print(f"NCCL transfer per predict at batch {first}: mlms {transfer['mlms']:.4f} "
                  f"ms, torch.profiler {transfer['bare_profile']:.4f} ms, ratio "
                  f"{transfer['mlms'] / transfer['bare_profile']:.4f}")  # fmt: skip
            print("\n| batch | NCCL ms / predict, mlms | torch.profiler | ratio |")
            print("|---:|---:|---:|---:|")
            for batch_size in map(str, setup.batch_sizes):
                print(f"| {batch_size} | {mine[batch_size]:.4f} | {theirs[batch_size]:.4f} | "
                      f"{mine[batch_size] / theirs[batch_size]:.3f} |")  # fmt: skip
        levels = {str(r.batch_size): {k: v.overhead for k, v in r.levels.items()}
                  for r in record.results}  # fmt: skip
        report["nccl"]["overheads"] = levels
        print("level slowdowns:", levels, flush=True)
        _save(args.out, report)

    if "scaling" in parts:
        first = f"{setup.hw}:0" if setup.on_gpu else "cpu"
        one = mlms_eval(setup, store, tensor_parallel=1, hw=first)
        two = mlms_eval(setup, store)
        # Generation runs eager (mlms refuses --generate with --compile).
        generated = {} if setup.compile else {
            ranks: mlms_eval(setup, store, tensor_parallel=ranks, batch_sizes=[1],
                             generate=setup.generate,
                             hw=first if ranks == 1 else setup.hw)
            for ranks in (1, 2)
        }  # fmt: skip
        report["scaling"] = {"one": one.model_dump(mode="json"), "two": two.model_dump(mode="json")}
        print("\n| batch | 1 GPU p50 | 2 GPUs p50 | speedup | efficiency | J/inference 1 | 2 |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for a, b in zip(one.results, two.results, strict=True):
            speedup = a.latency_ms.p50 / b.latency_ms.p50
            energy = [r.energy.joules_per_inference if r.energy else None for r in (a, b)]
            print(f"| {a.batch_size} | {a.latency_ms.p50:.3f} | {b.latency_ms.p50:.3f} | "
                  f"{speedup:.2f} | {speedup / 2:.2f} | {energy[0]} | {energy[1]} |")  # fmt: skip
        print("\n| ranks | TTFT p50 (ms) | TPOT p50 (ms) | tokens/s |")
        print("|---:|---:|---:|---:|")
        for ranks, record in generated.items():
            g = record.results[0].generation
            report["scaling"][f"generate_{ranks}"] = g.model_dump(mode="json") if g else None
            if g is not None:
                tpot = g.time_per_output_token_ms.p50 if g.time_per_output_token_ms else None
                print(f"| {ranks} | {g.time_to_first_token_ms.p50:.3f} | {tpot} | "
                      f"{g.tokens_per_second:.1f} |")  # fmt: skip
        peaks = [(r.rank, r.peak_memory_bytes) for r in two.ranks]
        print("peak memory per rank (bytes):", peaks)

    _save(args.out, report)
    return 0


def transfer_of(cell: Path) -> int:
    """The transfer comparison of a cell run before its script computed it, from the cell's
    record, its archive in the results' store and the bare loop's Kineto traces."""
    from mlms.evaluation.record import EvaluationRecord
    from mlms.store.local import LocalStore

    store = LocalStore(cell.parent.parent / "store")
    report = json.loads((cell / "tensor_parallel.json").read_text())
    nccl = report["nccl"]
    record = EvaluationRecord.model_validate_json(
        store.get_bytes(f"evaluations/{nccl['mlms_id']}.json")
    )
    first = str(report["setup"]["batch_sizes"][0])
    nccl["transfer"] = {
        "mlms": mlms_transfer_per_predict(store, record)[first],
        "bare_profile": kineto_transfer_per_predict(cell / "kineto"),
        "batch_size": first,
    }
    print(json.dumps(nccl["transfer"]))
    _save(cell, report)
    return 0


def _save(out: Path, report: dict[str, Any]) -> None:
    (out / "tensor_parallel.json").write_text(json.dumps(report, indent=1, default=str))


def _device() -> str:
    if not torch.cuda.is_available():
        return f"cpu ({os.cpu_count()} cores), torch {torch.__version__}"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{', '.join(names)}; torch {torch.__version__}, cuda {torch.version.cuda}"


if __name__ == "__main__":
    sys.exit(main())
