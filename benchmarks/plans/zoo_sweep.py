"""XSP's characterization of the zoo on one GPU, as the GPU run kit's plan
(``benchmarks/gpu_kit.py``): every zoo model with torch at batch 1, 16 and 64 in strict fp32 and
bf16 (model level), strict fp32 against TF32 and cuDNN's autotuning for the outliers, a
framework-level pass at batch 16 for the layers' shares, the hardware level for one model per
task, and jax where a model has it.

    .venv/bin/python benchmarks/gpu_kit.py run zoo_sweep OUT --dry     # small models here
    python3 benchmarks/gpu_kit.py run zoo_sweep $OUT                  # on the GPU; again resumes
    .venv/bin/python benchmarks/gpu_kit.py summary zoo_sweep
    .venv/bin/python benchmarks/zoo_findings.py benchmarks/results/zoo_sweep_gpu   # the tables

The ``assets`` cell builds the models' seeded weights on all the machine's cores and returns
when they are built: a launch-bound model's latency is the host's, and with six builders
running beside the first sweep cell resnet50 took 6.11 ms at batch 1 on an H200 against 3.74 ms
on a quiet host in an earlier call (20.6 against 20.5 ms at batch 64, where the GPU sets the
pace; ``benchmarks/RESULTS.md``). Should
the cell be cut, a sweep builds what is missing itself (the store's lock makes it wait for a
model being built rather than build it twice). The models come in
``benchmarks/zoo_sweep_order.py``'s order (one of each task and family first, the largest last),
in chunks of ``CHUNK``, one sweep cell each, so that a budget cuts between chunks and the next
call runs again the chunk it cut; a chunk is a process, which pays 11-15 s of imports (torch
and torchvision, ``benchmarks/cuda_start.py``) before its first evaluation, so the chunks are
as large as a call's budget takes two of. The detectors and segmenters of large inputs
(``_heavy``) come after the others, in cells of their own with fewer iterations. The
two-stage detectors run strict fp32 only (``NMS_INSIDE``); one bf16 evaluation of one of them
records why. The cells that are not sweeps run ``mlms eval`` per model in one process
(``benchmarks/zoo_evals.py``). Strict fp32 is mlms's ``fp32`` (TF32 off); ``tf32`` is its own
precision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu_kit import ROOT, Cell, Kit

RESULTS = "zoo_sweep_gpu"
WHEELS = ("cupti", "grpc", "keras", "tls", "analysis")  # CUPTI: hardware level; jax: Keras, TLS
#: 3 chunks for the light models (about 140-190 s each on an H200) and one for the heavy
#: models but the R-CNNs (which run strict fp32 only, a sweep of their own).
CHUNK = 24
HEAVY_CHUNK = 10
JAX_CHUNK = 4
DRY_MODELS = ("digits_cnn", "squeezenet1_1", "distilbert_base")
#: A dry run's jax models: a Keras twin converted layer by layer, and a KerasHub backbone
#: (bert_base, the smaller of the zoo's two), whose build and load on JAX without TensorFlow
#: need a wheel of their own: one the GPU image lacks fails the dry run first.
DRY_JAX = ("digits_cnn", "bert_base")
#: One model per task, traced to the hardware level (CUPTI): the layer/kernel joins per task.
BY_TASK = ("resnet50", "ssdlite320_mobilenet_v3", "deeplabv3_resnet50", "bert_base", "gpt2_small",
           "t5_small")  # fmt: skip
#: Swept in cells of their own after the others, with fewer iterations: the detectors and
#: segmenters of inputs from 512 px. On an H200 in strict fp32 a predict at batch 64 took 0.73 s
#: (deeplabv3_resnet50) to 3.3 s (maskrcnn), and each iteration's host postprocess (a 520x520
#: class map per input; every proposal, as seeded weights keep them all) as long again:
#: deeplabv3's batch-64 cell of 13 iterations took 51.5 s, maskrcnn's 49.1 s.
HEAVY_TASKS = ("object_detection", "semantic_segmentation")
HEAVY_PIXELS = 512
#: The families whose models run non-maximum suppression inside (Faster and Mask R-CNN's region
#: proposals; the one-stage detectors' runs in mlms's postprocess, in float32): torchvision's
#: ``nms`` (and ``roi_align``) has float32, float64 and float16 kernels only, on the CPU and on
#: CUDA ("nms_kernel" not implemented for 'BFloat16'), so these run strict fp32 only; the
#: ``bf16_probe`` cell evaluates one of them in bf16, and its one-line failure is the finding.
NMS_INSIDE = ("faster_rcnn", "mask_rcnn")
BF16_PROBE = "fasterrcnn_mobilenet_v3_320_fpn"
DRY_HEAVY = ("squeezenet1_1",)
#: Each asset builder's threads; as many builders as that leaves the machine's cores for.
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


def _heavy(models: list[str]) -> list[str]:
    from mlms.catalog.zoo import get_model

    manifests = [get_model(name) for name in models]
    return [m.name for m in manifests
            if m.task in HEAVY_TASKS and max(m.inputs[0].shape) >= HEAVY_PIXELS]  # fmt: skip


def _strict_only(models: list[str]) -> list[str]:
    from mlms.catalog.zoo import get_model

    return [name for name in models if get_model(name).attributes.get("family") in NMS_INSIDE]


def _chunks(models: list[str], size: int) -> list[list[str]]:
    return [models[i : i + size] for i in range(0, len(models), size)]


def _evals(models: list[str] | tuple[str, ...], *options: str) -> tuple[str, ...]:
    """``mlms eval`` of each model in one process (``benchmarks/zoo_evals.py``)."""
    return ("{python}", "benchmarks/zoo_evals.py", ",".join(models), *options)


def _sweep(models: list[str] | tuple[str, ...], *options: str) -> tuple[str, ...]:
    return ("{python}", "-m", "mlms", "sweep", "-m", ",".join(models), *options)


def cells(kit: Kit) -> list[Cell]:
    """The light models' sweep, the outliers, the heavy models' sweep, the framework-level
    pass, the hardware level by task and jax: what the issue needs most comes first, so that a
    short budget cuts the least needed. Iterations at the model level: 5 and
    at least 0.2 s after 2 warm-ups (a model of milliseconds runs dozens), 3 after 1 for the
    heavy models and the leveled passes, which need few predicts for their shares."""
    models = _order(kit)
    if kit.dry:
        small = few = ("-n", "2", "--warmup", "1", "--min-seconds", "0")
        batches, b16, jax_batches = "1,2", "2", "1,2"
        outlier_runs, careful = DRY_OUTLIER_RUNS, (*small, "-b", "1,2")
    else:
        small = ("-n", "5", "--warmup", "2", "--min-seconds", "0.2")
        few = ("-n", "3", "--warmup", "1", "--min-seconds", "0")
        batches, b16, jax_batches = "1,16,64", "16", "1,16,64"
        outlier_runs, careful = OUTLIER_RUNS, ("-n", "10", "--warmup", "3", "-b", "1,4")
    torch = ("-f", "torch", "--hw", kit.hw)
    heavy = [m for m in models if m in DRY_HEAVY] if kit.dry else _heavy(models)
    light = [m for m in models if m not in heavy]
    workers = 1 if kit.dry else max(1, (os.cpu_count() or THREADS) // THREADS)
    builders = ("{python}", "benchmarks/plans/zoo_sweep.py", "--build", ",".join(models),
                "--workers", str(workers))  # fmt: skip
    both, fp32 = ("--precisions", "fp32,bf16"), ("--precisions", "fp32")

    def cell(
        name: str, argv: tuple[str, ...], timeout_s: float, min_s: float, **kind: bool
    ) -> Cell:
        # A dry run's cells are small: each runs whatever is left of the budget.
        return Cell(name, argv, timeout_s=timeout_s, min_s=10 if kit.dry else min_s, **kind)

    def sweeps(name: str, chosen: list[str], options: tuple[str, ...], size: int, min_s: float):
        """Strict fp32 and bf16 for all but the two-stage detectors, strict fp32 for them."""
        detectors = _strict_only(chosen)
        others = [m for m in chosen if m not in detectors]
        chunks = [
            _sweep(chunk, *torch, *options, "-b", batches, *both) for chunk in _chunks(others, size)
        ]
        cells = [cell(f"{name}_{n:02d}", argv, 450, min_s) for n, argv in enumerate(chunks)]
        if detectors:
            argv = _sweep(detectors, *torch, *options, "-b", batches, *fp32)
            cells.append(cell(f"{name}_rcnn", argv, 450, min_s))
        return cells

    # The assets stay in the machine's store: a fresh machine builds them whatever the results
    # folder says (else the first measuring cells build them beside their measurements).
    assets = cell("assets", builders, 420, 60, alone=True, on_machine=True)
    # A chunk started with less than its time left is cut and runs again whole next call.
    plan = [assets, *sweeps("sweep", light, small, CHUNK, 200)]
    outliers = DRY_OUTLIERS if kit.dry else OUTLIERS
    for name, run in outlier_runs.items():
        plan.append(cell(f"outliers_{name}", _evals(outliers, *torch, *careful, *run), 300, 60))
    probe = _evals([BF16_PROBE], *torch, *few, "-b", "1", "--precision", "bf16")
    plan.append(cell("bf16_probe", probe, 120, 20))
    plan += sweeps("sweep_heavy", heavy, few, HEAVY_CHUNK, 200)
    layers = (*torch, *few, "-b", b16, "-t", "framework")
    plan.append(cell("framework_b16", _evals(light, *layers), 500, 150))
    by_task = list(DRY_MODELS[:2] if kit.dry else BY_TASK)
    hardware = "model" if kit.dry else "hardware"  # no CUPTI on the CPU
    kernels = _evals(by_task, *torch, *few, "-b", batches, "-t", hardware)
    plan.append(cell("hardware_by_task", kernels, 400, 90))
    plan.append(cell("framework_b16_heavy", _evals(heavy, *layers), 400, 120))
    jax = ("-f", "jax", "--hw", kit.hw, "-b", jax_batches, *small)
    # A jit compile a model and batch size (6 s for resnet50 at 64 on an H200): small chunks,
    # of the models the results folder lacks, each named for its first model.
    jax_models = list(DRY_JAX) if kit.dry else _with_jax(models)
    done = _swept(kit.results, "jax", kit.hw, jax_batches)
    for chunk in _chunks([m for m in jax_models if m not in done], JAX_CHUNK):
        plan.append(cell(f"jax_{chunk[0]}", _sweep(chunk, *jax), 400, 90))
    return plan


def _swept(results: Path | None, framework: str, hw: str, batches: str) -> set[str]:
    """The models with a completed cell of ``framework`` on ``hw`` at every batch size of
    ``batches`` in the results folder's sweeps: a chunk cut after some of its models is run
    again for the others only."""
    from mlms.evaluation.sweep import load_sweep
    from mlms.store.local import LocalStore

    sweeps = results / "store" / "sweeps" if results is not None else None
    if sweeps is None or not sweeps.is_dir():
        return set()
    store = LocalStore(sweeps.parent)
    sizes: dict[str, set[int]] = {}
    for path in sweeps.glob("*.json"):
        for cell in load_sweep(store, path.stem).cells:
            if (cell.framework, cell.hw, cell.state) == (framework, hw, "completed"):
                sizes.setdefault(cell.model, set()).add(cell.batch_size)
    wanted = {int(size) for size in batches.split(",")}
    return {model for model, done in sizes.items() if wanted <= done}


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


def _build(models: list[str], workers: int) -> int:
    """Build the models' assets with ``workers`` ``mlms assets`` processes at once, model i on
    worker i % workers, and wait for them all: the measuring cells then have the host to
    themselves. The builders stay in this cell's process group, so a cut cell stops them."""
    began = time.monotonic()
    running = []
    for worker in range(workers):
        mine = [m for i, m in enumerate(models) if i % workers == worker]
        if mine:
            args = [arg for model in mine for arg in ("-m", model)]
            running.append(subprocess.Popen(
                [sys.executable, "-m", "mlms", "assets", "-f", "torch", *args],
                cwd=ROOT, env=os.environ | {"OMP_NUM_THREADS": str(THREADS)},
            ))  # fmt: skip
    failed = sum(1 for process in running if process.wait() != 0)
    print(f"built {len(models)} models' assets on {len(running)} workers of {THREADS} threads "
          f"in {time.monotonic() - began:.1f} s; {failed} workers failed")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="build the models' assets")
    parser.add_argument("--build", required=True)
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    sys.exit(_build(args.build.split(","), args.workers))
