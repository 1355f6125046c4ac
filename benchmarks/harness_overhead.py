"""mlms's model-level latency against a bare framework loop, same process, interleaved.

For each framework: one predictor (the model as mlms loads it), then rounds that alternate a
block of mlms's measured loop (tracer at the MODEL level: pipeline and model spans on) with a
block of the bare loop (the framework called directly on a prepared tensor). The ratio of the
medians is the harness's cost. Target: <= 1.02.

    .venv/bin/python benchmarks/harness_overhead.py [--model resnet50] [--rounds 8] [--block 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.evaluation.feed import Feed
from mlms.evaluation.inputs import open_inputs
from mlms.evaluation.measure import measure_loop
from mlms.evaluation.record import EvaluationRequest
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.store.factory import default_store
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer


def bare_call(predictor, batch):
    """The framework's own call on an already prepared input, nothing of mlms around it."""
    if predictor.framework == "torch":
        import torch

        tensor = torch.from_numpy(batch)
        module = predictor.module

        def call():
            with torch.inference_mode():
                module(tensor)

        return call
    session, feed = predictor.session, {predictor.input_name: batch}
    return lambda: session.run(None, feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--frameworks", default="torch,onnxruntime")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=5)
    args = parser.parse_args()
    manifest = get_model(args.model)
    assets = AssetManager(default_store(), mlms_home() / "cache")
    request = EvaluationRequest(model=args.model, iterations=args.block, min_seconds=0.0)
    print(f"{'framework':12} {'mlms p50 ms':>12} {'bare p50 ms':>12} {'ratio':>7}  samples")
    for framework in args.frameworks.split(","):
        asset = assets.ensure(manifest, framework)
        predictor = predictor_class(framework)(manifest, asset.path, PredictorOptions())
        source = open_inputs(manifest, ["synthetic"], seed=0)
        feed = Feed(predictor, source, args.batch_size, on_device=False)
        batch = source.take(0, args.batch_size).tensor
        call = bare_call(predictor, batch)
        tracer = Tracer(TraceLevel.MODEL)
        for _ in range(3):  # warm-up, uncounted
            call()
            predictor.predict(batch)
        ours: list[int] = []
        bare: list[int] = []
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
                call()
                bare.append(time.perf_counter_ns() - start)
        tracer.shutdown()
        mine, theirs = statistics.median(ours) / 1e6, statistics.median(bare) / 1e6
        print(
            f"{framework:12} {mine:12.2f} {theirs:12.2f} {mine / theirs:7.3f}  "
            f"{len(ours)}+{len(bare)}"
        )
        predictor.close()


if __name__ == "__main__":
    main()
