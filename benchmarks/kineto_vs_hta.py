"""How much faster is mlms than HTA at a Kineto trace's GPU kernel breakdown, and do they agree?

On the same Kineto trace file, side by side in one run, each in its own process:

- HTA 0.5 (``holistictraceanalysis``, in ``.venv-hta``: ``benchmarks/setup_hta.sh``, run here
  when missing): ``TraceAnalysis(trace_dir=...)`` then ``get_gpu_kernel_breakdown()``, every
  kernel by name (``benchmarks/hta_side.py``). HTA rounds event times to whole microseconds
  unless ``HTA_DISABLE_NS_ROUNDING`` is set; it is set here, so that both sides sum the same
  durations.
- mlms: ``kineto_table`` (the import) then ``kernel_breakdown`` over ``Spans``.

Printed: each side's seconds (load, breakdown, total; interpreter start and imports excluded),
its process's CPU seconds (start-up included) and peak RSS, the ratio HTA / mlms (target >= 5),
and whether the breakdowns agree:
the same kernel names and counts, each kernel's total time within 1%. Kernels that HTA does
not count as computation or communication (names with Memcpy, Memset or Sync) are left out of
the mlms side of the comparison, as HTA leaves them out.

    .venv/bin/python benchmarks/kineto_vs_hta.py TRACE.json[.gz]
    .venv/bin/python benchmarks/kineto_vs_hta.py --synthetic 300000 [--gzip]
    .venv/bin/python benchmarks/kineto_vs_hta.py --synthetic 1000000 --mlms-only

A folder of rank traces (``TRACE_DIR``, or ``--synthetic N --ranks R``: R tensor-parallel rank
traces of N kernels each) compares the distributed analyses instead, each side run as its user
runs it: HTA as a script (``hta_side.py --distributed``: ``TraceAnalysis`` load, temporal
breakdown, communication/computation overlap), mlms as its two commands (``mlms import kineto
DIR`` then ``mlms analyze ID``, which prints the per-rank breakdown, overlap, skew and
collectives), each timed from process start to exit, in alternated rounds (``--repeat``, 3).
Printed: the wall seconds of each round, the ratios of the best and of the median rounds
(target >= 3), whether each rank's kernel and NCCL kernel sums in mlms's archive equal the raw
traces' (exactly, in ns), and whether the two breakdowns and overlaps agree per rank.

    .venv/bin/python benchmarks/kineto_vs_hta.py --synthetic 40000 --ranks 2
    .venv/bin/python benchmarks/kineto_vs_hta.py TRACE_DIR

A synthetic trace (``benchmarks/synthetic_kineto.py``) is written to a temporary folder and
removed afterwards (``--keep DIR`` keeps it there).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
HTA_PYTHON = ROOT / ".venv-hta" / "bin" / "python"
#: HTA's own test for kernels outside its computation and communication types.
HTA_OTHER = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
TOLERANCE = 0.01


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, help="a Kineto trace (.json or .json.gz)")
    parser.add_argument("--synthetic", type=int, metavar="N", help="kernels of a synthetic trace")
    parser.add_argument("--gzip", action="store_true", help="gzip the synthetic trace")
    parser.add_argument("--ranks", type=int, help="a synthetic folder of this many rank traces")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of both sides on rank traces (best kept)"
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="work in DIR and keep it")
    parser.add_argument(
        "--mlms-only",
        action="store_true",
        help="time the mlms side alone (HTA needs ~8 GB and minutes per million kernels)",
    )
    parser.add_argument("--side", choices=["mlms"], help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "mlms":
        print(json.dumps(mlms_side(args.trace, args.output)))
        return
    if (args.trace is None) == (args.synthetic is None):
        parser.error("give a TRACE file or --synthetic N")
    if not HTA_PYTHON.exists() and not args.mlms_only:
        subprocess.run([str(ROOT / "benchmarks" / "setup_hta.sh")], check=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="kineto_vs_hta_"))
    try:
        if args.ranks or (args.trace is not None and args.trace.is_dir()):
            compare_ranks(_rank_folder(work, args), work, args.repeat)
        else:
            compare(_trace_folder(work, args), work, with_hta=not args.mlms_only)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def _trace_folder(work: Path, args: argparse.Namespace) -> Path:
    """A folder holding the one trace (HTA reads a folder of rank traces)."""
    folder = work / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    if args.synthetic is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from synthetic_kineto import write_synthetic

        path = folder / ("rank-0.json.gz" if args.gzip else "rank-0.json")
        if not path.exists():
            began = time.perf_counter()
            write_synthetic(path, args.synthetic)
            print(f"wrote {path} ({path.stat().st_size / 1e6:,.0f} MB) in "
                  f"{time.perf_counter() - began:.1f} s")  # fmt: skip
        return folder
    source = args.trace.resolve()
    link = folder / source.name
    if not link.exists():
        link.symlink_to(source)
    return folder


def _rank_folder(work: Path, args: argparse.Namespace) -> Path:
    """The folder of rank traces: the one given, or synthetic ones written into ``work``."""
    if args.synthetic is None:
        return args.trace.resolve()
    folder = work / f"ranks-{args.ranks}x{args.synthetic}"
    if not folder.exists():
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from synthetic_kineto import write_ranks

        began = time.perf_counter()
        paths = write_ranks(folder, args.ranks, args.synthetic, compress=args.gzip)
        size = sum(p.stat().st_size for p in paths) / 1e6
        print(f"wrote {len(paths)} rank traces ({size:,.0f} MB) in "
              f"{time.perf_counter() - began:.1f} s")  # fmt: skip
    return folder


def _hta_round(folder: Path, output: Path, work: Path) -> dict:
    """HTA's script, as its user runs it."""
    return _run(
        [str(HTA_PYTHON), str(ROOT / "benchmarks" / "hta_side.py"), str(folder), str(output),
         "--distributed"],
        env={"HTA_DISABLE_NS_ROUNDING": "1"},
        log=work / "hta.log",
    )  # fmt: skip


