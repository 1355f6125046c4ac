"""GPU pipeline and transformer numbers: what mlms measures against what users would, and
transformers in half precision. Run by benchmarks/transformers_gpu.sh on the lent H100; prints
one table per part and writes them (and the records' numbers) as JSON under --out.

1. resnet50 batch 64 fp32 with the inputs on the device: mlms's measured loop against a bare
   torch loop on the same module and the same device tensor, timed with CUDA events,
   interleaved block by block. Target: ratio of medians <= 1.02.
2. The input copy of that batch (38.5 MB): from pinned memory as mlms stages it, against a
   pageable copy (what mlms did before). Target: pinned >= 20 GB/s.
3. BERT-base and GPT-2 small at each precision (inputs on the device, --seq-len tokens):
   model latency and speed-up over fp32; GPT-2's generation: time to first token and per
   output token.

    python3 benchmarks/transformers_gpu.py --out DIR [--rounds 8] [--block 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.evaluation.feed import Feed
from mlms.evaluation.inputs import open_inputs
from mlms.evaluation.measure import measure_loop
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.predictors.base import PredictorOptions
from mlms.predictors.torch_predictor import TorchPredictor
from mlms.store.factory import default_store
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer

DEVICE = "cuda:0"


def _event_timed(torch: Any, call: Any) -> float:
    """Milliseconds of ``call``'s work on the current stream, by CUDA events."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def harness_vs_bare(model: str, batch_size: int, rounds: int, block: int) -> dict[str, Any]:
    """Part 1: interleaved blocks of mlms's model-level loop and of a bare loop."""
    import torch

    manifest = get_model(model)
    asset = AssetManager(default_store(), mlms_home() / "cache").ensure(manifest, "torch")
    predictor = TorchPredictor(manifest, asset.path, PredictorOptions(DEVICE, precision="fp32"))
    source = open_inputs(manifest, ["synthetic"], seed=0)
    feed = Feed(predictor, source, batch_size, on_device=True)
    tensor = feed.next(0, Tracer(TraceLevel.NO_TRACE))
    module = predictor.module

    def bare() -> None:
        with torch.inference_mode():
            module(tensor)

    request = EvaluationRequest(model=model, iterations=block, min_seconds=0.0)
    tracer = Tracer(TraceLevel.MODEL)
    for _ in range(5):  # warm-up: cuDNN's algorithm choice, the caching allocator
        bare()
        predictor.predict(tensor)
    torch.cuda.synchronize()
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        with tracer.run(1, TraceLevel.MODEL):
            latencies, _ = measure_loop(
                predictor, feed, tracer, request, batch_size, TraceLevel.MODEL, lambda _: None
            )
        ours += [ns / 1e6 for ns in latencies]
        theirs += [_event_timed(torch, bare) for _ in range(block)]
    tracer.shutdown()
    copies = copy_rates(torch, predictor, source.take(0, batch_size).tensor)
    predictor.close()
    mine, bare_ms = statistics.median(ours), statistics.median(theirs)
    return {
        "model": model,
        "batch_size": batch_size,
        "mlms_p50_ms": mine,
        "bare_cuda_events_p50_ms": bare_ms,
        "ratio": mine / bare_ms,
        "samples": [len(ours), len(theirs)],
        "tf32": {
            "matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn": torch.backends.cudnn.allow_tf32,
        },
        **copies,
    }


def copy_rates(torch: Any, predictor: TorchPredictor, batch: Any, repeats: int = 20) -> dict:
    """Part 2: GB/s of mlms's pinned, asynchronous copy and of a pageable one."""
    pinned = [predictor.stage(batch)[1] for _ in range(repeats)]
    host = torch.from_numpy(batch)
    pageable = [
        _event_timed(torch, lambda: host.to(DEVICE, non_blocking=True)) / 1e3
        for _ in range(repeats)
    ]
    size = batch.nbytes
    return {
        "copy_bytes": size,
        "pinned_gb_per_s": size / statistics.median(c.seconds for c in pinned) / 1e9,
        "pageable_gb_per_s": size / statistics.median(pageable) / 1e9,
    }


