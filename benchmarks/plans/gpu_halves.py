"""The GPU halves of advise, torch against JAX, the hardware level's cost and energy, as the GPU
run kit's plan (``benchmarks/gpu_kit.py``):

- ``gpu_tests``: the GPU tests of the hardware level, compiled models, and the launch and
  the device's time of a predict, on each machine anew;
- ``advise_resnet50`` (latency objective) and ``advise_bert_base`` (throughput objective):
  ``mlms advise`` against an exhaustive sweep of the same space on the same GPU
  (``benchmarks/advise_check.py``): the recommendation within 5 % of the sweep's best, at
  <= 30 % of its time; ``advise_resnet50_twice``: the same with the sweep run twice, to say
  how far the reference reproduces itself; ``advise_resnet50_alone``: advise without the
  sweep, for a call with a few minutes left;
- ``compare_jax``: ``mlms compare --frameworks torch,jax`` at batch 1, 16 and 64, inputs on the
  device, strict fp32 (the table, and the chart in the cell's compare.png); ``jax_bare``: mlms
  on jax against a bare ``jax.jit`` loop and the layer join (``benchmarks/jax_gpu.py``);
- ``hardware_cost_1`` and ``hardware_cost_2``: the hardware level (mlms's layers and CUPTI)
  against torch.profiler CPU+CUDA on resnet50 at batch 1, 16 and 64, interleaved in one process
  (``benchmarks/layer_capture_overhead.py``), twice on one host (240-290 s each: back to back
  in two device calls while the machine is held): two calls that agree within 5 % say the
  rounds are enough; target slowdown <= 1.10 at 16 and 64 and <= torch.profiler's at 1;
  ``hardware_wrappers``: the layers' wrappers alone on the host's CPU beside a pure-Python
  reference (how much slower a host runs a collector's Python);
  ``hardware_parts``: where that cost comes from at batch 1 and 16, CUPTI's API records apart
  from its kernels' records, each alone and beside the layers, and the hardware level with a
  0.1 ms thread switch interval (CUPTI's thread waiting for the GIL), with the garbage
  collector paused, without the driver's API records and with the shared buffer;
  ``hardware_buffers``: the hardware level with 8 MiB CUPTI buffers beside 64, with the page
  faults each takes a predict;
- ``compile_cost``: ``mlms eval`` of resnet50 at batch 1 eager, then compiled (default,
  reduce-overhead), each timed whole: what one compiled setting adds to a sweep, to size
  advise's space with compile modes in it;
- ``energy_b1``: p50 with and without energy collection at batch 1, 12 rounds of >= 10 s
  windows (``benchmarks/energy_check.py``): within 1 %;
- ``host_placement``: resnet50's launch at batch 1, eager and under CUDA graphs, over fresh
  loads and over the CPUs its thread is pinned to (``benchmarks/host_placement.py``): whether
  the evaluations' spread in it comes from where the thread runs or from the load.

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

import numpy as np
from scipy import stats

from benchmarks.gpu_kit import Cell, Kit

RESULTS = "gpu_halves"
#: CUPTI for the hardware level; gRPC and TLS for the child agent jax runs in; Keras for jax's
#: models.
WHEELS = ("cupti", "grpc", "tls", "keras", "analysis")
BATCHES = "1,16,64"
PARTS = {
    "gpu": "the GPU tests",
    "advise": "mlms advise against an exhaustive sweep",
    "compile": "what a compile mode costs before its first predict",
    "compare": "torch against jax",
    "jax": "mlms on jax against a bare jax.jit loop",
    "hardware": "the hardware level's cost against torch.profiler",
    "energy": "energy collection's cost at batch 1",
    "host": "where a predict's host part gets its speed",
}


def _tabled(*argv: str) -> tuple[str, ...]:
    """``argv`` with its output (the table) kept in the cell's table.txt as well."""
    script = 'set -o pipefail; "$@" | tee "$KIT_CELL_OUT/table.txt"'
    return ("bash", "-c", script, "bash", *argv)