def _mlms_round(folder: Path, home: Path, work: Path) -> tuple[dict, dict]:
    """mlms's two commands, as its user runs them, into a fresh ``home``."""
    shutil.rmtree(home, ignore_errors=True)
    mlms = ROOT / ".venv" / "bin" / "mlms"
    imported = _run(
        [str(mlms), "import", "kineto", str(folder), "--batch-size", "1"],
        env={"MLMS_HOME": str(home)},
        log=work / "mlms_import.log",
        json_line=False,
    )
    imported["evaluation"] = re.search(r"evaluation ([0-9a-f]+)", imported["stdout"]).group(1)
    analyzed = _run(
        [str(mlms), "analyze", imported["evaluation"]],
        env={"MLMS_HOME": str(home), "COLUMNS": "200"},
        log=work / "mlms_analyze.log",
        json_line=False,
    )
    (work / "mlms_analyze.txt").write_text(analyzed["stdout"])
    return imported, analyzed


def compare_ranks(folder: Path, work: Path, repeat: int) -> None:
    """HTA's script against mlms's two commands on a folder of rank traces (module docstring)."""
    from mlms.analysis.kineto_ranks import rank_files

    files = rank_files(folder)
    events = {path.name: _raw_events(path) for path in files}
    count = {name: len(found) for name, found in events.items()}
    print(f"{len(files)} rank traces: " + ", ".join(f"{n} {c:,} kernels" for n, c in count.items()))
    hta_csv = work / "hta_ranks.csv"
    if not HTA_PYTHON.exists():
        subprocess.run([str(ROOT / "benchmarks" / "setup_hta.sh")], check=True)
    home = work / "mlms-home"
    rounds: list[tuple[dict, dict, dict]] = []
    for _ in range(repeat):  # alternated, so that both sides see the machine's load alike
        rounds.append((_hta_round(folder, hta_csv, work), *_mlms_round(folder, home, work)))
    print(f"{'wall (s), each round':30} " + " ".join(f"{i + 1:>7}" for i in range(repeat)))
    names = ("HTA script (load+2 analyses)", "mlms import kineto", "mlms analyze")
    for position, name in enumerate(names):
        walls = " ".join(f"{r[position]['wall_s']:7.2f}" for r in rounds)
        print(f"{name:30} {walls}")
    hta = min(r[0]["wall_s"] for r in rounds)
    mlms = min(r[1]["wall_s"] + r[2]["wall_s"] for r in rounds)
    last = rounds[-1]
    print(f"CPU (s) and peak RSS (MB), last round: HTA {last[0]['cpu_s']:.1f} / "
          f"{last[0]['rss_mb']:,.0f}, mlms import {last[1]['cpu_s']:.1f} / "
          f"{last[1]['rss_mb']:,.0f}, mlms analyze {last[2]['cpu_s']:.1f} / "
          f"{last[2]['rss_mb']:,.0f}")  # fmt: skip
    print(f"HTA in-process, last round: load {last[0]['load_s']:.2f} s, breakdown + overlap "
          f"{last[0]['breakdown_s']:.2f} s")  # fmt: skip
    print(f"speed-up (HTA / mlms, best wall of {repeat}): {hta:.2f} s / {mlms:.2f} s = "
          f"{hta / mlms:.1f}x (target >= 3)")  # fmt: skip
    # The machine may be shared: the medians say what a typical round gave.
    hta = statistics.median(r[0]["wall_s"] for r in rounds)
    mlms = statistics.median(r[1]["wall_s"] + r[2]["wall_s"] for r in rounds)
    print(f"speed-up (HTA / mlms, median wall of {repeat}): {hta:.2f} s / {mlms:.2f} s = "
          f"{hta / mlms:.1f}x (target >= 3)")  # fmt: skip
    evaluation = last[1]["evaluation"]
    os.environ["MLMS_HOME"] = str(home)
    print(_sums_check(evaluation, events))
    print(_ranks_agreement(evaluation, pd.read_csv(hta_csv)))


