"""``mlms advise`` replayed against what ``advise_check.py`` recorded, running nothing.

advise_check.py writes, per model, every evaluation advise and the exhaustive sweep made on the
machine (``MODEL_evaluations.json``: the records and each one's wall seconds). This script runs
advise's own code (``mlms.advise.run.advise``) again on that machine's recorded hardware, with a
runner that answers each evaluation advise asks for from the records, and a clock that advances
by the seconds the answering evaluation took there. So a change to advise's model or its
verification can be judged against a GPU's measurements on a machine without one.

Each evaluation asked for is answered by, in this order:
- advise's own evaluation of the same setting, batch sizes and length, in the order they ran
  (a replay of unchanged code asks for exactly these, so it reproduces the recorded advice);
- the sweep's evaluation of the setting (full length), its record cut to the batch sizes asked
  for, and its whole wall time: for a probe the replay advise did not make live, this
  overstates an eager probe's time (the sweep measured longer) but not a compiled one's, which
  its compile decides.

The first compiled evaluation in advise's process paid the compiler's start (Inductor's worker
pool, its first graph's imports) besides its compile: ``compile_start`` is how much longer it took
than the median of advise's later compiled evaluations. The replay takes it off that evaluation
and charges it to whichever compiled evaluation the replayed advise asks for first, so a change
that compiles in another order is not credited with the live run's start. With
``--compiler-started`` it charges it to none: what advise would have taken had the compiler been
started before its clock, as ``advise_check.py`` now starts it (the sweep, run after advise in
the same process, found it mostly paid).

Printed: the live advice beside the replay (recommendation, evaluations, compiled ones,
seconds), the replay's quality against the sweep's best (by the sweep's own measurements) and
its time over the sweep's, whether the replay reproduced the live run, and how far the sweep's
measurement of each configuration advise verified live lies from advise's (the same
configuration at the same length, minutes apart: a quality is known no better). ``--set
FIELD=VALUE`` changes the advice's request for the replay (``--set verify=1``,
``--set budget_minutes=1``): what advise would have done, asked otherwise, on the same
measurements.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/advise_replay.py \\
        benchmarks/results/gpu_halves/cells/advise_resnet50/resnet50_evaluations.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import uuid
from collections import defaultdict, deque
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from benchmarks.advise_check import objective_of
from mlms.advise.record import AdviceRecord, AdviceRequest, Config
from mlms.advise.run import Ran, _request, advise
from mlms.errors import NotMeasurable
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.store.local import LocalStore

Setting = tuple[object, ...]


def _setting(request: EvaluationRequest) -> Setting:
    """What an evaluation runs, but for its batch sizes and length."""
    return (request.framework, request.precision, request.compile, request.channels_last,
            request.intra_op_threads, request.tensor_parallel)  # fmt: skip


def _own_seconds(advice: AdviceRecord, records: dict[str, EvaluationRecord]) -> dict[str, float]:
    """Each of advise's evaluations' wall time. Its observations share it (one per batch
    size). Recorded before runners timed each evaluation, evaluations asked for together (a
    verifying round) had an even share of the round's time, so that round's time is shared
    again as their records' ends (``created_at``) lie apart: the runner of one device ran them
    one after another, and a compiled one's share is its compile, an eager one's a few
    seconds. Evaluations timed each by their runner are seldom alike to the microsecond and
    keep their own."""
    seconds: dict[str, float] = defaultdict(float)
    for observation in advice.observations:
        seconds[observation.evaluation_id] += observation.seconds
    ordered = sorted(seconds, key=lambda i: records[i].created_at)
    rounds: list[list[str]] = []
    for evaluation_id in ordered:
        if rounds and math.isclose(seconds[rounds[-1][-1]], seconds[evaluation_id]):
            rounds[-1].append(evaluation_id)
        else:
            rounds.append([evaluation_id])
    own = dict(seconds)
    for index, together in enumerate(rounds):
        if len(together) == 1 or index == 0:
            continue
        ends = [records[rounds[index - 1][-1]].created_at] + [
            records[i].created_at for i in together
        ]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ends)]
        total = sum(seconds[i] for i in together)
        if min(gaps) > 0:
            own.update((i, total * gap / sum(gaps)) for i, gap in zip(together, gaps, strict=True))
    return own


def compile_start(in_order: Sequence[tuple[bool, float]]) -> float:
    """Seconds the first compiled evaluation took beyond the median of the later ones, none
    below 0; 0 without two compiled evaluations. ``in_order``: each evaluation's (compiled,
    wall seconds), in the order they ran."""
    compiled = [seconds for is_compiled, seconds in in_order if is_compiled]
    if len(compiled) < 2:
        return 0.0
    return max(0.0, compiled[0] - statistics.median(compiled[1:]))


class Replay:
    """advise's runner and clock over one model's recorded evaluations."""

    def __init__(self, data: dict, compiler_started: bool = False) -> None:
        self.advice = AdviceRecord.model_validate(data["advice"])
        records = {i: EvaluationRecord.model_validate(r) for i, r in data["evaluations"].items()}
        seconds = _own_seconds(self.advice, records)
        ran = sorted(seconds, key=lambda i: records[i].created_at)
        self.compile_start = compile_start(
            [(bool(records[i].request.compile), seconds[i]) for i in ran]
        )
        first_compiled = next((i for i in ran if records[i].request.compile), None)
        if first_compiled is not None:
            seconds[first_compiled] -= self.compile_start
        self.started_compiling = compiler_started
        self.own: dict[tuple, deque[tuple[EvaluationRecord, float]]] = defaultdict(deque)
        for evaluation_id in dict.fromkeys(o.evaluation_id for o in self.advice.observations):
            record = records[evaluation_id]
            self.own[self._key(record.request)].append((record, seconds[evaluation_id]))
        self.swept: dict[Setting, tuple[EvaluationRecord, float]] = {}
        for entry in data["sweep"]:
            record = records[entry["evaluation_id"]]
            self.swept[_setting(record.request)] = (record, entry["seconds"])
        self.sweep_seconds = sum(entry["seconds"] for entry in data["sweep"])
        self.now = 0.0
        self.asked: list[EvaluationRequest] = []
        self.from_sweep = 0

    @staticmethod
    def _key(request: EvaluationRequest) -> tuple:
        return (_setting(request), tuple(request.batch_sizes), request.iterations)

    def clock(self) -> float:
        return self.now

    def run(self, requests: Sequence[EvaluationRequest]) -> list[Ran]:
        return [self._answer(request) for request in requests]

    def _answer(self, request: EvaluationRequest) -> Ran:
        self.asked.append(request)
        queue = self.own.get(self._key(request))
        if queue:
            record, seconds = queue.popleft() if len(queue) > 1 else queue[0]
        elif _setting(request) in self.swept:
            record, seconds = self.swept[_setting(request)]
            self.from_sweep += 1
        else:
            return Ran(NotMeasurable(f"no recorded evaluation of {_setting(request)}"), 0.0)
        if request.compile and not self.started_compiling:
            self.started_compiling = True
            seconds += self.compile_start
        self.now += seconds
        results = [r for r in record.results if r.batch_size in request.batch_sizes]
        return Ran(record.model_copy(update={"id": uuid.uuid4().hex, "results": results}), seconds)

    def sweep_values(self) -> dict[Config, float]:
        """Each configuration's objective as the sweep measured it."""
        request = self.advice.request
        values: dict[Config, float] = {}
        for row in self.advice.rows:
            # The setting as advise asks for it: the same request its evaluations were.
            record, _ = self.swept[_setting(_request(request, [row.config], 1, 0.0, 0))]
            value = objective_of(record, row.config, request.objective)
            if value is not None:
                values[row.config] = value
        return values


