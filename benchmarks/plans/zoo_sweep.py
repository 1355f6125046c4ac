"""XSP's characterization of the zoo on one GPU, as the GPU run kit's plan
(``benchmarks/gpu_kit.py``): every zoo model with torch at batch 1, 16 and 64 in strict fp32 and
bf16 (model level), strict fp32 against TF32 and cuDNN's autotuning for the outliers, a
framework-level pass at batch 16 for the layers' shares, the hardware level for one model per
task, and jax where a model has it.

    .venv/bin/python benchmarks/gpu_kit.py run zoo_sweep OUT --dry     # three small models here
    python3 benchmarks/gpu_kit.py run zoo_sweep $OUT                  # on the GPU; again resumes
    .venv/bin/python benchmarks/gpu_kit.py summary zoo_sweep
    .venv/bin/python benchmarks/zoo_findings.py benchmarks/results/zoo_sweep_gpu   # the tables

The ``assets`` cell starts background builders of the models' seeded weights on the machine's
cores and returns at once: the sweep cells that follow measure while they build (the store's
lock makes a sweep wait for a model being built rather than build it twice). The models come in
``benchmarks/zoo_sweep_order.py``'s order (one of each task and family first, the largest last),
in chunks of ``CHUNK``, one sweep cell each, so that a budget cuts between chunks and the next
call resumes with the chunk it cut; the two-stage detectors (``HEAVY``) are one cell of their
own. The cells that are not sweeps run ``mlms eval`` per model in one process
(``benchmarks/zoo_evals.py``). Strict fp32 is mlms's ``fp32`` (TF32 off); ``tf32`` is its own
precision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_kit import ROOT, Cell, Kit

RESULTS = "zoo_sweep_gpu"
WHEELS = ("cupti", "grpc", "site", "keras", "tls")  # CUPTI: hardware level; jax: Keras, TLS
CHUNK = 10
DRY_MODELS = ("digits_cnn", "squeezenet1_1", "distilbert_base")
#: One model per task, traced to the hardware level (CUPTI): the layer/kernel joins per task.
BY_TASK = ("resnet50", "ssdlite320_mobilenet_v3", "deeplabv3_resnet50", "bert_base", "gpt2_small",
           "t5_small")  # fmt: skip
#: Swept in a cell of their own after the others: on an H200 in strict fp32 each takes 0.7 s a
#: predict at batch 16 and about 3 s at 64 (seeded weights keep every proposal), minutes
#: together, which a call should start only with that much of its budget left.
HEAVY = ("fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "maskrcnn_resnet50_fpn",
         "maskrcnn_resnet50_fpn_v2", "fasterrcnn_mobilenet_v3_fpn",
         "fasterrcnn_mobilenet_v3_320_fpn")  # fmt: skip
DRY_HEAVY = ("squeezenet1_1",)
#: Each background asset builder's threads: 6 builders of 2 leave 4 of a GPU machine's 16 cores
#: to the measuring process, whose kernel launches are what a small model's latency is made of.
THREADS = 2
#: Strict fp32 against TF32 and cuDNN's autotuning, at batch 1 and 4: maskrcnn's batch 4 took
#: 683 ms against 58.5 ms at 1 on an H200 (fasterrcnn's the same), and the issue names
#: retinanet and deeplabv3 beside it.
OUTLIERS = ("maskrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn",
            "deeplabv3_resnet50")  # fmt: skip
OUTLIER_RUNS = {
    "fp32": ("--precision", "fp32"),
    "tf32": ("--precision", "tf32"),
    "tf32_cudnn": ("--precision", "tf32", "--cudnn-benchmark"),
}
DRY_OUTLIERS = ("digits_cnn",)
#: The CPU has no TF32: a dry run stands fp32 in for it.
DRY_OUTLIER_RUNS = {
    "fp32": ("--precision", "fp32"),
    "fp32_cudnn": ("--precision", "fp32", "--cudnn-benchmark"),
}


def _order(kit: Kit) -> list[str]:
    if kit.dry:
        return list(DRY_MODELS)
    from benchmarks.zoo_sweep_order import sweep_order

    return sweep_order()


def _with_jax(models: list[str]) -> list[str]:
    from mlms.catalog.zoo import get_model

    return [name for name in models if "jax" in get_model(name).framework_names]


def _evals(models: list[str] | tuple[str, ...], *options: str) -> tuple[str, ...]:
    """``mlms eval`` of each model in one process (``benchmarks/zoo_evals.py``)."""
    return ("{python}", "benchmarks/zoo_evals.py", ",".join(models), *options)


def _sweep(models: list[str] | tuple[str, ...], *options: str) -> tuple[str, ...]:
    return ("{python}", "-m", "mlms", "sweep", "-m", ",".join(models), *options)


def cells(kit: Kit) -> list[Cell]:
    """The model-level sweep first (the light models in chunks, then the heavy detectors), the
    outliers, the framework-level pass, the hardware level by task and jax. Iterations: 5 and
    at least 0.2 s after 2 warm-ups, so a model of milliseconds runs dozens of predicts and one
    of seconds (a two-stage detector at batch 64) seven, not thirteen."""
    models = _order(kit)
    if kit.dry:
        small, batches, b16 = ("-n", "2", "--warmup", "1", "--min-seconds", "0"), "1,2", "2"
        outlier_runs, careful, layers_small = DRY_OUTLIER_RUNS, (*small, "-b", "1,2"), small
    else:
        small, batches, b16 = ("-n", "5", "--warmup", "2", "--min-seconds", "0.2"), "1,16,64", "16"
        outlier_runs, careful = OUTLIER_RUNS, ("-n", "10", "--warmup", "3", "-b", "1,4")
        layers_small = ("-n", "5", "--warmup", "2", "--min-seconds", "0")
    torch = ("-f", "torch", "--hw", kit.hw)
    heavy_names = DRY_HEAVY if kit.dry else HEAVY
    heavy = [m for m in models if m in heavy_names]
    light = [m for m in models if m not in heavy_names]
    builders = ("{python}", "benchmarks/plans/zoo_sweep.py", "--build", ",".join(models),
                "--workers", "1" if kit.dry else "6")  # fmt: skip
    precisions = ("--precisions", "fp32,bf16")

    def cell(name: str, argv: tuple[str, ...], timeout_s: float, min_s: float) -> Cell:
        # A dry run's cells are small: each runs whatever is left of the budget.
        return Cell(name, argv, timeout_s=timeout_s, min_s=10 if kit.dry else min_s)

    plan = [cell("assets", builders, 60, 10)]
    chunks = [light[i : i + CHUNK] for i in range(0, len(light), CHUNK)]
    sweeps = [_sweep(chunk, *torch, *small, "-b", batches, *precisions) for chunk in chunks]
    plan += [cell(f"sweep_{n:02d}", argv, 400, 60) for n, argv in enumerate(sweeps)]
    outliers = DRY_OUTLIERS if kit.dry else OUTLIERS
    plan += [
        cell(f"outliers_{name}", _evals(outliers, *torch, *careful, *run), 300, 60)
        for name, run in outlier_runs.items()
    ]
    plan.append(cell("sweep_heavy", _sweep(heavy, *torch, *small, "-b", batches, *precisions),
                     500, 240))  # fmt: skip
    framework = _evals(models, *torch, *layers_small, "-b", b16, "-t", "framework")
    plan.append(cell("framework_b16", framework, 500, 240))
    by_task = list(DRY_MODELS[:2] if kit.dry else BY_TASK)
    hardware = "model" if kit.dry else "hardware"  # no CUPTI on the CPU
    kernels = _evals(by_task, *torch, *layers_small, "-b", batches, "-t", hardware)
    plan.append(cell("hardware_by_task", kernels, 600, 90))
    jax = _with_jax(models)
    if jax:
        jax_sweep = _sweep(jax, "-f", "jax", "--hw", kit.hw, "-b", batches, *small)
        plan.append(cell("jax", jax_sweep, 600, 90))
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
            start_new_session=True, env=os.environ | {"OMP_NUM_THREADS": str(THREADS)},
        )  # fmt: skip
    print(
        f"building {len(models)} models' assets on {workers} workers of {THREADS} threads "
        "in the background"
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="start the assets' builders")
    parser.add_argument("--build", required=True)
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    _build(args.build.split(","), args.workers)