def _advise(model: str, objective: str, kit: Kit, sweeps: int = 1) -> tuple[str, ...]:
    """advise_check.py on ``model``: the latency objective runs batch size 1 (CUDA graphs are
    what batch 1, bound by the host's launches, most likely wants), the throughput one
    chooses among four batch sizes as well; both with compile modes in the space, each
    compiled setting costing the sweep its compile. ``sweeps``: the exhaustive sweep that
    many times (with two paired rounds rather than four, to fit a call)."""
    script = ("{python}", "benchmarks/advise_check.py", "--models", model, "--out", "{out}",
              "--objective", objective, "--frameworks", "torch", "--sweeps", str(sweeps),
              *(("--paired-rounds", "2") if sweeps > 1 else ()))  # fmt: skip
    latency = objective == "latency"
    if kit.dry:
        batches = "1" if latency else "1,4"
        return _tabled(*script, "--hw", "cpu", "--precisions", "fp32,bf16", "--threads", "2",
                       "--compile", "none,default" if latency else "none",
                       "--batch-sizes", batches, "--iterations", "3", "--min-seconds", "0.05",
                       "--probe-iterations", "3", "--probe-min-seconds", "0.02",
                       "--budget-minutes", "3")  # fmt: skip
    # Every precision and every compile mode but max-autotune (minutes of autotuning per
    # setting): a space where probing saves evaluations. A compile costs an evaluation of
    # resnet50 at batch 1 about 8 s on the H200 (the compile_cost cell), one of bert_base
    # 25-40 s at four batch sizes (bert_eval_cost): 24 settings, 16 compiled, for latency;
    # 12, 8 compiled, for throughput, at two batch sizes (at four, advise and the sweep took
    # over the cell's 590 s).
    precisions = ("--precisions", "fp32,tf32,fp16,bf16",
                  "--compile", "none,default,reduce-overhead")  # fmt: skip
    batches = "1" if latency else "64,256"
    space = (*precisions, "--batch-sizes", batches, "--budget-minutes", "3")
    # Verification as advise's defaults run it: the rounds after the first verify whatever is
    # worth an evaluation, so a larger --verify only adds the first round's runners-up.
    lengths = ("--iterations", "20", "--min-seconds", "0.5", "--probe-iterations", "5",
               "--probe-min-seconds", "0.1")  # fmt: skip
    return _tabled(*script, "--hw", kit.hw, *space, *lengths)


def _advise_alone(model: str, kit: Kit) -> tuple[str, ...]:
    """``mlms advise`` on ``model`` for latency at batch 1, as ``advise_resnet50`` asks it but
    without the sweep: what advise does live where a call has too little time left for one
    (about 2 minutes on the H200); its time is then set against sweeps of other calls."""
    script = ("{python}", "-m", "mlms", "advise", "-m", model, "-f", "torch", "--no-stored",
              "--objective", "latency", "-b", "1", "--budget-minutes", "3")  # fmt: skip
    if kit.dry:
        return _tabled(*script, "--hw", "cpu", "--precision", "fp32,bf16", "--threads", "2",
                       "--compile", "none,default", "-n", "3", "--min-seconds", "0.05",
                       "--probe-iterations", "3", "--probe-min-seconds", "0.02")  # fmt: skip
    return _tabled(*script, "--hw", kit.hw, "--precision", "fp32,tf32,fp16,bf16",
                   "--compile", "none,default,reduce-overhead", "-n", "20", "--min-seconds", "0.5",
                   "--probe-iterations", "5", "--probe-min-seconds", "0.1")  # fmt: skip