def replay(
    path: Path, quiet: bool, changes: dict[str, str], compiler_started: bool = False
) -> dict:
    replayed = Replay(json.loads(path.read_text()), compiler_started)
    live = replayed.advice
    request = AdviceRequest.model_validate(live.request.model_dump() | changes)
    with tempfile.TemporaryDirectory(prefix="advise-replay-") as home:
        again = advise(
            request,
            store=LocalStore(Path(home)),
            hardware=live.hardware,
            run=replayed.run,
            step=None if quiet else (lambda line: print(f"  {line}", file=sys.stderr)),
            clock=replayed.clock,
        )
    values = replayed.sweep_values()
    lower = live.request.lower_is_better
    best_config = (min if lower else max)(values, key=values.__getitem__)
    best = values[best_config]

    def quality(record: AdviceRecord) -> float | None:
        chosen = record.recommendation
        if chosen is None or chosen.config not in values:
            return None
        value = values[chosen.config]
        return value / best if lower else best / value

    def compiled(record: AdviceRecord) -> int:
        ids = {o.evaluation_id for o in record.observations if o.config.compile}
        return len(ids)

    def label(record: AdviceRecord) -> str:
        return record.recommendation.config.label() if record.recommendation else "-"

    # Each configuration advise verified live was measured again by the sweep, at the same
    # length, minutes apart: how far the two differ is how surely any quality is known.
    repeats = sorted(
        o.value / values[o.config]
        for o in live.observations
        if o.source == "verified" and o.config in values
    )
    live_ids = {o.evaluation_id for o in live.observations}
    sides = {
        "live": (live, len(live_ids)),
        "replay": (again, len(replayed.asked)),
    }
    return {
        "model": live.model,
        "sweep_best": best_config.label(),
        "sweep_seconds": replayed.sweep_seconds,
        **{
            name: {
                "recommended": label(record),
                "quality": quality(record),
                "evaluations": evaluations,
                "compiled": compiled(record),
                "seconds": record.seconds,
            }
            for name, (record, evaluations) in sides.items()
        },
        "compile_start_s": replayed.compile_start,
        "compile_start_charged": not compiler_started,
        "repeats": repeats,
        "from_sweep": replayed.from_sweep,
        "reproduced": replayed.from_sweep == 0
        and len(replayed.asked) == len(live_ids)
        and label(again) == label(live),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recorded", type=Path, nargs="+", help="MODEL_evaluations.json files")
    parser.add_argument("--quiet", action="store_true", help="without advise's own log")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a field of the advice's request changed for the replay (AdviceRequest's names)",
    )
    parser.add_argument(
        "--compiler-started",
        action="store_true",
        help="charge the compiler's start to no evaluation (started before advise's clock)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    fields = AdviceRequest.model_fields
    for change in args.set:
        field, _, value = change.partition("=")
        if field not in fields or not value:
            parser.error(
                f"--set {change!r}: expected FIELD=VALUE, FIELD one of: {', '.join(fields)}"
            )
    changes = dict(change.partition("=")[::2] for change in args.set)
    try:
        results = [
            replay(path, args.quiet, changes, args.compiler_started) for path in args.recorded
        ]
    except ValidationError as error:
        first = error.errors()[0]
        parser.error(f"--set {first['loc'][0]}={first['input']!r}: {first['msg']}")
    print(f"{'model':12} {'run':6} {'recommended':52} {'quality':>7} {'evals':>5} "
          f"{'compiled':>8} {'seconds':>8} {'time':>5}")  # fmt: skip
    for r in results:
        for run in ("live", "replay"):
            side = r[run]
            q = side["quality"]
            print(
                f"{r['model']:12} {run:6} {side['recommended'][:52]:52} "
                f"{'-' if q is None else f'{q:.3f}':>7} {side['evaluations']:5d} "
                f"{side['compiled']:8d} {side['seconds']:8.1f} "
                f"{side['seconds'] / r['sweep_seconds']:5.2f}"
            )
        print(f"{'':12} sweep  best {r['sweep_best'][:47]:47} {'':7} {'':5} {'':8} "
              f"{r['sweep_seconds']:8.1f}; replay reproduced the live run: "
              f"{'yes' if r['reproduced'] else 'no'}")  # fmt: skip
        if r["repeats"]:
            apart = [abs(math.log(ratio)) for ratio in r["repeats"]]
            print(f"{'':12} the {len(apart)} configuration(s) advise verified, as the sweep "
                  f"measured them again: {math.exp(statistics.median(apart)) - 1:.1%} apart in "
                  f"the median, {math.exp(max(apart)) - 1:.1%} at most")  # fmt: skip
        if r["compile_start_s"]:
            where = "the first compile" if r["compile_start_charged"] else "none (started before)"
            print(f"{'':12} the compiler's start, {r['compile_start_s']:.1f} s, charged to "
                  f"{where}")  # fmt: skip
    print("quality: the recommendation's value over the sweep's best, both as the sweep measured "
          "them (1.000 = the best); time: advise's seconds over the sweep's")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
