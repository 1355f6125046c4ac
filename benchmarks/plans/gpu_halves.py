"""The GPU halves of advise, torch against JAX, the hardware level's cost and energy, as the GPU
run kit's plan (``benchmarks/gpu_kit.py``):

- ``advise_resnet50`` (latency objective) and ``advise_bert_base`` (throughput objective):
  ``mlms advise`` against an exhaustive sweep of the same space on the same GPU
  (``benchmarks/advise_check.py``): the recommendation within 5 % of the sweep's best, at
  <= 30 % of its time;
- ``compare_jax``: ``mlms compare --frameworks torch,jax`` at batch 1, 16 and 64, inputs on the
  device, strict fp32 (the table, and the chart in the cell's compare.png); ``jax_bare``: mlms
  on jax against a bare ``jax.jit`` loop and the layer join (``benchmarks/jax_gpu.py``);
- ``hardware_cost_1`` and ``hardware_cost_2``: the hardware level (mlms's layers and CUPTI)
  against torch.profiler CPU+CUDA on resnet50 at batch 1, 16 and 64, interleaved in one process
  (``benchmarks/layer_capture_overhead.py``), twice: two calls that agree within 5 % say the
  rounds are enough; target slowdown <= 1.10 at 16 and 64 and <= torch.profiler's at 1;
  ``hardware_parts``: where that cost comes from at batch 1 and 16, CUPTI's API records apart
  from its kernels' records, each alone and beside the layers, and the hardware level with a
  0.1 ms thread switch interval (CUPTI's thread waiting for the GIL) and with the garbage
  collector paused;
- ``energy_b1``: p50 with and without energy collection at batch 1, 12 rounds of >= 10 s
  windows (``benchmarks/energy_check.py``): within 1 %.

    .venv/bin/python benchmarks/gpu_kit.py run gpu_halves OUT --dry   # digits_cnn, small
    python3 benchmarks/gpu_kit.py run gpu_halves $OUT                # on the GPU; resumes
    .venv/bin/python benchmarks/gpu_kit.py summary gpu_halves

Its wheels (35 MiB packed; ``compare_jax`` alone needs DuckDB, the ``analysis`` group) and the
working tree are more than one call carries: ``gpu_kit.py check gpu_halves`` names the results
folders to leave out of the checkout for the call (benchmarks/results/zoo_sweep_gpu is enough).

Each cell prints its table and keeps it as table.txt in its folder; ``summary`` prints them per
part, and the hardware level's slowdowns of both calls side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu_kit import Cell, Kit

RESULTS = "gpu_halves"
#: CUPTI for the hardware level; gRPC and TLS for the child agent jax runs in; Keras for jax's
#: models.
WHEELS = ("cupti", "grpc", "tls", "keras", "analysis")
BATCHES = "1,16,64"
PARTS = {
    "advise": "mlms advise against an exhaustive sweep",
    "compare": "torch against jax",
    "jax": "mlms on jax against a bare jax.jit loop",
    "hardware": "the hardware level's cost against torch.profiler",
    "energy": "energy collection's cost at batch 1",
}


def _tabled(*argv: str) -> tuple[str, ...]:
    """``argv`` with its output (the table) kept in the cell's table.txt as well."""
    script = 'set -o pipefail; "$@" | tee "$KIT_CELL_OUT/table.txt"'
    return ("bash", "-c", script, "bash", *argv)


def _advise(model: str, objective: str, kit: Kit) -> tuple[str, ...]:
    """advise_check.py on ``model``: the latency objective runs batch size 1, the throughput
    one chooses among the batch sizes given."""
    script = ("{python}", "benchmarks/advise_check.py", "--models", model, "--out", "{out}",
              "--objective", objective, "--frameworks", "torch", "--compile", "none")  # fmt: skip
    if kit.dry:
        batches = "1" if objective == "latency" else "1,4"
        return _tabled(*script, "--hw", "cpu", "--precisions", "fp32,bf16", "--threads", "2",
                       "--batch-sizes", batches, "--iterations", "3", "--min-seconds", "0.05",
                       "--probe-iterations", "3", "--probe-min-seconds", "0.02", "--verify", "2",
                       "--budget-minutes", "1")  # fmt: skip
    batches = "1" if objective == "latency" else "16,64,128"
    return _tabled(*script, "--hw", kit.hw, "--precisions", "fp32,fp16,bf16",
                   "--batch-sizes", batches, "--iterations", "20", "--min-seconds", "0.5",
                   "--probe-iterations", "5", "--probe-min-seconds", "0.1", "--verify", "2",
                   "--budget-minutes", "2")  # fmt: skip