def _raw_events(path: Path) -> list[dict]:
    """The file's complete events (ph X) of the kernel category, read with ``json``."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        document = json.load(handle)
    return [e for e in document["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]


def _archive(evaluation: str) -> Any:
    from mlms.evaluation.record_store import load_record
    from mlms.store.factory import store_from_url

    store = store_from_url(None)
    return store, load_record(store, evaluation)


def _sums_check(evaluation: str, events: dict[str, list[dict]]) -> str:
    """Each rank's kernel and NCCL kernel counts and summed durations (ns): the archive's
    against the raw files' (Kineto's microseconds, three decimals, as whole ns)."""
    from mlms.analysis.kineto_ranks import kernel_sums
    from mlms.tracer.archive import read_table
    from mlms.tracer.communication import is_communication

    store, record = _archive(evaluation)
    sums = kernel_sums(read_table(store, record.trace_id))
    ranks = dict(pair.split(": ") for pair in record.settings.get("ranks", "").split(", ") if pair)
    lines, equal = [], True
    for rank, name in ranks.items():
        raw = {"kernel": [0, 0], "communication": [0, 0]}
        for event in events[name]:
            kind = "communication" if is_communication(event["name"]) else "kernel"
            raw[kind][0] += 1
            raw[kind][1] += round(event["dur"] * 1000)
        for kind, (calls, ns) in raw.items():
            archived = sums.get((int(rank), kind), (0, 0))
            same = archived == (calls, ns)
            equal &= same
            label = "NCCL kernels" if kind == "communication" else "kernels"
            lines.append(
                f"  rank {rank} {label}: raw {calls:,} / {ns:,} ns, "
                f"mlms {archived[0]:,} / {archived[1]:,} ns {'=' if same else '!='}"
            )
    return "\n".join([f"per-rank sums equal the raw traces: {'yes' if equal else 'NO'}", *lines])


def _ranks_agreement(evaluation: str, hta: pd.DataFrame) -> str:
    """mlms's rank_breakdown and comm_overlap against HTA's per rank (idle, compute and
    non-compute time; overlap share)."""
    from mlms.analysis.catalog import analyze_stored

    store, _ = _archive(evaluation)
    tables = analyze_stored(store, [evaluation], ["rank_breakdown", "comm_overlap"])
    mlms = tables["rank_breakdown"].merge(
        tables["comm_overlap"], on=["trace_id", "batch_size", "rank"]
    )
    joined = hta.merge(mlms, on="rank")
    pairs = [
        ("idle_time(us)", "idle (us)"),
        ("compute_time(us)", "compute (us)"),
        ("non_compute_time(us)", "non-compute (us)"),
        ("kernel_time(us)", "span (us)"),
    ]
    worst = max(
        ((joined[a] - joined[b]).abs() / joined[a].abs().clip(lower=1e-9)).max() for a, b in pairs
    )
    overlap = (joined["comp_comm_overlap_pctg"] - joined["overlap (%)"].round(2)).abs().max()
    agree = len(joined) == len(hta) and worst <= 1e-6 and overlap <= 0.01
    return (
        f"breakdown agreement: {'yes' if agree else 'NO'} - {len(joined)} ranks; largest "
        f"relative difference in idle/compute/non-compute/span {worst:.2e}; overlap % "
        f"difference {overlap:.2f} (HTA {joined['comp_comm_overlap_pctg'].tolist()}, mlms "
        f"{joined['overlap (%)'].round(2).tolist()})"
    )


def compare(folder: Path, work: Path, *, with_hta: bool) -> None:
    trace = next(p for p in sorted(folder.iterdir()) if p.name.endswith((".json", ".json.gz")))
    hta_csv, mlms_csv = work / "hta.csv", work / "mlms.csv"
    sides = {}
    if with_hta:
        sides["HTA"] = _run(
            [str(HTA_PYTHON), str(ROOT / "benchmarks" / "hta_side.py"), str(folder), str(hta_csv)],
            env={"HTA_DISABLE_NS_ROUNDING": "1"},
            log=work / "hta.log",
        )
    sides["mlms"] = _run(
        [sys.executable, __file__, "--side", "mlms", str(trace), "--output", str(mlms_csv)],
        env={},
        log=work / "mlms.log",
    )
    size = trace.stat().st_size / 1e6
    print(f"trace {trace.name}: {size:,.0f} MB")
    print(f"{'':6} {'load (s)':>9} {'breakdown (s)':>14} {'total (s)':>10} {'CPU (s)':>8} "
          f"{'peak RSS (MB)':>14}")  # fmt: skip
    for name, side in sides.items():
        total = side["load_s"] + side["breakdown_s"]
        print(f"{name:6} {side['load_s']:9.2f} {side['breakdown_s']:14.2f} {total:10.2f} "
              f"{side['cpu_s']:8.1f} {side['rss_mb']:14,.0f}")  # fmt: skip
    if not with_hta:
        return
    hta, mlms = sides["HTA"], sides["mlms"]
    ratio = (hta["load_s"] + hta["breakdown_s"]) / (mlms["load_s"] + mlms["breakdown_s"])
    print(f"speed-up (HTA / mlms): {ratio:.1f}x (target >= 5)")
    print(agreement(pd.read_csv(hta_csv), pd.read_csv(mlms_csv)))


def _run(command: list[str], env: dict[str, str], log: Path, *, json_line: bool = True) -> dict:
    """Run one side (its stderr to ``log``); its JSON line (or its output, ``stdout``) plus
    its wall time from start to exit and peak RSS (the child's own, from wait4)."""
    began = time.perf_counter()
    with log.open("w") as errors:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, **env},
            cwd=ROOT,
        )
        output = process.stdout.read() if process.stdout else ""
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"{command[1]} failed (exit {os.waitstatus_to_exitcode(status)})")
    result = json.loads(output.strip().splitlines()[-1]) if json_line else {"stdout": output}
    result["wall_s"] = wall
    result["rss_mb"] = usage.ru_maxrss / 1024
    result["cpu_s"] = usage.ru_utime + usage.ru_stime  # the whole process, start-up included
    return result