def _record_row(record: EvaluationRecord) -> list[dict[str, Any]]:
    rows = []
    for result in record.results:
        row: dict[str, Any] = {
            "model": record.model.name,
            "precision": record.request.precision,
            "batch_size": result.batch_size,
            "p50_ms": result.latency_ms.p50,
            "throughput": result.throughput,
            "input": record.settings["input_placement"],
        }
        if result.input_copy:
            row["copy_gb_per_s"] = result.input_copy.gb_per_s
        if result.generation:
            gen = result.generation
            row["ttft_ms"] = gen.time_to_first_token_ms.p50
            per_token = gen.time_per_output_token_ms
            row["tpot_ms"] = per_token.p50 if per_token else None
            row["tokens_per_s"] = gen.tokens_per_second
        rows.append(row)
    return rows


def precisions(args: argparse.Namespace, models: list[str]) -> list[dict[str, Any]]:
    """Part 3: the transformers at each precision, through mlms's own evaluation (``--hw
    cpu`` smoke-tests it off the GPU, inputs in host memory)."""
    store = default_store()
    rows = []
    for model in models:
        for precision in args.precisions.split(","):
            request = EvaluationRequest(
                model=model,
                framework="torch",
                hw=args.hw,
                batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
                iterations=args.iterations,
                warmup=min(10, args.iterations),
                min_seconds=1.0 if args.hw != "cpu" else 0.0,
                seq_len=args.seq_len,
                precision=precision,
                input_on_device=args.hw != "cpu",
                generate=args.new_tokens
                if get_model(model).outputs[0].type == "next_token"
                else None,
            )
            rows += _record_row(evaluate(request, store=store))
    base = {(r["model"], r["batch_size"]): r["p50_ms"] for r in rows if r["precision"] == "fp32"}
    for row in rows:
        fp32 = base.get((row["model"], row["batch_size"]))
        row["speedup_vs_fp32"] = fp32 / row["p50_ms"] if fp32 else None
    return rows


def pinned_record(model: str, batch_size: int) -> list[dict[str, Any]]:
    """The record of the default pipeline (pinned copy each iteration): its copy's GB/s."""
    request = EvaluationRequest(
        model=model, framework="torch", hw="gpu", batch_sizes=[batch_size], iterations=50
    )
    return _record_row(evaluate(request, store=default_store()))


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    cells = [[cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--precisions", default="fp32,tf32,fp16,bf16")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--hw", default="gpu")
    parser.add_argument("--parts", default="harness,pinned,transformers")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    results: dict[str, Any] = {}
    if "harness" in parts:
        row = harness_vs_bare("resnet50", 64, args.rounds, args.block)
        results["harness"] = row
        print("1-2. resnet50 bs64 fp32, input on device: mlms vs bare loop (CUDA events)")
        columns = ["mlms_p50_ms", "bare_cuda_events_p50_ms", "ratio", "pinned_gb_per_s"]
        print(_table([row], [*columns, "pageable_gb_per_s"]))
        print(f"targets: ratio <= 1.02 ({row['ratio']:.3f}); pinned copy >= 20 GB/s")
    if "pinned" in parts:
        rows = pinned_record("resnet50", 64)
        results["pinned_record"] = rows
        print("\nresnet50 bs64 fp32, default pipeline (pinned copy each iteration), its record")
        print(_table(rows, ["model", "batch_size", "p50_ms", "copy_gb_per_s", "input"]))
    if "transformers" in parts:
        rows = precisions(args, ["bert_base", "gpt2_small"])
        results["transformers"] = rows
        print(f"\n3. transformers on {args.hw}, seq-len {args.seq_len}")
        columns = ["model", "precision", "batch_size", "p50_ms", "speedup_vs_fp32", "throughput"]
        print(_table(rows, [*columns, "ttft_ms", "tpot_ms", "tokens_per_s"]))
    (args.out / "transformers_gpu.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