def cells(kit: Kit) -> list[Cell]:
    if kit.dry:
        image, text, device, batches = "digits_cnn", "digits_cnn", "cpu", "1,4"
        compare = ("--iterations", "5", "--min-seconds", "0")
        jax = ("--device", "cpu", "--batch-size", "4", "--rounds", "2", "--block", "5",
               "--layer-predicts", "3")  # fmt: skip
        cost = ("--device", "cpu", "--batch-sizes", "1,4", "--rounds", "2", "--block", "3",
                "--only", "mlms layers")  # fmt: skip
        parts = ("--device", "cpu", "--batch-sizes", "1", "--rounds", "2", "--block", "3")
        energy = ("--hw", "cpu", "--smoke", "--rounds", "2", "--min-seconds", "0.2")
    else:
        image, text, device, batches = "resnet50", "bert_base", "cuda:0", BATCHES
        compare = ("--input-on-device", "--iterations", "30", "--min-seconds", "1")
        jax = ("--device", "cuda:0", "--batch-size", "64", "--rounds", "6", "--block", "20",
               "--layer-predicts", "10")  # fmt: skip
        # 12 rounds of 60 predicts per configuration: the spread of two calls under 5 %.
        # torch.profiler's activities apart are left out: its cpu+cuda is the reference, and
        # mlms's layers and CUPTI apart say which part of the hardware level costs what.
        measured = "mlms layers,mlms cupti,mlms layers+cupti,torch.profiler cpu+cuda"
        cost = ("--device", device, "--batch-sizes", batches, "--rounds", "12", "--block", "60",
                "--only", measured)  # fmt: skip
        # Where the cost is, where it shows: CUPTI's API records apart from its kernels', each
        # alone and beside the layers, and whether a GIL handoff adds to their sum, at the
        # host-bound batch sizes.
        # Blocks of 60 as in hardware_cost: there the layers and CUPTI together cost ~0.5 of
        # plain more than apart at batch 1, in blocks of 30 ~0.1.
        parts = ("--device", device, "--batch-sizes", "1,16", "--rounds", "6", "--block", "60",
                 "--only", f"{measured},mlms cupti api,mlms layers+cupti api,"
                 "mlms layers+cupti 0.1ms,mlms layers+cupti nogc")  # fmt: skip
        energy = ("--hw", kit.hw, "--configs", "resnet50:fp32:1", "--rounds", "12",
                  "--min-seconds", "10")  # fmt: skip
    plan = [
        Cell("advise_resnet50", _advise(image, "latency", kit), timeout_s=590),
        Cell("advise_bert_base", _advise(text, "throughput", kit), timeout_s=590),
        Cell("compare_jax", _tabled(
            "{python}", "-m", "mlms", "compare", "--model", image, "--frameworks", "torch,jax",
            "--hw", kit.hw, "--batch-size", batches, "-t", "framework", "--precision", "fp32",
            *compare, "--plot", "{out}/compare.png"), timeout_s=590),
        Cell("jax_bare", _tabled("{python}", "benchmarks/jax_gpu.py", "--out", "{out}",
                                 "--model", image, *jax), timeout_s=300),
    ]  # fmt: skip
    for call in (1, 2):
        overhead = ("{python}", "benchmarks/layer_capture_overhead.py", "--model", image, *cost,
                    "--json", "{out}/overhead.json")  # fmt: skip
        plan.append(Cell(f"hardware_cost_{call}", _tabled(*overhead), timeout_s=590))
    parted = ("{python}", "benchmarks/layer_capture_overhead.py", "--model", image, *parts,
              "--json", "{out}/overhead.json")  # fmt: skip
    plan.append(Cell("hardware_parts", _tabled(*parted), timeout_s=300))
    energy_check = ("{python}", "benchmarks/energy_check.py", "--out", "{out}", *energy)
    plan.append(Cell("energy_b1", _tabled(*energy_check), timeout_s=590))
    return plan


