"""Many evaluation records made from one real one, for the index's tests and benchmarks.

Each copy is the real record (``tests/data/evaluation_record.json``: digits_cnn on torch, CPU,
batch sizes 1 and 8) under a new id, with its model, framework and version, hardware,
precision, date, status and latencies varied by a seeded generator, so that every filter,
order and view has something to tell apart.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path

from mlms.evaluation.record import EvaluationRecord
from mlms.hardware import GpuInfo

RECORD = Path(__file__).parent / "data" / "evaluation_record.json"
MODELS = ["resnet50", "resnet18", "mobilenet_v2", "vgg16", "densenet121", "squeezenet1_1",
          "bert_base", "gpt2", "digits_cnn", "efficientnet_b0"]  # fmt: skip
FRAMEWORKS = {
    "torch": ["2.4.1", "2.5.1", "2.14.1"],
    "onnxruntime": ["1.18.0", "1.20.1"],
    "tensorflow": ["2.21.0"],
    "mxnet": ["1.9.1"],
}
HARDWARE = [
    ("cpu", "cpu", None),
    ("h100", "cuda:0", "NVIDIA H100 80GB HBM3"),
    ("a100", "cuda:0", "NVIDIA A100-SXM4-40GB"),
    ("v100", "cuda:0", "Tesla V100-SXM2-16GB"),
]
PRECISIONS = ["fp32", "fp32", "fp16", "bf16", "tf32"]


def real_record() -> EvaluationRecord:
    return EvaluationRecord.model_validate_json(RECORD.read_text())


def copies(
    count: int, seed: int = 0, base: EvaluationRecord | None = None
) -> list[EvaluationRecord]:
    real = base or real_record()
    rng = random.Random(seed)
    made = []
    for number in range(count):
        model = MODELS[rng.randrange(len(MODELS))]
        framework = rng.choice(list(FRAMEWORKS))
        version = rng.choice(FRAMEWORKS[framework])
        hw, device, gpu_name = HARDWARE[rng.randrange(len(HARDWARE))]
        scale = rng.uniform(0.2, 5.0)
        gpus = (
            [
                GpuInfo(
                    index=0,
                    name=gpu_name,
                    alias=hw,
                    memory_bytes=80 << 30,
                    compute_capability="9.0",
                    driver="580.95",
                )
            ]
            if gpu_name
            else []
        )
        results = [
            result.model_copy(
                update={
                    "latency_ms": result.latency_ms.model_copy(
                        update={
                            k: getattr(result.latency_ms, k) * scale
                            for k in ("p50", "p90", "p95", "p99", "mean")
                        }
                    ),
                    "throughput": result.throughput / scale,
                }
            )
            for result in real.results
        ]
        made.append(
            real.model_copy(
                update={
                    "id": uuid.UUID(int=rng.getrandbits(128), version=4).hex,
                    "created_at": real.created_at - timedelta(minutes=7 * number + rng.random()),
                    "status": "failed" if rng.random() < 0.05 else "completed",
                    "model": real.model.model_copy(update={"name": model}),
                    "framework": real.framework.model_copy(
                        update={"name": framework, "version": version}
                    ),
                    "request": real.request.model_copy(
                        update={"hw": hw, "precision": PRECISIONS[rng.randrange(len(PRECISIONS))]}
                    ),
                    "hardware": real.hardware.model_copy(update={"gpus": gpus}),
                    "device": device,
                    "results": results,
                    "agent": {
                        "address": f"10.0.0.{number % 16}:50052",
                        "agent_id": f"a{number % 16}",
                    },
                }
            )
        )
    return made
