"""One predict under Nsight Compute: the child program of the counter run
(``mlms.tracer.ncu.collect`` runs ``python -m mlms.evaluation.counter_predict`` under ``ncu``).

It loads the model asset on the device, runs the warm-up predicts, opens the profiled range
(cudaProfilerStart/Stop) around exactly one predict of the saved batch and prints its latency
after ``MARK``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from mlms.catalog.resolve import resolve_model
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.tracer.ncu import MARK


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m mlms.evaluation.counter_predict")
    for name in ("--model", "--framework", "--asset", "--device", "--batch"):
        parser.add_argument(name, required=True)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    batch = np.load(args.batch)
    options = PredictorOptions(device=args.device)
    with predictor_class(args.framework)(resolve_model(args.model), Path(args.asset), options) as p:
        for _ in range(args.warmup):
            p.predict(batch)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        began = time.perf_counter_ns()
        p.predict(batch)
        latency = time.perf_counter_ns() - began
        torch.cuda.profiler.stop()
    print(MARK + json.dumps({"latency_ns": latency}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
