"""Benanza's lower bounds on one GPU beyond resnet50, as the GPU run kit's plan
(``benchmarks/gpu_kit.py``): ``mlms bound`` of mobilenet_v2, densenet121, bert_base and vit_b_16
(depthwise convolutions, dense blocks, attention), and resnet50 for the five-model table, at
batch 1 and 64, their convolutions and GEMMs benchmarked in strict fp32 and bf16 (the tensor
cores' what-if); then resnet50 again as a ``torch.export`` program (``.pt2``), whose layers the
perfdb holds already, so that its cell costs the measurement alone; then the five as run at
bf16 (``--model-precision bf16``: measured at bf16, their other layers benchmarked at bf16 too,
their convolutions and GEMMs found in the perfdb).

    .venv/bin/python benchmarks/gpu_kit.py run bounds OUT --dry   # digits_cnn, squeezenet, llama
    python3 benchmarks/gpu_kit.py run bounds $OUT                  # on the GPU; again resumes
    .venv/bin/python benchmarks/gpu_kit.py summary bounds

Its wheels (35 MiB packed) and the working tree are more than one call carries: ``gpu_kit.py
check bounds`` names the results folders to leave out of the checkout for the call, as many
as it takes.

The layer benchmarks go to the perfdb in the machine's store (``/tmp/mlms-kit/home``): a
configuration that repeats across models (resnet50's and densenet121's 1x1 convolutions,
bert_base's and vit_b_16's GEMMs) is benchmarked once. Each call brings the perfdb's new
objects back (``unpack`` keeps them in the results folder's store) and puts those into a fresh
machine's store (``STORE_CARRIED``), so a call that resumes after a cut, on whichever machine,
finds what the cut cell had done. Each cell prints the table of
``benchmarks/bounds_table.py`` for its model; ``summary`` prints the table across the models,
the what-ifs per model and batch size, and each model's benchmarking time (within 15 GPU
minutes for the four in all, the issue's target).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.gpu_kit import Cell, Kit

RESULTS = "bounds_gpu"
STORE_CARRIED = ("perfdb/",)
#: CUPTI for the hardware-level evaluation each bound is set against; cuDNN's frontend for the
#: engines of the best-algorithm what-if; gRPC at mlms's floor (the CLI imports the generated
#: code, which the image's grpcio is too old for).
WHEELS = ("cupti", "cudnn", "grpc", "analysis")
MODELS = ("mobilenet_v2", "densenet121", "bert_base", "vit_b_16", "resnet50")
DRY_MODELS = ("digits_cnn", "squeezenet1_1", "llama_mini")  # two CNNs, a model on ids
#: Bounded again as run at bf16 (measured there, every layer benchmarked there), after the
#: strict fp32 cells: the transformers first, where the half precision matters most.
BF16_MODELS = ("vit_b_16", "bert_base", "resnet50", "mobilenet_v2", "densenet121")
DRY_BF16_MODELS = ("digits_cnn", "llama_mini")
#: The model exported as a program: its configurations are in the perfdb by then.
PROGRAM = "resnet50"
DRY_PROGRAM = "digits_cnn"


def _bound(model: str, options: tuple[str, ...], program: bool = False) -> tuple[str, ...]:
    """``mlms bound --json`` of ``model`` into the cell's bound.json, then its table; with
    ``program``, of the model exported first as a ``.pt2`` into the machine's home (beside the
    perfdb its layers are found in). Braces doubled: the kit formats every part of a cell."""
    target = '"$MLMS_HOME/$1.pt2"' if program else '"$1"'
    first = '"$0" benchmarks/plans/bounds.py --export "$1" --to "$MLMS_HOME" && ' if program else ""
    script = (
        first + '"$0" -m mlms bound --model ' + target + ' "${{@:2}}" --json '
        '> "$KIT_CELL_OUT/bound.json" && "$0" benchmarks/bounds_table.py "$KIT_CELL_OUT/bound.json"'
    )
    return ("bash", "-c", script, "{python}", model, *options)


def cells(kit: Kit) -> list[Cell]:
    if kit.dry:
        models, program, half = DRY_MODELS, DRY_PROGRAM, DRY_BF16_MODELS
        options = ("--hw", "cpu", "-b", "1,2", "--repeats", "3", "-n", "3", "--min-seconds", "0")
    else:
        models, program, half = MODELS, PROGRAM, BF16_MODELS
        options = ("--hw", kit.hw, "-b", "1,64", "--precision", "fp32,bf16", "-n", "20",
                   "--min-seconds", "1")  # fmt: skip
    plan = [Cell(f"bound_{model}", _bound(model, options), timeout_s=590) for model in models]
    plan.append(Cell("bound_program", _bound(program, options, program=True), timeout_s=590))
    at_bf16 = (*options, "--model-precision", "bf16")
    plan += [Cell(f"bound_{model}_bf16", _bound(model, at_bf16), timeout_s=590) for model in half]
    return plan


def summarize(results: Path) -> str:
    """The five-model table (bounds against the measurement, each what-if's speed-up), the
    findings per model, and the layer benchmarks' cost."""
    from benchmarks.bounds_table import findings, rows
    from mlms.bounds.record import BoundRecord

    records = []
    lines = ["| cell | status | wall (s) |", "|---|---|---:|"]
    for marker in sorted((results / "cells").glob("*/cell.json")):
        # The folder names the cell: a cell kept beside its rerun under another name reads as
        # that name, though its cell.json says the name it ran under.
        outcome, cell = json.loads(marker.read_text()), marker.parent.name
        lines.append(f"| {cell} | {outcome['status']} | {outcome['wall_s']} |")
        found = marker.parent / "bound.json"
        if found.is_file() and found.read_text().strip():
            records.append((cell, BoundRecord.model_validate_json(found.read_text())))
    lines.append("")
    table = [row | {"cell": cell} for cell, record in records for row in rows(record)]
    lines += _markdown(table, "Bounds against the measured latency; what-ifs as speed-ups (x)")
    lines += _markdown(
        [row for _, record in records for row in findings(record)], "Benanza's findings"
    )
    cost = [
        {"cell": cell, "model": r.model, "benchmarked": r.benchmarked, "from the perfdb": r.cached,
         "bench (s)": r.bench_seconds, "device": r.device_name}
        for cell, r in records
    ]  # fmt: skip
    lines += _markdown(cost, "Layer benchmarks")
    strict = sum(r.bench_seconds for cell, r in records if cell in {f"bound_{m}" for m in MODELS})
    half = sum(r.bench_seconds for cell, r in records if cell.endswith("_bf16"))
    lines.append(f"layer benchmarks of the models at strict fp32: {strict / 60:.1f} minutes; "
                 f"of their other layers at bf16 after: {half / 60:.1f} minutes")  # fmt: skip
    return "\n".join(lines) + "\n"


def _markdown(table: list[dict[str, object]], title: str) -> list[str]:
    if not table:
        return [f"{title}: none", ""]
    columns = list(dict.fromkeys(key for row in table for key in row))
    out = [f"{title}:", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table:
        out.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return [*out, ""]


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def _export(model: str, folder: Path) -> None:
    """The zoo's ``model`` as a torch.export program with a dynamic batch axis, in
    ``folder/<model>.pt2``."""
    import torch

    from mlms.assets.architectures import architecture_of
    from mlms.catalog.zoo import get_model

    manifest = get_model(model)
    network = architecture_of(manifest).eval()
    example = torch.rand(2, *manifest.inputs[0].shape)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(network, (example,), dynamic_shapes=({0: batch},))
    # A machine's home exists once mlms has run there; this cell may be its first.
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model}.pt2"
    torch.export.save(program, path)
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB", file=sys.stdout)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="export a zoo model as a .pt2 program")
    parser.add_argument("--export", required=True)
    parser.add_argument("--to", type=Path, required=True)
    args = parser.parse_args()
    _export(args.export, args.to)
