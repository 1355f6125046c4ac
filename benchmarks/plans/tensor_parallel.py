"""Several GPUs on a lent 2-GPU host: the split tinyllama_1b (``--tensor-parallel 2``) and one agent
per GPU, as cells of the GPU run kit (``benchmarks/gpu_kit.py``).

    python3 benchmarks/gpu_kit.py run tensor_parallel $OUT          # on the host, resumable
    .venv/bin/python benchmarks/gpu_kit.py run tensor_parallel OUT --dry
    .venv/bin/python benchmarks/gpu_kit.py summary tensor_parallel  # the tables, from the cells

Cells: ``scaling`` (one GPU against two, ``--generate``), ``agents`` (a sweep through one GPU
agent against one per GPU: ``benchmarks/gpu_agents.py``), ``nccl`` (NCCL kernel time per predict
in mlms's hardware-level trace against torch.profiler's over the bare loop, and the bare loop's
Kineto traces), ``latency_0`` ... (one round each of mlms against the bare loop with the same
split, ``benchmarks/tensor_parallel_gpu.py``, so that the rounds spread over calls and the ratio
is the median of the rounds' ratios), ``scaling_compiled`` (one GPU against two, both compiled),
``agents_reserved`` (the agents' sweep again, once the server counted its choice at once),
``nccl_compiled`` (the NCCL comparison with both loops compiled) and
``latency_compiled_0`` ... (mlms against the bare loop, both compiled; the bare loop compiled its
body alone), ``latency_whole_0`` ... (two rounds each, the side going first alternating, both
loops compiling the body and the head in one region), ``predict_ab`` (mlms's predict against
the bare loop's in the same two processes, blocks interleaved:
``benchmarks/tensor_parallel_compile_ab.py``), ``graphs_exit`` and ``graphs_eval`` (CUDA graphs,
``reduce-overhead``: the same A/B, then an evaluation through the runner against the bare loop)
``predict_profile`` (both predicts under torch.profiler, what differs) and ``predict_variants_*``
(which part of mlms's load makes its predict slower).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.gpu_kit import Cell, Kit

RESULTS = "tensor_parallel_h200"
WHEELS = ("cupti", "grpc", "fleet", "analysis")
GPUS_PER_CELL = 2
MODES = ("default", "reduce-overhead")
LATENCY_ROUNDS = 2


def cells(kit: Kit) -> list[Cell]:
    dry = ("--dry",) if kit.dry else ()
    split = ("{python}", "benchmarks/tensor_parallel_gpu.py", "--out", "{out}", *dry)
    ab = ("{python}", "benchmarks/tensor_parallel_compile_ab.py", *dry)

    def batch_one(name: str, mode: str, *options: str) -> Cell:
        """An A/B cell of the compile ``mode`` at batch 1 alone."""
        argv = (*ab, "--out", "{out}", "--batch-sizes", "1", "--mode", mode, *options)
        return Cell(name, argv, 300, 150)

    variants = ("--variants", "mlms,bare,zoo_split,mlms_last")
    pinned = ("--variants", "mlms,bare,mlms_last,bare_last", "--pin-host")
    agents = ("{python}", "benchmarks/gpu_agents.py", "--out", "{out}/gpu_agents.json", *dry)
    return [
        Cell("scaling", (*split, "--parts", "scaling"), timeout_s=400, min_s=200),
        Cell("agents", agents, timeout_s=400, min_s=200),
        Cell("nccl", (*split, "--parts", "nccl"), timeout_s=520, min_s=330),
        *(
            Cell(f"latency_{n}", (*split, "--parts", "latency", "--rounds", "1"), 240, 110)
            for n in range(LATENCY_ROUNDS)
        ),
        Cell("scaling_compiled", (*split, "--parts", "scaling", "--compile", "default"), 400, 200),
        # Since the server chooses an agent and counts it in one step: the sweep again.
        Cell("agents_reserved", agents, timeout_s=400, min_s=200),
        # Compiled, the ranks run in step, so NCCL's kernels time the transfer rather than
        # a rank's wait for the other: the comparison with torch.profiler holds still.
        Cell("nccl_compiled", (*split, "--parts", "nccl", "--compile", "default"), 520, 300),
        *(
            Cell(
                f"latency_compiled_{n}",
                (*split, "--parts", "latency", "--rounds", "1", "--compile", "default"),
                # Four compilations (two ranks each side) before a second of measuring.
                500,
                420,
            )
            for n in range(LATENCY_ROUNDS)
        ),
        # The bare loop compiling what mlms compiles (the body and the head in one region),
        # where the rounds above compiled the body alone; two rounds a cell, the side going
        # first alternating.
        *(
            Cell(
                f"latency_whole_{n}",
                (*split, "--parts", "latency", "--rounds", "2", "--compile", "default"),
                570,
                400,
            )
            for n in range(LATENCY_ROUNDS)
        ),
        # A compiled split is host-bound at batch 1 (~370 launches and 44 collectives a
        # forward) and the host's pace moves 14-24 ms from one process to the next, more than
        # the 2 % to resolve: mlms's predict against the bare loop's in the same two
        # processes, blocks interleaved.
        Cell("predict_ab", (*ab, "--out", "{out}"), 450, 250),
        # With CUDA graphs the ranks hung once measured: whether freeing the graph trees before
        # the process group is destroyed lets them end.
        Cell(
            "graphs_exit",
            (*ab, "--mode", "reduce-overhead", "--batch-sizes", "1", "--hang-s", "150"),
            170,
            100,
        ),
        # The same through the runner: an evaluation with CUDA graphs that ends, against the
        # bare loop with them.
        Cell(
            "graphs_eval",
            (*split, "--parts", "latency", "--rounds", "1", "--compile", "reduce-overhead"),
            520,
            300,
        ),
        # Where mlms's predict spends its extra time at batch 1: both sides under
        # torch.profiler in the same processes, host operators and kernels side by side.
        Cell(
            "predict_profile", (*ab, "--out", "{out}", "--profile", "--batch-sizes", "1"), 300, 150
        ),
        # The profile shows the host ~6 % slower in every operator of mlms's predict alike:
        # which part of mlms's load makes it, the zoo's module or the predictor around it,
        # and whether being loaded first does (mlms's predictor loaded again, last).
        *(batch_one(f"predict_variants_{mode}", mode, *variants) for mode in MODES),
        # Two copies of mlms's predict differed by 6-7 % there: each side twice, each rank's
        # launching thread pinned to a core, to learn what the method resolves at batch 1.
        *(
            batch_one(f"predict_pinned_{mode}{again}", mode, *pinned)
            for again in ("", "_again")
            for mode in MODES
        ),
    ]


def summarize(results: Path) -> str:
    """The tables of the cells done so far."""
    lines: list[str] = []
    reports = {
        folder.name: json.loads((folder / "tensor_parallel.json").read_text())
        for folder in sorted((results / "cells").glob("*"))
        if (folder / "tensor_parallel.json").is_file()
    }
    for prefix, title in (
        ("latency_", "eager"),
        ("latency_compiled_", "compiled, the bare loop's body alone"),
        ("latency_whole_", "compiled, the same region in both"),
    ):
        lines += _latency(reports, prefix, title)
    for name in ("nccl", "nccl_compiled"):
        nccl = reports.get(name, {}).get("nccl")
        if not nccl or "mlms" not in nccl:
            continue
        lines += [f"{name}: NCCL kernel time per predict (ms)", "",
                  "| batch | mlms trace | torch.profiler | ratio |",
                  "|---:|---:|---:|---:|"]  # fmt: skip
        for batch, theirs in nccl["bare_profile"].items():
            mine = nccl["mlms"][batch]
            lines.append(f"| {batch} | {mine:.4f} | {theirs:.4f} | {mine / theirs:.3f} |")
        transfer = nccl.get("transfer")
        if transfer:
            mine, theirs = transfer["mlms"], transfer["bare_profile"]
            lines.append(f"| {transfer['batch_size']}, transfer | {mine:.4f} | {theirs:.4f} | "
                         f"{mine / theirs:.4f} |")  # fmt: skip
        lines.append("")
    for name in ("agents", "agents_reserved"):
        agents = results / "cells" / name / "gpu_agents.json"
        if not agents.is_file():
            continue
        found = json.loads(agents.read_text())
        one, two = (statistics.median(found[k]) for k in ("one_agent_s", "two_agents_s"))
        lines.append(f"{name}: sweep of {len(found['models'])} models x "
                     f"{len(found['batch_sizes'])} batch sizes: one GPU agent {one:.1f} s, two "
                     f"{two:.1f} s, ratio {found['ratio']:.3f} (target <= 0.55)\n")  # fmt: skip
    for name in ("compile_ab", "compile_ab_graphs", "predict_ab", "graphs_exit", "predict_profile",
                 "predict_variants_default", "predict_variants_reduce-overhead",
                 "predict_pinned_default", "predict_pinned_reduce-overhead"):  # fmt: skip
        ab = results / "cells" / name / "log.txt"
        if ab.is_file():
            table = [
                line for line in ab.read_text(errors="replace").splitlines() if line[:1] == "|"
            ]
            lines += [f"{name}: the same two processes, blocks interleaved", "", *table, ""]
    lines += _copies(results)
    for name in ("scaling", "scaling_compiled"):
        scaling = results / "cells" / name / "log.txt"
        if scaling.is_file():
            text = scaling.read_text(errors="replace")
            lines += [name, *(line for line in text.splitlines() if line.startswith(("|", "peak")))]
    return "\n".join(lines) + "\n"


def _latency(reports: dict[str, dict], prefix: str, title: str) -> list[str]:
    """The rounds of mlms against the bare loop of the cells named ``prefix<n>``, and the
    medians' table."""
    rounds = [r for name, rep in reports.items()
              if name.startswith(prefix) and name.removeprefix(prefix).isdigit()
              for r in rep.get("latency", [])]  # fmt: skip
    if not rounds:
        return []
    lines = [f"mlms against the bare loop, {title} (p50 ms)", "",
             "| round | batch | mlms | bare | mlms / bare |",
             "|---:|---:|---:|---:|---:|"]  # fmt: skip
    ratios: dict[str, list[float]] = {}
    for number, round_ in enumerate(rounds):
        for batch, mine in round_["mlms"].items():
            theirs = round_["bare"][batch]["p50_ms"]
            ratios.setdefault(batch, []).append(mine / theirs)
            lines.append(f"| {number} | {batch} | {mine:.2f} | {theirs:.2f} | "
                         f"{mine / theirs:.3f} |")  # fmt: skip
    lines += ["", "| batch | rounds | median of mlms / bare | min | max |",
              "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for batch, values in ratios.items():
        lines.append(f"| {batch} | {len(values)} | {statistics.median(values):.3f} | "
                     f"{min(values):.3f} | {max(values):.3f} |")  # fmt: skip
    return [*lines, ""]


def _copies(results: Path) -> list[str]:
    """The pinned cells, where each side was loaded twice: how far two copies of one side are
    apart (the A/A ratio, the method's own resolution), and mlms against the bare loop over
    both copies of each (geometric means), which no one copy's placement decides."""
    lines: list[str] = []
    for cell in sorted((results / "cells").glob("predict_pinned_*")):
        for found in cell.glob("compile_ab_*.json"):
            mode = found.stem.removeprefix("compile_ab_")
            for batch, p50 in json.loads(found.read_text()).items():
                mine = (p50["mlms"] * p50["mlms_last"]) ** 0.5
                theirs = (p50["bare"] * p50["bare_last"]) ** 0.5
                ratios = (
                    p50["mlms"] / p50["bare"],
                    p50["bare_last"] / p50["bare"],
                    p50["mlms_last"] / p50["mlms"],
                    mine / theirs,
                )
                cells = " | ".join(f"{ratio:.3f}" for ratio in ratios)
                lines.append(f"| {cell.name} | {mode} | {batch} | {cells} |")
    if not lines:
        return []
    head = (
        "| cell | compile | batch | mlms / bare | bare copies | mlms copies "
        "| mlms / bare, both copies |"
    )
    title = "each side loaded twice, the launching threads pinned (p50 ratios)"
    return [title, "", head, "|---|---|---:|---:|---:|---:|---:|", *lines, ""]