def mlms_side(trace: Path, output: Path) -> dict:
    """mlms's side: import the trace, then the kernel breakdown; CSV like HTA's."""
    from mlms.analysis.engine import Spans
    from mlms.analysis.kernels import kernel_breakdown
    from mlms.analysis.kineto_import import kineto_table

    began = time.perf_counter()
    table = kineto_table(trace)
    loaded = time.perf_counter()
    breakdown = kernel_breakdown(Spans.from_tables([table]))
    done = time.perf_counter()
    breakdown.rename(
        columns={
            "launches": "count",
            "total (us)": "total_us",
            "mean (us)": "mean_us",
            "min (us)": "min_us",
            "max (us)": "max_us",
        }
    )[["name", "count", "total_us", "mean_us", "min_us", "max_us"]].to_csv(output, index=False)
    return {"load_s": loaded - began, "breakdown_s": done - loaded}


def agreement(hta: pd.DataFrame, mlms: pd.DataFrame) -> str:
    """One line or a few: do the two breakdowns name the same kernels with the same counts
    and totals (within 1%)?"""
    mlms = mlms[~mlms["name"].map(lambda name: bool(HTA_OTHER.match(name)))]
    joined = hta.merge(mlms, on="name", how="outer", suffixes=("_hta", "_mlms"), indicator=True)
    only_hta = (joined["_merge"] == "left_only").sum()
    only_mlms = (joined["_merge"] == "right_only").sum()
    both = joined[joined["_merge"] == "both"]
    error = (both["total_us_mlms"] - both["total_us_hta"]).abs() / both["total_us_hta"]
    counts = (both["count_hta"] == both["count_mlms"]).all()
    agree = only_hta == 0 and only_mlms == 0 and counts and (error <= TOLERANCE).all()
    return (
        f"agreement: {'yes' if agree else 'NO'} - {len(both)} kernel names in both, "
        f"{only_hta} only in HTA, {only_mlms} only in mlms; counts equal: {bool(counts)}; "
        f"largest per-kernel total difference {100 * error.max():.4f}% (limit 1%); "
        f"total kernel time HTA {both['total_us_hta'].sum() / 1e3:,.3f} ms, "
        f"mlms {both['total_us_mlms'].sum() / 1e3:,.3f} ms"
    )


if __name__ == "__main__":
    main()
