"""XSP's characterization of the zoo on one GPU, as the GPU run kit's plan
(``benchmarks/gpu_kit.py``): every zoo model with torch at batch 1, 16 and 64 in strict fp32 and
bf16 (model level), a framework-level pass at batch 16 for the layers' shares, the hardware level
for one model per task, and jax where a model has it.

    .venv/bin/python benchmarks/gpu_kit.py run zoo_sweep OUT --dry     # three small models here
    python3 benchmarks/gpu_kit.py run zoo_sweep $OUT                  # on the GPU; again resumes
    .venv/bin/python benchmarks/gpu_kit.py summary zoo_sweep

The ``assets`` cell starts background builders of the models' seeded weights on the machine's
cores and returns at once: the sweep cells that follow measure while they build (the store's
lock makes a sweep wait for a model being built rather than build it twice). The models come in
``benchmarks/zoo_sweep_order.py``'s order (one of each task and family first, the largest last),
in chunks of ``CHUNK``, one sweep cell each, so that a budget cuts between chunks and the next
call resumes with the chunk it cut. Strict fp32 is mlms's ``fp32`` (TF32 off); ``tf32`` is its
own precision.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_kit import ROOT, Cell, Kit

RESULTS = "zoo_sweep_gpu"
WHEELS = ("cupti", "grpc", "site", "keras", "tls")  # CUPTI: hardware level; jax: Keras, TLS
CHUNK = 10
DRY_MODELS = ("digits_cnn", "squeezenet1_1", "distilbert_base")
#: One model per task, traced to the hardware level (CUPTI): the layer/kernel joins per task.
BY_TASK = ("resnet50", "ssdlite320_mobilenet_v3", "deeplabv3_resnet50", "bert_base", "gpt2_small")


def _order(kit: Kit) -> list[str]:
    if kit.dry:
        return list(DRY_MODELS)
    from benchmarks.zoo_sweep_order import sweep_order

    return sweep_order()


def _with_jax(models: list[str]) -> list[str]:
    from mlms.catalog.zoo import get_model

    return [name for name in models if "jax" in get_model(name).framework_names]


def _evals(models: list[str], *options: str) -> tuple[str, ...]:
    """One ``mlms eval`` a model, in one shell: a failing model leaves the others running."""
    loop = f'for m in {" ".join(models)}; do "$0" -m mlms eval --model "$m" "$@"; done'
    return ("bash", "-c", loop, "{python}", *options)


def _sweep(models: list[str], *options: str) -> tuple[str, ...]:
    return ("{python}", "-m", "mlms", "sweep", "-m", ",".join(models), *options)


def cells(kit: Kit) -> list[Cell]:
    models = _order(kit)
    if kit.dry:
        small, batches, b16 = ("-n", "2", "--warmup", "1", "--min-seconds", "0"), "1,2", "2"
    else:
        small, batches, b16 = ("-n", "10", "--warmup", "3", "--min-seconds", "0.2"), "1,16,64", "16"
    torch = ("-f", "torch", "--hw", kit.hw, *small)
    builders = ("{python}", "benchmarks/plans/zoo_sweep.py", "--build", ",".join(models),
                "--workers", "1" if kit.dry else "8")  # fmt: skip
    chunks = [models[i : i + CHUNK] for i in range(0, len(models), CHUNK)]
    by_task = list(DRY_MODELS[:2] if kit.dry else BY_TASK)
    jax = _with_jax(models)
    plan = [Cell("assets", builders, timeout_s=60, min_s=10)]
    plan += [
        Cell(f"sweep_{n:02d}", _sweep(chunk, *torch, "-b", batches, "--precisions", "fp32,bf16"))
        for n, chunk in enumerate(chunks)
    ]
    plan.append(Cell("framework_b16", _evals(models, *torch, "-b", b16, "-t", "framework")))
    hardware = "model" if kit.dry else "hardware"  # no CUPTI on the CPU
    plan.append(Cell("hardware_by_task", _evals(by_task, *torch, "-b", batches, "-t", hardware)))
    if jax:
        plan.append(Cell("jax", _sweep(jax, "-f", "jax", "--hw", kit.hw, "-b", batches, *small)))
    return plan


def summarize(results: Path) -> str:
    """Each sweep cell's outcome and the sweeps' cells by state."""
    lines = ["| cell | status | wall (s) |", "|---|---|---:|"]
    for marker in sorted((results / "cells").glob("*/cell.json")):
        outcome = json.loads(marker.read_text())
        lines.append(f"| {outcome['cell']} | {outcome['status']} | {outcome['wall_s']} |")
    states: dict[str, int] = {}
    for sweep in sorted((results / "store" / "sweeps").glob("*.json")):
        for cell in json.loads(sweep.read_text())["cells"]:
            states[cell["state"]] = states.get(cell["state"], 0) + 1
    lines.append("")
    lines.append("sweep cells: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    return "\n".join(lines) + "\n"


def _build(models: list[str], workers: int) -> None:
    """Start ``workers`` detached ``mlms assets`` builders, model i on worker i % workers, and
    return: they outlive this cell and build while the sweep cells measure."""
    for worker in range(workers):
        mine = [m for i, m in enumerate(models) if i % workers == worker]
        if not mine:
            continue
        args = [arg for model in mine for arg in ("-m", model)]
        subprocess.Popen(
            [sys.executable, "-m", "mlms", "assets", "-f", "torch", *args],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env=None,
        )  # fmt: skip
    print(f"building {len(models)} models' assets on {workers} workers in the background")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="start the assets' builders")
    parser.add_argument("--build", required=True)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    _build(args.build.split(","), args.workers)
