"""The zoo's transformers on a GPU with the GPU image's own transformers (5.17 there), as the
GPU run kit's plan (``benchmarks/gpu_kit.py``): one ``mlms sweep`` of six models of four
families at batch 1 and 16, torch, model level, which must complete every cell.

    python3 benchmarks/gpu_kit.py run transformers_sweep $OUT      # on a lent GPU
    .venv/bin/python benchmarks/gpu_kit.py run transformers_sweep OUT --dry
"""

from __future__ import annotations

from benchmarks.gpu_kit import Cell, Kit

RESULTS = "transformers_sweep_gpu"
WHEELS = ("grpc", "analysis")
MODELS = "bert_base,distilbert_base,roberta_base,albert_base,gpt2_small,llama_mini"


def cells(kit: Kit) -> list[Cell]:
    small = ("-b", "1", "-n", "2", "--warmup", "1") if kit.dry else ("-b", "1,16", "-n", "10")
    sweep = ("{python}", "-m", "mlms", "sweep", "-m", MODELS, "-f", "torch", "--hw", kit.hw,
             "--min-seconds", "0.2", *small)  # fmt: skip
    return [Cell("sweep", sweep, timeout_s=400, min_s=60)]
