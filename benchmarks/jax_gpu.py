"""JAX (Keras 3 on XLA) as mlms runs it, against a bare ``jax.jit`` loop, and its layer spans.

One process, Keras on the JAX backend, strict fp32 (JAX's "highest" matmul precision):

1. model level: one predictor (the model as mlms loads it, inputs on the device on a GPU), then
   rounds that alternate a block of mlms's measured loop (tracer at the MODEL level) with a block
   of the bare loop (the same Keras model's stateless call under ``jax.jit``, called on the
   device batch and waited for with ``block_until_ready``). Target: p50 ratio <= 1.02.
2. layer level: the predictor's layer capture (JAX's profiler; XLA's kernels joined to the
   compiled HLO's op_name metadata, ``mlms.tracer.hlo_join``) around a block of predicts: how
   much of each predict's kernel time lands on a layer (target: within 5 %), kernels and spans
   per predict, fused spans, how kernels were joined, GPU time per layer type, and kernels
   whose names say TF32 (strict fp32 wants none).

    KERAS_BACKEND=jax python benchmarks/jax_gpu.py --out DIR [--device cuda:0] [--model resnet50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

os.environ["KERAS_BACKEND"] = "jax"  # before anything imports Keras

from mlms.assets.manager import AssetManager
from mlms.catalog.resolve import resolve_model
from mlms.config import mlms_home
from mlms.evaluation.feed import Feed
from mlms.evaluation.inputs import open_inputs
from mlms.evaluation.measure import measure_loop
from mlms.evaluation.record import EvaluationRequest
from mlms.predictors.base import PredictorOptions
from mlms.predictors.jax_predictor import JaxPredictor
from mlms.store.factory import default_store
from mlms.tracer.hlo_join import UNATTRIBUTED
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--layer-predicts", type=int, default=10)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    results: dict[str, object] = {"model": args.model, "batch_size": args.batch_size}

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    store = default_store()
    manifest = resolve_model(args.model, store)
    began = time.perf_counter()
    asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, "jax")
    results["asset_s"] = round(time.perf_counter() - began, 1)
    began = time.perf_counter()
    predictor = JaxPredictor(manifest, asset.path, PredictorOptions(device=args.device))
    results["load_s"] = round(time.perf_counter() - began, 1)
    import jax

    on_device = args.device.startswith("cuda")
    source = open_inputs(manifest, ["synthetic"], seed=0)
    feed = Feed(predictor, source, args.batch_size, on_device=on_device)
    batch = predictor.stage(source.take(0, args.batch_size).tensor)[0]
    model = predictor.model

    def forward(trainable, fixed, x):
        return model.stateless_call(trainable, fixed, x, training=False)[0]

    bare = jax.jit(forward)
    trainable, fixed = predictor._trainable, predictor._fixed
    began = time.perf_counter()
    predictor.predict(batch)  # compiles this shape (timed in the settings)
    bare(trainable, fixed, batch).block_until_ready()
    results["first_calls_s"] = round(time.perf_counter() - began, 1)
    results["settings"] = predictor.settings()
    say(
        f"{args.model} batch {args.batch_size} on {predictor.device} ({jax.devices()[0]}), "
        f"jax {jax.__version__}, precision {jax.config.jax_default_matmul_precision}; asset "
        f"{results['asset_s']} s, load {results['load_s']} s, jit compile "
        f"{next(iter(predictor.compile_seconds.values()))} s"
    )
    request = EvaluationRequest(model=args.model, iterations=args.block, min_seconds=0.0)
    tracer = Tracer(TraceLevel.MODEL)
    for _ in range(3):
        predictor.predict(batch)
        bare(trainable, fixed, batch).block_until_ready()
    ours: list[int] = []
    theirs: list[int] = []
    fetched: list[int] = []
    for _ in range(args.rounds):
        with tracer.run(1, TraceLevel.MODEL):
            latencies, _ = measure_loop(
                predictor,
                feed,
                tracer,
                request,
                args.batch_size,
                TraceLevel.MODEL,
                lambda _event: None,
            )
        ours += latencies
        for _ in range(args.block):
            start = time.perf_counter_ns()
            bare(trainable, fixed, batch).block_until_ready()
            theirs.append(time.perf_counter_ns() - start)
        # What mlms's predict adds to the bare call: the logits brought to the host.
        for _ in range(args.block):
            start = time.perf_counter_ns()
            np.asarray(bare(trainable, fixed, batch))
            fetched.append(time.perf_counter_ns() - start)
    tracer.shutdown()
    mine, base = statistics.median(ours) / 1e6, statistics.median(theirs) / 1e6
    host = statistics.median(fetched) / 1e6
    results.update(
        mlms_p50_ms=mine,
        bare_p50_ms=base,
        ratio=mine / base,
        bare_with_logits_to_host_p50_ms=host,
        samples=len(ours),
    )
    say(f"{'':24} {'mlms p50 ms':>12} {'bare jit p50 ms':>16} {'ratio':>7}  samples")
    samples = f"{len(ours)}+{len(theirs)}"
    say(f"{'model level':24} {mine:12.3f} {base:16.3f} {mine / base:7.3f}  {samples}")
    say(f"bare jit + logits to the host (np.asarray, as predict returns them): {host:.3f} ms")

    try:
        layer_level(predictor, batch, args.layer_predicts, results, say)
    except Exception as exc:  # the model-level numbers above still get written
        say(f"layer level failed: {exc!r}")
    predictor.close()
    (args.out / "jax_table.txt").write_text("\n".join(lines) + "\n")
    (args.out / "jax_results.json").write_text(json.dumps(results, indent=1, default=str))


def layer_level(predictor, batch, predicts: int, results: dict, say) -> None:
    """The layer capture around ``predicts`` predicts: the join's share of kernel time,
    kernels and spans per predict, GPU time per layer type, TF32 kernels."""
    predicted: list[int] = []
    with predictor.profile_layers() as capture:
        for _ in range(predicts):
            start = time.perf_counter_ns()
            predictor.predict(batch)
            predicted.append(time.perf_counter_ns() - start)
    spans = capture.events
    total = sum(s.attributes["kernel_ns"] for s in spans)
    lost = sum(s.attributes["kernel_ns"] for s in spans if s.name == UNATTRIBUTED)
    kernels = sum(s.attributes["kernels"] for s in spans)
    joined = Counter()
    by_kind: dict[str, int] = defaultdict(int)
    for span in spans:
        joined[span.attributes["joined_by"]] += span.attributes["kernels"]
        by_kind[span.kind] += span.attributes["kernel_ns"]
    per = max(predicts, 1)
    fused = sum(1 for s in spans if s.attributes["fused"]) / per
    tf32 = sum(1 for s in spans for name in s.attributes["kernel_names"] if "tf32" in name.lower())
    results.update(
        layer_predict_p50_ms=statistics.median(predicted) / 1e6,
        kernel_ms_per_predict=total / per / 1e6,
        attributed_share=(total - lost) / total if total else None,
        kernels_per_predict=kernels / per,
        spans_per_predict=len(spans) / per,
        fused_spans_per_predict=fused,
        joined_by=dict(joined),
        gpu_ms_per_kind={k: v / per / 1e6 for k, v in sorted(by_kind.items())},
        tf32_kernels=tf32,
    )
    share = results["attributed_share"]
    say(
        f"layer level: predict p50 {results['layer_predict_p50_ms']:.3f} ms; kernel time "
        f"{results['kernel_ms_per_predict']:.3f} ms a predict, "
        f"{'n/a' if share is None else f'{share * 100:.2f} %'} of it on layers "
        f"(target >= 95 %); {kernels / per:.0f} kernels and {len(spans) / per:.0f} spans a "
        f"predict ({fused:.0f} fused); joined by {dict(joined)}"
    )
    say(
        "GPU time per layer type (ms a predict): "
        + ", ".join(
            f"{k} {v / per / 1e6:.3f}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
        )
    )
    say(f"kernels whose names say TF32 (strict fp32: 0): {tf32}")
    by_span: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for span in spans:
        by_span[span.name][0] += span.attributes["kernel_ns"]
        by_span[span.name][1] += span.attributes["kernels"]
    top = sorted(by_span.items(), key=lambda kv: -kv[1][0])[:8]
    results["top_spans"] = [(name, ns / per / 1e6, n / per) for name, (ns, n) in top]
    say(
        "most GPU time (ms a predict, kernels): "
        + "; ".join(f"{name} {ns / per / 1e6:.3f} ({n / per:.0f})" for name, (ns, n) in top)
    )


if __name__ == "__main__":
    sys.exit(main())
