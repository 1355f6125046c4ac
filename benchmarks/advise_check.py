"""``mlms advise`` against an exhaustive sweep of the same space, side by side in one run.

For each model: advise (probes, prediction, verification: ``EmbeddedClient.advise``), then
every configuration of the advice's space evaluated with the verification's settings (one
evaluation per setting with all its batch sizes, the cheapest exhaustive sweep; with
``--sweep-cells cell`` one per configuration, as ``mlms sweep`` runs one per cell). Printed per
model:
- quality: the recommendation's achieved objective over the best the exhaustive sweep found
  among the configurations whose accuracy holds by advise's rule (its own measurement, and
  the sweep's measurement of the same configuration);
- time: advise's wall time over the sweep's;
- the median prediction error |predicted - achieved| / achieved over every configuration
  (achieved: the sweep's), and over the verified ones (advise's own);
- how often the sweep's value fell inside advise's predicted interval;
- q(paired): where advise recommended another configuration than the sweep's best, the two
  measured again in ``--paired-rounds`` rounds of one evaluation each, alternating, and the
  median of the rounds' ratios. The other two qualities compare measurements minutes apart;
  on a host whose speed drifts (a launch-bound GPU predict moved 20-65 % for tens of seconds
  on the H200s) that drift can outweigh the configurations' difference, and here it cancels;
- with ``--sweeps N``, the first sweep's best as each later sweep measured it, over that
  sweep's best: how far the reference reproduces itself, the quality the exhaustive sweep
  would score as a recommender.
Stored evaluations are ignored (a fresh store; assets built before the clocks start), so the
advice rests on its probes alone, and each side compiles in a compile cache of its own, empty at
its start, as on a fresh machine: the sweep run after advise would otherwise find the settings
advise compiled in the cache, and a compiled setting costs its compile. The compiler is started
before either clock (one compiled evaluation per framework, in a cache of its own): the first
compile in a process pays the compiler's start (Inductor's worker pool, its imports), which the
sweep, run after advise in the same process, would otherwise find mostly paid by advise. Results as
JSON under --out, with what each side measured (``MODEL_evaluations.json``), which
``benchmarks/advise_replay.py`` replays advise against without running anything.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/advise_check.py --models resnet18 \\
        --frameworks torch,onnxruntime --compile none --threads 1,2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _list(text: str | None, cast=str):
    return None if text is None else [cast(p) for p in text.split(",")]


def _agrees(record, records: dict, config) -> bool:
    from mlms.advise.run import AGREEMENT

    same = [c for c in records if c.framework == config.framework]
    threads = max((c.threads for c in same if c.threads), default=None)
    base = next(
        (
            records[c]
            for c in sorted(same, key=lambda c: c.batch_size)
            if c.precision == "fp32"
            and c.compile is None
            and not c.channels_last
            and c.threads == threads
        ),
        None,
    )
    if base is None or record.predictions is None or base.predictions is None:
        return True
    pairs = list(zip(record.predictions.top5, base.predictions.top5, strict=False))
    return sum(a[0] == b[0] for a, b in pairs) / len(pairs) >= AGREEMENT


def _sweep_evaluations(configs: list, cells: str) -> list[list]:
    """The exhaustive sweep's evaluations: one per configuration (``cell``, as ``mlms sweep``
    runs a cell), or one per setting with all its batch sizes (``setting``: the cheapest
    exhaustive sweep, each batch size's loop in one loaded model)."""
    from mlms.advise.record import by_setting

    if cells == "cell":
        return [[c] for c in configs]
    return by_setting(configs, lambda config: config)


def objective_of(record, config, objective: str) -> float | None:
    """The objective's value of ``config``'s batch size in ``record``."""
    result = next(r for r in record.results if r.batch_size == config.batch_size)
    return {
        "latency": result.latency_ms.p50,
        "throughput": result.throughput,
        "energy": result.energy.joules_per_inference if result.energy else None,
    }[objective]


def _first_mode(framework: str, named: list[str] | None) -> str | None:
    """The first compile mode of ``named`` that ``framework`` has (its first mode where none
    is named), None where it has none."""
    from mlms.predictors.registry import predictor_class

    modes = predictor_class(framework).compile_modes
    return next((m for m in (named if named is not None else modes) if m in modes), None)


def cold_compiles() -> contextlib.AbstractContextManager:
    """An empty compile cache (torch.compile's, Inductor's and Triton's, on disk and in memory)
    for what runs inside, removed after; nothing where torch is not installed."""
    try:
        from torch._inductor.utils import fresh_cache
    except ImportError:
        return contextlib.nullcontext()
    return fresh_cache()


def _save_evaluations(path: Path, client, advice, swept: list, again: list[list]) -> None:
    """What advise and the sweep measured, for ``advise_replay.py``: the advice (its request,
    hardware and observations, each with its evaluation's wall seconds), every evaluation
    record either side made, and the sweep's evaluations in order with their wall seconds
    (``sweep``; the later sweeps' in ``sweep_again``)."""
    ids = dict.fromkeys(o.evaluation_id for o in advice.observations if o.source != "stored")
    evaluations = {i: client.get_evaluation(i).model_dump(mode="json") for i in ids}
    for each in (swept, *again):
        evaluations |= {record.id: record.model_dump(mode="json") for record, _ in each}

    def listed(each: list) -> list[dict]:
        return [{"evaluation_id": record.id, "seconds": seconds} for record, seconds in each]

    data = {"advice": advice.model_dump(mode="json"), "evaluations": evaluations,
            "sweep": listed(swept), "sweep_again": [listed(each) for each in again]}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _sweep(client, request, advice, args: argparse.Namespace) -> tuple[dict, dict, list, float]:
    """Every configuration of the advice's space evaluated with the verification's settings, in
    a compile cache of its own: each configuration's objective value and record, each
    evaluation's record and wall seconds, and the whole sweep's seconds."""
    from mlms.advise.run import _request

    achieved: dict = {}
    records: dict = {}
    swept: list[tuple[object, float]] = []
    begun = time.monotonic()
    with cold_compiles():
        for configs in _sweep_evaluations([row.config for row in advice.rows], args.sweep_cells):
            one = _request(request, configs, args.iterations, args.min_seconds, 3)
            started = time.monotonic()
            record = client.evaluate(one)
            swept.append((record, time.monotonic() - started))
            for config in configs:
                records[config] = record
                achieved[config] = objective_of(record, config, args.objective)
    return achieved, records, swept, time.monotonic() - begun


def _best(achieved: dict, records: dict, lower: bool) -> tuple[object, float]:
    """A sweep's best configuration and its value among those whose accuracy holds by
    advise's own rule (top-1 agreement with the framework's fp32 baseline on the same
    synthetic inputs)."""
    holding = {c: v for c, v in achieved.items() if _agrees(records[c], records, c)}
    config = (min if lower else max)(holding, key=holding.get)
    return config, achieved[config]


def paired_quality(measure, chosen, best, rounds: int, lower: bool) -> float | None:
    """The median over ``rounds`` of the sweep's best over the recommended configuration (as
    ``quality``: >= 1 where the best is better), each round measuring both, the recommended
    first in even rounds and second in odd ones; ``measure(config)`` is one evaluation's
    objective value. None when no round measured both."""
    ratios = []
    for round_ in range(rounds):
        order = (chosen, best) if round_ % 2 == 0 else (best, chosen)
        values = {config: measure(config) for config in order}
        if None in values.values():
            continue
        ratio = values[chosen] / values[best]
        ratios.append(ratio if lower else 1 / ratio)
    return statistics.median(ratios) if ratios else None


def check(model: str, args: argparse.Namespace, client) -> dict:
    from mlms.advise.record import AdviceRequest
    from mlms.advise.run import _request
    from mlms.evaluation.record import EvaluationRequest

    request = AdviceRequest(
        model=model,
        hw=args.hw,
        objective=args.objective,
        frameworks=_list(args.frameworks),
        precisions=_list(args.precisions),
        compile_modes=_list(args.compile),
        channels_last={"both": None, "on": True, "off": False}[args.channels_last],
        threads=_list(args.threads, int),
        batch_sizes=_list(args.batch_sizes, int),
        budget_minutes=args.budget_minutes,
        verify=args.verify,
        iterations=args.iterations,
        min_seconds=args.min_seconds,
        probe_iterations=args.probe_iterations,
        probe_min_seconds=args.probe_min_seconds,
        use_stored=False,
    )
    for framework in request.frameworks or ["torch"]:  # assets built, imports done: untimed
        plain = EvaluationRequest(
            model=model, framework=framework, hw=args.hw, iterations=1, min_seconds=0
        )
        client.evaluate(plain)
        mode = _first_mode(framework, request.compile_modes)
        if mode is not None:  # the compiler started, its cache left empty
            with cold_compiles():
                client.evaluate(plain.model_copy(update={"compile": mode}))
    begun = time.monotonic()
    with cold_compiles():
        advice = client.advise(request, lambda line: print(f"  {line}", file=sys.stderr))
    advise_seconds = time.monotonic() - begun
    sweeps = [_sweep(client, request, advice, args) for _ in range(args.sweeps)]
    achieved, records, swept, sweep_seconds = sweeps[0]
    if args.out:
        again = [s[2] for s in sweeps[1:]]
        _save_evaluations(args.out / f"{model}_evaluations.json", client, advice, swept, again)
    lower = request.lower_is_better
    best_config, best = _best(achieved, records, lower)
    # The reference's own reproducibility: the first sweep's best as each later sweep measured
    # it, over that sweep's best (what the exhaustive sweep itself scores as a recommender).
    reproduced = []
    for later, later_records, _swept, _seconds in sweeps[1:]:
        _config, later_best = _best(later, later_records, lower)
        value = later[best_config]
        reproduced.append((value / later_best) if lower else (later_best / value))
    chosen = advice.recommendation
    errors = [abs(r.predicted - achieved[r.config]) / achieved[r.config] for r in advice.rows]
    inside = [r.low <= achieved[r.config] <= r.high for r in advice.rows]
    quality = None
    quality_same_sweep = None
    quality_paired = None
    if chosen is not None:
        quality = (chosen.achieved / best) if lower else (best / chosen.achieved)
        again = achieved[chosen.config]
        quality_same_sweep = (again / best) if lower else (best / again)
        if chosen.config == best_config:
            quality_paired = 1.0
        else:

            def measure(config) -> float | None:
                one = _request(request, [config], args.iterations, args.min_seconds, 3)
                return objective_of(client.evaluate(one), config, args.objective)

            quality_paired = paired_quality(
                measure, chosen.config, best_config, args.paired_rounds, lower
            )
    return {
        "model": model,
        "space": advice.space,
        "advice_id": advice.id,
        "recommended": chosen.config.label() if chosen else None,
        "recommended_achieved": chosen.achieved if chosen else None,
        "sweep_best": best_config.label(),
        "sweep_best_value": best,
        "unit": request.unit,
        "quality": quality,  # >= 1; <= 1.05 is the target
        "quality_in_sweep": quality_same_sweep,
        "quality_paired": quality_paired,
        "sweep_reproduced": reproduced,
        "advise_seconds": advise_seconds,
        "sweep_seconds": sweep_seconds,
        "time_ratio": advise_seconds / sweep_seconds,
        "median_error_all": statistics.median(errors),
        "median_error_verified": advice.median_error,
        "inside_interval": sum(inside) / len(inside),
        "left_out": advice.left_out,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--objective", default="latency")
    parser.add_argument("--frameworks", default="torch,onnxruntime")
    parser.add_argument("--precisions", default=None)
    parser.add_argument("--compile", default=None)
    parser.add_argument("--channels-last", default="both", choices=["both", "on", "off"])
    parser.add_argument("--threads", default=None)
    parser.add_argument("--batch-sizes", default=None)
    parser.add_argument("--budget-minutes", type=float, default=10.0)
    parser.add_argument("--verify", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--probe-iterations", type=int, default=5)
    parser.add_argument("--probe-min-seconds", type=float, default=0.2)
    parser.add_argument(
        "--sweep-cells",
        default="setting",
        choices=["setting", "cell"],
        help="The exhaustive sweep's evaluations: one per setting with all its batch sizes "
        "(default, the cheaper sweep), or one per configuration as mlms sweep runs a cell.",
    )
    parser.add_argument(
        "--paired-rounds",
        type=int,
        default=4,
        help="Rounds measuring the recommended configuration and the sweep's best alternately "
        "when they differ (0: none).",
    )
    parser.add_argument(
        "--sweeps",
        type=int,
        default=1,
        help="Exhaustive sweeps, one after another: the later ones say how far the first "
        "one's best reproduces (the reference's own quality).",
    )
    parser.add_argument("--home", type=Path, default=None, help="The store (default: a temp dir).")
    parser.add_argument("--out", type=Path, default=None, help="Write results.json here.")
    args = parser.parse_args()
    if args.sweeps < 1:
        parser.error(f"--sweeps {args.sweeps}: expected 1 or more")
    home = args.home or Path(tempfile.mkdtemp(prefix="advise-check-"))
    import os

    os.environ["MLMS_HOME"] = str(home)
    from mlms.client import EmbeddedClient

    client = EmbeddedClient()
    results = []
    for model in args.models.split(","):
        print(f"{model}: advise, then the exhaustive sweep", file=sys.stderr)
        results.append(check(model, args, client))
    header = (f"{'model':14} {'space':>5} {'recommended':44} {'sweep best':44} {'quality':>7} "
              f"{'q(sweep)':>8} {'q(pair)':>7} {'time':>6} {'err all':>7} {'err ver':>7} "
              f"{'in int':>6} {'advise s':>8} {'sweep s':>8}")  # fmt: skip
    print(header)
    for r in results:

        def pct(x):
            return "-" if x is None else f"{100 * x:.1f}%"

        print(
            f"{r['model']:14} {r['space']:5d} {str(r['recommended'])[:44]:44} "
            f"{r['sweep_best'][:44]:44} {r['quality'] or float('nan'):7.3f} "
            f"{r['quality_in_sweep'] or float('nan'):8.3f} "
            f"{r['quality_paired'] or float('nan'):7.3f} {r['time_ratio']:6.2f} "
            f"{pct(r['median_error_all']):>7} {pct(r['median_error_verified']):>7} "
            f"{pct(r['inside_interval']):>6} {r['advise_seconds']:8.1f} {r['sweep_seconds']:8.1f}"
        )
    for r in results:
        for index, value in enumerate(r["sweep_reproduced"], start=2):
            print(f"{r['model']}: the first sweep's best ({r['sweep_best']}) in sweep {index}: "
                  f"{value:.3f} of that sweep's best")  # fmt: skip
    print("quality: recommended achieved vs the sweep's best (1.000 = the best; target <= 1.05); "
          "q(pair): the two measured alternately; "
          "time: advise / sweep (target <= 0.30); err: median |predicted - achieved| / achieved "
          "(target <= 15%)")  # fmt: skip
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