def summarize(results: Path) -> str:
    """Each part's tables as its cells printed them, then the hardware level's slowdown per
    batch size in both calls beside torch.profiler's, and how far the two calls agree."""
    cells = results / "cells"
    lines = []
    for part, title in PARTS.items():
        lines += [f"## {title}", ""]
        for folder in sorted(cells.glob(f"{_prefix(part)}*")):
            outcome = json.loads((folder / "cell.json").read_text())
            table = folder / "table.txt"
            lines.append(f"### {folder.name}: {outcome['status']} in {outcome['wall_s']} s")
            lines += ["", "```", table.read_text().rstrip() if table.is_file() else "", "```", ""]
    lines += _hardware_cost(cells)
    lines += _hardware_parts(cells)
    return "\n".join(lines) + "\n"


def _prefix(part: str) -> str:
    return {"compare": "compare_jax", "jax": "jax_bare", "hardware": "hardware_",
            "energy": "energy"}.get(part, part)  # fmt: skip


def _hardware_cost(cells: Path) -> list[str]:
    """Per batch size: each call's slowdown of the hardware level (mlms layers+cupti) and of
    torch.profiler CPU+CUDA, and the calls' agreement (the larger over the smaller)."""
    calls = [
        json.loads(path.read_text()) for path in sorted(cells.glob("hardware_cost_*/overhead.json"))
    ]
    if not calls:
        return ["hardware level's cost: no call measured it yet"]
    labels = ("mlms layers+cupti", "torch.profiler cpu+cuda")
    header = ["batch"] + [f"{label} #{n}" for label in labels for n in range(1, len(calls) + 1)]
    out = ["| " + " | ".join([*header, "calls agree (x)"]) + " |", "|" + "---|" * (len(header) + 1)]
    for batch in calls[0]:
        row = [batch]
        for label in labels:
            row += [_slowdown(call, batch, label) for call in calls]
        found = [call.get(batch, {}).get(labels[0]) for call in calls]
        hardware = [f["slowdown"] for f in found if f]
        agree = max(hardware) / min(hardware) if len(hardware) > 1 else float("nan")
        out.append("| " + " | ".join([*row, f"{agree:.3f}"]) + " |")
    return ["hardware level's slowdown over plain predicts (p50):", "", *out, ""]


#: hardware_parts' columns: (heading, configuration).
PARTS_SHOWN = (
    ("layers", "mlms layers"),
    ("cupti", "mlms cupti"),
    ("layers+cupti", "mlms layers+cupti"),
    ("cupti api", "mlms cupti api"),
    ("layers+cupti api", "mlms layers+cupti api"),
    ("layers+cupti, 0.1 ms switch", "mlms layers+cupti 0.1ms"),
    ("layers+cupti, no gc", "mlms layers+cupti nogc"),
)


def _hardware_parts(cells: Path) -> list[str]:
    """Per call of the hardware level's cells and batch size: what each part of the hardware
    level costs (its slowdown over plain, less 1), and how much more the layers and CUPTI cost
    together than apart (together - (layers + cupti)): above 0, something they do to each
    other costs."""
    out = []
    for path in sorted(cells.glob("hardware_*/overhead.json")):
        rows = json.loads(path.read_text())
        heading = ["batch", *(h for h, _ in PARTS_SHOWN), "together - apart", "callbacks"]
        out += [
            f"{path.parent.name}: the hardware level's parts (slowdown over plain, less 1):",
            "",
        ]
        out += ["| " + " | ".join(heading) + " |", "|" + "---|" * len(heading)]
        for batch, measured in rows.items():
            cost = {h: measured[c]["slowdown"] - 1 for h, c in PARTS_SHOWN if c in measured}
            apart = ("layers", "cupti", "layers+cupti")
            excess = (
                f"{cost['layers+cupti'] - cost['layers'] - cost['cupti']:+.3f}"
                if all(h in cost for h in apart)
                else "-"
            )
            callbacks = measured.get("mlms layers+cupti", {}).get("cupti_callbacks")
            parts = [f"{cost[h]:+.3f}" if h in cost else "-" for h, _ in PARTS_SHOWN]
            shown = "-" if callbacks is None else f"{callbacks:g}"
            out.append("| " + " | ".join([batch, *parts, excess, shown]) + " |")
        out.append("")
    return out


def _slowdown(call: dict, batch: str, label: str) -> str:
    found = call.get(batch, {}).get(label)
    return f"{found['slowdown']:.3f}" if found else "-"