def cells(kit: Kit) -> list[Cell]:
    if kit.dry:
        image, text, device, batches = "digits_cnn", "digits_cnn", "cpu", "1,4"
        compare = ("--iterations", "5", "--min-seconds", "0")
        jax = ("--device", "cpu", "--batch-size", "4", "--rounds", "2", "--block", "5",
               "--layer-predicts", "3")  # fmt: skip
        cost = ("--device", "cpu", "--batch-sizes", "1,4", "--rounds", "2", "--block", "3",
                "--only", "mlms layers")  # fmt: skip
        wrappers = ("--rounds", "2", "--block", "20")
        parts = ("--device", "cpu", "--batch-sizes", "1", "--rounds", "2", "--block", "3")
        energy = ("--hw", "cpu", "--smoke", "--rounds", "2", "--min-seconds", "0.2")
    else:
        image, text, device, batches = "resnet50", "bert_base", "cuda:0", BATCHES
        compare = ("--input-on-device", "--iterations", "30", "--min-seconds", "1")
        jax = ("--device", "cuda:0", "--batch-size", "64", "--rounds", "6", "--block", "20",
               "--layer-predicts", "10")  # fmt: skip
        # 12 rounds of 60 predicts per configuration at 64: two calls on one host agreed within
        # 0.1-0.4 %. At batch 1 the hosts' own noise kept them 4-22 % apart with 12 (a round's
        # ratio spread 0.64-2.70 in one call): 36 there, whose blocks are the shortest (about a
        # minute more a call). At 16 the device's work and the hardware level's launch are
        # within 15 % of each other, so the slowdown follows the host's speed, which drifts
        # over seconds: 12 rounds (about 25 s) saw 1.107 and 1.012 minutes apart; 24 span more
        # of the drift.
        # torch.profiler's activities apart are left out: its cpu+cuda is the reference; the
        # layers apart say what the layers cost. Both calls run on one
        # host, as the hosts lent differ by up to 1.8x at batch 1. (One CUPTI buffer for the
        # process against one per thread measured alike in 48 paired rounds: no longer run.)
        hardware = "mlms layers,mlms layers+cupti,torch.profiler cpu+cuda"
        cost = ("--device", device, "--batch-sizes", batches, "--rounds", "36,24,12",
                "--block", "60", "--only", hardware)  # fmt: skip
        # Where the cost is, where it shows: CUPTI's API records apart from its kernels', each
        # alone and beside the layers, whether a GIL handoff or the garbage collector adds to
        # their sum, and the driver's records and the shared buffer, at the host-bound batch
        # sizes.
        parts = ("--device", device, "--batch-sizes", "1,16", "--rounds", "6", "--block", "60",
                 "--only", f"{hardware},mlms cupti,mlms cupti api,mlms cupti kernels,"
                 "mlms layers+cupti api,mlms layers+cupti 0.1ms,mlms layers+cupti nogc,"
                 "mlms layers+cupti runtime,mlms layers+cupti shared buffer")  # fmt: skip
        wrappers = ("--rounds", "10", "--block", "200")
        energy = ("--hw", kit.hw, "--configs", "resnet50:fp32:1", "--rounds", "12",
                  "--min-seconds", "10")  # fmt: skip
    # The GPU tests of what the other cells measure with (the hardware level, compiled models,
    # the launch and the device's time): on each machine anew, before the cells rely on it.
    # Those that time the device run first, alone: beside other tests' processes on the GPU
    # they would time its sharing (resnet18's launch share at batch 1 fell from 0.91 to 0.32).
    both = (
        'p=$1; shift; "$p" -m pytest -m gpu_alone -n 0 "$@"; alone=$?; '
        '"$p" -m pytest -m "not gpu_alone" -n 4 "$@"; exit $((alone | $?))'
    )
    tests = ("bash", "-c", both, "bash", "{python}", "tests/test_gpu.py",
             "tests/test_cupti_join.py", "tests/test_torch_compiled.py", "-q", "-o", "addopts=",
             "-p", "no:cacheprovider")  # fmt: skip
    plan = [
        Cell("gpu_tests", _tabled(*tests), timeout_s=300, on_machine=True),
        Cell("advise_resnet50", _advise(image, "latency", kit), timeout_s=590),
        Cell("advise_bert_base", _advise(text, "throughput", kit), timeout_s=590),
        # The sweep twice: how far the reference itself reproduces on this host.
        Cell("advise_resnet50_twice", _advise(image, "latency", kit, sweeps=2), timeout_s=590),
        Cell("advise_resnet50_alone", _advise_alone(image, kit), timeout_s=240),
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
    # The layers' wrappers alone on the host's CPU, beside a pure-Python reference: how much
    # slower this host runs the Python a collector adds per layer call than another.
    plan.append(Cell("hardware_wrappers", _tabled(
        "{python}", "benchmarks/layer_wrapper_cost.py", *wrappers), timeout_s=120))  # fmt: skip
    parted = ("{python}", "benchmarks/layer_capture_overhead.py", "--model", image, *parts,
              "--json", "{out}/overhead.json")  # fmt: skip
    plan.append(Cell("hardware_parts", _tabled(*parted), timeout_s=420))
    # The hardware level with 8 MiB CUPTI buffers beside 64, and each one's page faults a
    # predict: whether a buffer past glibc's mmap ceiling (fresh pages, each first written
    # inside a launch) is what a host-bound batch 16 pays.
    buffers = ("--device", device, "--batch-sizes", "1" if kit.dry else "1,16",
               "--rounds", "2" if kit.dry else "24,12", "--block", "3" if kit.dry else "60",
               "--only", "mlms layers" if kit.dry else
               f"{hardware},mlms layers+cupti 8MiB")  # fmt: skip
    sized = ("{python}", "benchmarks/layer_capture_overhead.py", "--model", image, *buffers,
             "--json", "{out}/overhead.json")  # fmt: skip
    plan.append(Cell("hardware_buffers", _tabled(*sized), timeout_s=420))
    # What a compile mode costs before its first measured predict, on the model advise's
    # latency space would add it to: whether a sweep over compiled settings fits a call. An
    # empty mode: eager, the reference.
    modes = ("",) if kit.dry else ("", "default", "reduce-overhead")
    # The kit formats each argument ({python}, {out}): the shell's braces are doubled.
    evaluate = f"{{python}} -m mlms eval --model {image} --hw {kit.hw} --batch-size 1"
    timed = (
        'TIMEFORMAT="wall %R s"; for mode in "$@"; do echo "compile ${{mode:-none}}:"; '
        f"{{{{ time {evaluate} --iterations 20 --min-seconds 0.5 "
        "${{mode:+--compile $mode}} || exit 1; }} 2>&1; done"
    )
    plan.append(Cell("compile_cost", _tabled("bash", "-c", timed, "bash", *modes), timeout_s=590))
    energy_check = ("{python}", "benchmarks/energy_check.py", "--out", "{out}", *energy)
    plan.append(Cell("energy_b1", _tabled(*energy_check), timeout_s=590))
    # Eager over 8 loads and every CPU; CUDA graphs (a compile a load) over 2 loads.
    placement = ("--model", image, "--device", device, "--cpus", "0,1" if kit.dry else "all")
    runs = (
        ("--loads", "2", "--block", "20")
        if kit.dry
        else ("--loads", "8", "--block", "200"),
        ("--loads", "1", "--block", "20", "--compile", "default")
        if kit.dry
        else ("--loads", "2", "--block", "300", "--precision", "bf16",
              "--compile", "reduce-overhead"),
    )  # fmt: skip
    script = "p=$1; shift; " + " && ".join(
        f'"$p" benchmarks/host_placement.py "$@" {" ".join(run)} --json $KIT_CELL_OUT/{n}.json'
        for n, run in enumerate(runs)
    )
    plan.append(Cell("host_placement", _tabled("bash", "-c", script, "bash", "{python}",
                                               *placement), timeout_s=420))  # fmt: skip
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
    lines += _hardware_host_bound(cells)
    lines += _hardware_parts(cells)
    return "\n".join(lines) + "\n"


def _prefix(part: str) -> str:
    return {"compare": "compare_jax", "jax": "jax_bare", "hardware": "hardware_",
            "energy": "energy", "compile": "compile_cost"}.get(part, part)  # fmt: skip


#: The hardware level's cost: the configurations shown per call.
COST_SHOWN = ("mlms layers+cupti", "mlms layers+cupti shared buffer", "torch.profiler cpu+cuda")


def _hardware_cost(cells: Path) -> list[str]:
    """Per call of ``hardware_cost`` (the plan's two and any kept from earlier sessions) and
    batch size: the slowdown of the hardware level, of it with a shared CUPTI buffer and of
    torch.profiler CPU+CUDA; then how far the plan's two calls agree (the larger slowdown
    over the smaller)."""
    paths = sorted(cells.glob("hardware_cost_*/overhead.json"))
    if not paths:
        return ["hardware level's cost: no call measured it yet"]
    out = ["hardware level's slowdown over plain predicts (p50):", ""]
    # A plain predict whose launch outlasts the device's work alone leaves the device waiting
    # on the host: there a collector's host cost shows whole.
    plain = ("plain launch ms", "device alone ms")
    out += [
        "| call | batch | " + " | ".join((*COST_SHOWN, *plain)) + " |",
        "|" + "---|" * (2 + len(COST_SHOWN) + len(plain)),
    ]
    calls = {path.parent.name: json.loads(path.read_text()) for path in paths}
    for name, call in calls.items():
        for batch in call:
            row = [_slowdown(call, batch, label) for label in COST_SHOWN]
            measured = call[batch].get("plain", {})
            row += [_ms(measured.get(key)) for key in ("launch_ms", "device_alone_ms")]
            out.append("| " + " | ".join([name, batch, *row]) + " |")
    pair = [calls[name] for name in ("hardware_cost_1", "hardware_cost_2") if name in calls]
    if len(pair) == 2:
        out += ["", "the plan's two calls agree (larger over smaller slowdown):", ""]
        for batch in pair[0]:
            batches = [call.get(batch, {}) for call in pair]
            found = [measured.get(COST_SHOWN[0], {}) for measured in batches]
            if all("slowdown" in hardware for hardware in found):
                slowdowns = [hardware["slowdown"] for hardware in found]
                line = f"- batch {batch}: {max(slowdowns) / min(slowdowns):.3f}"
                out.append(line + _rounds_or_host(batches))
    return [*out, ""]


def _rounds_or_host(batches: list[dict]) -> str:
    """Whether two calls' slowdowns at one batch size part by more than their rounds resolve:
    each call's 95 % interval of its median round ratio (a bootstrap over its rounds).
    Intervals apart say the calls measured hosts that differ, which more rounds would not
    bring together; the plain predict's launch on each says by how much the host's own speed
    moved."""
    ratios = [measured[COST_SHOWN[0]].get("round_ratios") or [] for measured in batches]
    if any(len(r) < 3 for r in ratios):
        return ""
    intervals = [_median_interval(r) for r in ratios]
    apart = max(low for low, _ in intervals) > min(high for _, high in intervals)
    spans = " and ".join(f"{low:.3f}-{high:.3f}" for low, high in intervals)
    launches = " and ".join(_ms(measured.get("plain", {}).get("launch_ms")) for measured in batches)
    verdict = (
        f"apart: the hosts differed (plain launch {launches} ms), not the rounds too few"
        if apart
        else "overlapping: within what the rounds resolve"
    )
    return f"; each call's 95 % interval {spans}, {verdict}"


def _median_interval(ratios: list[float]) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of the median of ``ratios`` (seeded: a summary
    printed twice reads the same)."""
    found = stats.bootstrap(
        (np.array(ratios),), np.median, method="percentile", n_resamples=4000, random_state=0
    )
    interval = found.confidence_interval
    return float(interval.low), float(interval.high)


def _hardware_host_bound(cells: Path) -> list[str]:
    """Per call and batch size: the host's forward with the layers alone and with CUPTI as
    well, against the GPU's busy time in a predict, CUPTI's host time per kernel launched,
    and the hardware level's slowdown. Where the hardware level's forward outlasts the GPU's
    work the device waits on the host, and its slowdown is about the one over the other."""
    out = ["the hardware level's host forward against the GPU's work (ms a predict):", ""]
    heading = ("call", "batch", "layers fwd", "hardware fwd", "gpu busy", "cupti us/kernel",
               "slowdown")  # fmt: skip
    out += ["| " + " | ".join(heading) + " |", "|" + "---|" * len(heading)]
    for path in sorted(cells.glob("hardware_*/overhead.json")):
        for batch, measured in json.loads(path.read_text()).items():
            layers = measured.get("mlms layers", {})
            hardware = measured.get("mlms layers+cupti", {})
            if "forward_host_ms" not in layers or not hardware.get("kernels_per_predict"):
                continue  # calls before the host's forward and the kernels were counted
            per_kernel = (hardware["forward_host_ms"] - layers["forward_host_ms"]) * 1e3
            row = (path.parent.name, batch, _ms(layers["forward_host_ms"]),
                   _ms(hardware["forward_host_ms"]), _ms(hardware["gpu_busy_ms"]),
                   f"{per_kernel / hardware['kernels_per_predict']:.1f}",
                   f"{hardware['slowdown']:.3f}")  # fmt: skip
            out.append("| " + " | ".join(row) + " |")
    return [*out, ""]


def _hardware_parts(cells: Path) -> list[str]:
    """Per call of the hardware level's cells and batch size: what each configuration costs
    (its slowdown over plain, less 1), and how much more the layers and CUPTI cost together
    than apart (together - (layers + cupti)): above 0, something they do to each other costs."""
    out = []
    for path in sorted(cells.glob("hardware_*/overhead.json")):
        rows = json.loads(path.read_text())
        shown = [c for c in next(iter(rows.values())) if c != "plain"]
        heading = ["batch", *(c.removeprefix("mlms ") for c in shown), "together - apart"]
        out += [
            f"{path.parent.name}: the hardware level's parts (slowdown over plain, less 1):",
            "",
        ]
        out += ["| " + " | ".join(heading) + " |", "|" + "---|" * len(heading)]
        for batch, measured in rows.items():
            cost = {c: measured[c]["slowdown"] - 1 for c in shown if "slowdown" in measured[c]}
            apart = ("mlms layers", "mlms cupti", "mlms layers+cupti")
            excess = (
                f"{cost[apart[2]] - cost[apart[0]] - cost[apart[1]]:+.3f}"
                if all(c in cost for c in apart)
                else "-"
            )
            parts = [f"{cost[c]:+.3f}" if c in cost else "-" for c in shown]
            out.append("| " + " | ".join([batch, *parts, excess]) + " |")
        out.append("")
    return out


def _slowdown(call: dict, batch: str, label: str) -> str:
    found = call.get(batch, {}).get(label)
    return f"{found['slowdown']:.3f}" if found else "-"


def _ms(value: float | None) -> str:
    """Milliseconds, or "-" where a call did not measure them (before they were, or no GPU)."""
    return "-" if value is None or value != value else f"{value:.3f}"
