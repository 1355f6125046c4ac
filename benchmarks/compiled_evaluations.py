"""Compiled evaluations of one model in one process, as an agent, advise or a sweep runs them:
for each, its wall time and whether Dynamo compiled a graph for it (the count of graphs it
compiled rose), or ran it from an earlier model's cache or eager. Twelve settings of
digits_cnn on the CPU: two precisions x channels-last x batch sizes 1, 4, 8, then the first
again.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/compiled_evaluations.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main() -> int:
    os.environ.setdefault("MLMS_HOME", tempfile.mkdtemp(prefix="compiled-evaluations-"))
    from torch._dynamo.utils import counters

    from mlms.client import EmbeddedClient
    from mlms.evaluation.record import EvaluationRequest

    client = EmbeddedClient()
    client.evaluate(EvaluationRequest(model="digits_cnn", iterations=1, min_seconds=0))
    settings = [(p, c, b) for b in (1, 4, 8) for p in ("fp32", "bf16") for c in (False, True)]
    print(f"{'#':>2} {'precision':9} {'layout':13} {'batch':>5} {'wall s':>7} {'p50 ms':>7} "
          f"{'graphs':>6} compiled")  # fmt: skip
    for index, (precision, channels_last, batch) in enumerate([*settings, settings[0]]):
        graphs = counters["stats"]["unique_graphs"]
        began = time.perf_counter()
        asked = EvaluationRequest(model="digits_cnn", batch_sizes=[batch], precision=precision,
                                  channels_last=channels_last, compile="default", iterations=3,
                                  warmup=1, min_seconds=0)  # fmt: skip
        record = client.evaluate(asked)
        wall = time.perf_counter() - began
        now = counters["stats"]["unique_graphs"]
        layout = "channels-last" if channels_last else "contiguous"
        compiled = "yes" if now > graphs else "NO"
        print(f"{index:2d} {precision:9} {layout:13} {batch:5d} {wall:7.2f} "
              f"{record.results[0].latency_ms.p50:7.3f} {now:6d} {compiled}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
