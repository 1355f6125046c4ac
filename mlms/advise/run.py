"""One advice: the space, observations (stored evaluations, probes), the prediction of every
configuration, the verification of the best predicted within the budget, the recommendation.
A space so small that probing it would take as many evaluations as measuring it whole is
measured whole instead, every setting once at full length, as an exhaustive sweep would."""

from __future__ import annotations

import logging
import math
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from mlms.advise.predict import (
    BY_PRECISION,
    CostModel,
    HostDeviceModel,
    Prior,
    cost_model,
    log_sigma,
)
from mlms.advise.record import (
    AdviceRecord,
    AdviceRequest,
    AdviceRow,
    Config,
    Observation,
    by_setting,
    save_advice,
)
from mlms.advise.space import Space, build_space
from mlms.bounds.record import BoundRecord
from mlms.catalog.resolve import resolve_model, resolve_served
from mlms.errors import MlmsError, NotMeasurable
from mlms.evaluation.precisions import NARROWNESS
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.query_terms import MAX_PAGE_SIZE
from mlms.evaluation.record import BatchResult, EvaluationRecord, EvaluationRequest
from mlms.evaluation.record_store import load_record
from mlms.hardware import HardwareInfo, gpus_of, resolve_group
from mlms.store.base import ObjectStore
from mlms.tracer.levels import TraceLevel

log = logging.getLogger(__name__)

#: Top-1 agreement with the fp32 baseline on synthetic inputs that counts as holding.
AGREEMENT = 0.99
#: Warm-up predicts of a probe (a compiled model compiles in the first).
PROBE_WARMUP = 2
#: What-ifs of a lower bound that stand in for a setting never measured: (factor, level) ->
#: the what-if's name.
WHAT_IFS = {
    ("precision", "fp16"): "tensor cores",
    ("precision", "bf16"): "tensor cores",
    ("precision", "tf32"): "tensor cores",
    ("compile", "default"): "fusion",
    ("compile", "max-autotune"): "best algorithm",
    ("compile", "reduce-overhead"): "no framework overhead",
    ("compile", "xla"): "fusion",
}
PRIOR_SIGMA = 0.3  # a what-if is an optimum, not a prediction: a wide interval
#: A baseline probe whose median is known to no better than this (relative half-width of its
#: 95% interval) is probed again.
NOISY = 0.05
#: A relative difference in the objective too small to pay an evaluation for: about what two
#: full-length evaluations of one configuration on a GPU differ by on different occasions, so
#: a smaller gain could not be told from the next run's noise.
TOLERANCE = 0.05

Step = Callable[[str], None]
Clock = Callable[[], float]


class Ran(NamedTuple):
    """One evaluation as a runner answers it."""

    answer: EvaluationRecord | MlmsError  # its record, or the error that ended it
    seconds: float  # its wall time, from its start to its answer (a compile included)

    @classmethod
    def timing(
        cls, evaluate: Callable[[EvaluationRequest], EvaluationRecord], request: EvaluationRequest
    ) -> Ran:
        """``evaluate(request)`` timed, the error that ended it taken as its answer: one
        configuration failing ends no advice."""
        started = time.monotonic()
        try:
            answer: EvaluationRecord | MlmsError = evaluate(request)
        except MlmsError as exc:
            answer = exc
        return cls(answer, time.monotonic() - started)


class Runner(Protocol):
    def __call__(self, requests: Sequence[EvaluationRequest]) -> list[Ran]:
        """Each request's evaluation (in the order given); where the platform has several
        devices, in parallel."""
        ...


class StoredRecords(Protocol):
    def __call__(self, model: str, hw: str) -> list[EvaluationRecord]:
        """Completed evaluations of ``model`` on ``hw`` (newest first)."""
        ...


def stored_from_index(store: ObjectStore, index) -> StoredRecords:  # index: EvaluationIndex
    def stored(model: str, hw: str) -> list[EvaluationRecord]:
        query = EvaluationQuery(
            model=model, hardware=hw, status="completed", page_size=MAX_PAGE_SIZE
        )
        records = []
        for summary in index.page(query).summaries:
            try:
                records.append(load_record(store, summary.id))
            except MlmsError as exc:  # indexed, gone from the store: skipped
                log.warning("stored evaluation %s: skipped: %s", summary.id, exc)
        return records

    return stored


def advise(
    request: AdviceRequest,
    *,
    store: ObjectStore,
    hardware: HardwareInfo,
    run: Runner,
    stored: StoredRecords | None = None,
    bounds: Sequence[BoundRecord] = (),
    step: Step | None = None,
    advice_id: str | None = None,
    served: bool = False,
    clock: Clock = time.monotonic,
) -> AdviceRecord:
    """The advice for ``request`` on ``hardware`` (where the evaluations ``run``), stored.
    ``served``: for a caller on another machine, whose paths name no file here. ``clock``
    (seconds) times the advice and its budget: a replay of recorded evaluations passes the
    time they took."""
    started = clock()
    say = step or (lambda _line: None)
    manifest = (resolve_served if served else resolve_model)(request.model, store)
    # A split names as many devices of the kind as ranks (one line where the host has fewer).
    devices = resolve_group(request.hw, request.tensor_parallel, hardware)
    device = devices[0]
    gpu = next(iter(gpus_of([device], hardware)), None)
    capability = tuple(int(p) for p in gpu.compute_capability.split(".")[:2]) if gpu else None
    space = build_space(request, manifest, capability, hardware.cpu_cores_logical)  # type: ignore[arg-type]
    say(f"{len(space.configs)} configurations in the space; {len(space.left_out)} left out")
    if request.tensor_parallel > 1:
        say(f"every evaluation splits the model over {len(devices)} ranks: {', '.join(devices)}")
    session = _Session(request, space, run, say, started, clock)
    evidence: list[str] = []
    if request.use_stored and stored is not None:
        session.take_stored(stored(request.model, request.hw), evidence)
    whole = session.probing_costs_the_space()
    if whole:
        evidence.append(whole)
        say(whole)
        rows = session.measure_whole()
        probe_seconds, verify_seconds = 0.0, clock() - started
    else:
        session.probe()
    if request.objective == "energy" and not session.observations:
        raise NotMeasurable(
            f"--objective energy: {request.hw} reports no energy here ({session.no_energy}); "
            "expected --objective latency or throughput"
        )
    if not whole:
        priors = _priors(bounds, request, space, evidence)
        session.probe_by_precision(priors)
        probe_seconds = clock() - started
        rows = session.predict(priors)
        verify_started = clock()
        rows = session.verify(rows, priors)
        verify_seconds = clock() - verify_started
        evidence += session.bounded(rows)
    recommendation, why = _recommend(rows, request, session.from_probes)
    # Rows measured without a prediction (a space measured whole) have no error to count.
    predicted = [r for r in rows if r.achieved is not None and r.error is not None]
    errors = [r.error for r in predicted]
    record = AdviceRecord(
        id=advice_id or uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        request=request,
        model=manifest.name,
        device=device,
        device_name=gpu.name if gpu else f"cpu ({hardware.cpu_brand})",
        hardware=hardware,
        frameworks=space.frameworks,
        space=len(space.configs),
        left_out=space.left_out,
        evidence=evidence,
        observations=session.observations,
        rows=rows,
        recommendation=recommendation,
        why=why,
        baselines={f: r.id for f, r in session.baselines.items()},
        probe_seconds=probe_seconds,
        verify_seconds=verify_seconds,
        seconds=clock() - started,
        median_error=statistics.median(errors) if errors else None,
        coverage=(
            sum(r.low <= r.achieved <= r.high for r in predicted) / len(predicted)  # type: ignore[operator]
            if predicted
            else None
        ),
    )
    save_advice(store, record)
    return record


class _Session:
    """The observations gathered for one advice and the runs that gather them."""

    def __init__(
        self,
        request: AdviceRequest,
        space: Space,
        run: Runner,
        say: Step,
        started: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self.request = request
        self.clock = clock
        self.space = space
        self.run = run
        self.say = say
        self.deadline = started + request.budget_minutes * 60
        self.observations: list[Observation] = []
        self.baselines: dict[str, EvaluationRecord] = {}  # fp32 baseline per framework
        self.records: dict[str, EvaluationRecord] = {}
        self.seconds_per_eval: dict[str, float] = {}  # framework -> a probe's wall time
        self.no_energy = ""
        self.from_probes: set[Config] = set()  # achieved as probed (``_keep_better_probes``)
        self.model: CostModel | HostDeviceModel | None = None  # the last ``predict``'s
        in_space = set(space.configs)
        self.in_space = in_space
        batches = space.batch_sizes
        self.effect_batch = batches[-1]  # factors are measured where throughput matters
        if len(batches) <= 3:
            self.probe_batches = batches
        else:
            self.probe_batches = sorted({batches[0], batches[len(batches) // 2], batches[-1]})

    # -- observations ---------------------------------------------------------------------

    def _observe(
        self, record: EvaluationRecord, config: Config, source: str, seconds: float
    ) -> Observation | None:
        result = next((r for r in record.results if r.batch_size == config.batch_size), None)
        if result is None:
            return None
        value = self._value(result)
        if value is None:
            return None
        stats = result.latency_ms
        low, high = stats.median_ci95
        observation = Observation(
            config=config,
            source=source,
            evaluation_id=record.id,
            value=value,
            p50_ms=stats.p50,
            latency_ms=getattr(stats, f"p{self.request.percentile:g}"),
            spread=max(high - low, 0.0) / (2 * stats.p50) if stats.p50 > 0 else 0.0,
            seconds=seconds,
            launch_ms=result.launch_ms["p50"] if result.launch_ms else None,
            device_ms=result.device_ms["p50"] if result.device_ms else None,
        )
        self.observations.append(observation)
        return observation

    def _tell(self, observation: Observation | None) -> None:
        # An evaluation's wall time beside its value says where advise's time went: a
        # compiled setting pays its compile in it.
        if observation is not None:
            self.say(
                f"  {observation.value:.4g} {self.request.unit} in {observation.seconds:.1f} s"
            )

    def _value(self, result: BatchResult) -> float | None:
        if self.request.objective == "latency":
            return result.latency_ms.p50
        if self.request.objective == "throughput":
            return result.throughput
        energy = result.energy
        if energy is None or energy.joules_per_inference is None:
            self.no_energy = (energy.reason if energy else None) or "no energy in the record"
            return None
        return energy.joules_per_inference

    def take_stored(self, records: list[EvaluationRecord], evidence: list[str]) -> None:
        used = 0
        for record in records:
            for result in record.results:
                config = _config_of(record, result.batch_size, self.request.tensor_parallel)
                if config in self.in_space and self._observe(record, config, "stored", 0.0):
                    used += 1
        if used:
            evidence.append(f"{used} measurements from stored evaluations of this model here")

    def _has(self, config: Config) -> bool:
        return any(o.config == config for o in self.observations)

    def _evaluations(
        self, planned: list[tuple[list[Config], str]], iterations: int, seconds: float
    ) -> list[tuple[EvaluationRecord | MlmsError, float]]:
        requests = [
            _request(self.request, configs, iterations, seconds, warmup)
            for configs, warmup in ((c, PROBE_WARMUP if w == "probe" else 3) for c, w in planned)
        ]
        return [(ran.answer, ran.seconds) for ran in self.run(requests)]

    def _one_setting_away(self) -> list[Config]:
        """The configurations one setting away from their framework's baseline, at the batch
        size effects are measured at, not observed yet; those no other configuration does as
        one CUDA graph (``Space.graphed_by``)."""
        configs = []
        for framework in self.space.frameworks:
            reference = self.space.baseline(framework, self.effect_batch)
            for config in self.space.configs:
                if config.framework != framework or config.batch_size != self.effect_batch:
                    continue
                differs = sum(getattr(config, f) != getattr(reference, f) for f in _SETTINGS)
                if differs == 1 and not self._has(config) and self.space.graphed_by(config) is None:
                    configs.append(config)
        return configs

    def _single_setting_probes(self) -> list[Config]:
        """The configurations one setting away from their framework's baseline, but a compile
        mode: its effect depends on the precision and its probe pays a compile, so it is
        probed once, at the precision the first prediction points to (``probe_by_precision``)."""
        return [config for config in self._one_setting_away() if config.compile is None]

    def probing_costs_the_space(self) -> str:
        """Why the space is measured whole, or "" where probing it is cheaper: probing takes
        at least a baseline per framework, a probe per setting and the verifying evaluations;
        measuring the space whole takes one evaluation per setting, all its batch sizes in
        it."""
        settings = len(by_setting(self.space.configs, lambda config: config))
        verifying = min(self.request.verify, settings)
        probing = len(self.space.frameworks) + len(self._one_setting_away()) + verifying
        if probing < settings:
            return ""
        return (
            f"the space is measured whole: its {settings} setting(s) take {settings} "
            f"evaluation(s), probing and verifying would take at least {probing}"
        )

    def measure_whole(self) -> list[AdviceRow]:
        """Every setting of the space in one full-length evaluation with all its batch sizes,
        each row what was achieved (its interval the measurement's own), best first; each
        framework's fp32 baseline among them for the accuracy check. A framework whose
        baseline fails is left out, as when probing."""
        request = self.request
        groups = by_setting(self.space.configs, lambda config: config)
        self.say(f"measuring {len(groups)} setting(s)")
        answers = self._evaluations(
            [(group, "full") for group in groups], request.iterations, request.min_seconds
        )
        measured: list[tuple[Config, EvaluationRecord, float]] = []
        for group, (answer, seconds) in zip(groups, answers, strict=True):
            if isinstance(answer, MlmsError):
                self.say(f"{group[0].label()}: failed: {answer}")
                self.space.left_out.append(f"{group[0].label()}: its evaluation failed: {answer}")
                continue
            self.records[answer.id] = answer
            measured += [(config, answer, seconds / len(group)) for config in group]
            for framework in self.space.frameworks:
                if group[0] == self.space.baseline(framework, group[0].batch_size):
                    self.baselines[framework] = answer
        rows = []
        for config, answer, seconds in measured:
            if config.framework not in self.baselines:
                continue
            observation = self._observe(answer, config, "verified", seconds)
            if observation is None:
                continue
            value, spread = observation.value, observation.spread
            row = AdviceRow(
                config=config,
                predicted=value,
                low=value * (1 - spread),
                high=value * (1 + spread),
                basis="measured",
                predicted_latency_ms=observation.latency_ms,
                meets_slo=None
                if request.slo_ms is None
                else observation.latency_ms <= request.slo_ms,
                achieved=value,
                achieved_latency_ms=observation.latency_ms,
                evaluation_id=answer.id,
            )
            row.accuracy, row.accuracy_holds = self._accuracy(answer, config.framework)
            rows.append(row)
        return _best_predicted_first(rows, request)

    def probe(self) -> None:
        """Each framework's baseline at the probe batch sizes (one evaluation), then one
        setting changed at a time, each unless stored already or the budget is spent."""
        request = self.request
        frameworks = list(self.space.frameworks)
        plans: list[tuple[list[Config], str]] = []
        for framework in frameworks:
            base = [self.space.baseline(framework, b) for b in self.probe_batches]
            plans.append((base, "probe"))
        self.say(f"probing {len(frameworks)} baseline(s): {', '.join(frameworks)}")
        for (configs, _kind), (answer, seconds) in zip(
            plans,
            self._evaluations(plans, request.probe_iterations, request.probe_min_seconds),
            strict=True,
        ):
            framework = configs[0].framework
            if isinstance(answer, MlmsError):
                self.say(f"{framework}: baseline failed: {answer}; left out")
                self.space.left_out.append(f"{framework}: its fp32 baseline failed: {answer}")
                self.space.configs = [c for c in self.space.configs if c.framework != framework]
                continue
            self.baselines[framework] = answer
            self.records[answer.id] = answer
            self.seconds_per_eval[framework] = seconds
            for config in configs:
                self._observe(answer, config, "probe", seconds / len(configs))
            self.say(f"  {framework} baseline: {seconds:.1f} s")
        single = [
            config for config in self._single_setting_probes() if config.framework in self.baselines
        ]
        for index, config in enumerate(single):
            if self.clock() >= self.deadline:
                self.say(f"budget spent: {len(single) - index} probe(s) not run")
                break
            self.say(f"probe {index + 1}/{len(single)}: {config.label()}")
            ((answer, seconds),) = self._evaluations(
                [([config], "probe")], request.probe_iterations, request.probe_min_seconds
            )
            if isinstance(answer, MlmsError):
                self.say(f"  failed: {answer}")
                self.space.left_out.append(f"{config.label()}: its probe failed: {answer}")
                self.space.configs.remove(config)
                continue
            self.records[answer.id] = answer
            self._tell(self._observe(answer, config, "probe", seconds))
        if single and self.clock() < self.deadline:
            self._again(request)

    def _again(self, request: AdviceRequest) -> None:
        """Each noisy baseline measured once more, after the settings: every predicted
        combination divides by the baseline once per setting it combines, so its error
        compounds; a second measurement (the load may have changed meanwhile) halves its
        variance and shows how far the two disagree."""
        noisy = [
            f
            for f in self.baselines
            if any(
                o.spread > NOISY
                for o in self.observations
                if o.config == self.space.baseline(f, self.effect_batch)
            )
        ]
        if not noisy:
            return
        plans = [([self.space.baseline(f, self.effect_batch)], "probe") for f in noisy]
        self.say(f"probing the noisy baseline(s) again: {', '.join(noisy)}")
        answers = self._evaluations(plans, request.probe_iterations, request.probe_min_seconds)
        for (configs, _kind), (answer, seconds) in zip(plans, answers, strict=True):
            if not isinstance(answer, MlmsError):
                self.records[answer.id] = answer
                self._tell(self._observe(answer, configs[0], "probe", seconds))

    def probe_by_precision(self, priors: dict[tuple[str, str, object], Prior]) -> None:
        """Each setting whose effect depends on the precision (``BY_PRECISION``) probed at the
        precisions still in the running after a first prediction (those of the configurations
        whose interval reaches the best's): channels-last, whose single-setting probe ran at
        fp32, at each reduced one; a compile mode, whose probe pays a compile (seconds to a
        minute), at one, the narrowest (``NARROWNESS``; of two as narrow, the better
        predicted): there the arithmetic is fastest, so the most of the work is what a compiler
        changes (fusing the elementwise kernels around it, choosing layouts), and there the
        best configuration most often lies. A compile mode another one replays as one CUDA
        graph is probed only where that one failed (``Space.graphed_by``)."""
        rows = self.predict(priors)
        if not rows:
            return
        running = [r.config for r in rows if _rivals(r, rows[0], self.request.lower_is_better)]
        plans: list[Config] = []
        for framework in self.baselines:
            reference = self.space.baseline(framework, self.effect_batch)
            precisions = list(
                dict.fromkeys(c.precision for c in running if c.framework == framework)
            )
            if not precisions:
                continue
            narrowest = max(precisions, key=NARROWNESS.__getitem__)
            reduced = [p for p in precisions if p != reference.precision]
            for factor in BY_PRECISION:
                for precision in [narrowest] if factor == "compile" else reduced:
                    plans += self._pairs(reference, factor, precision)
        plans.sort(key=lambda config: (config.compile is not None, config in self.space.graphed))
        done = 0
        for index, config in enumerate(plans):
            twin = self.space.graphed_by(config)
            if twin is not None:  # probed instead, before it
                self.say(f"{config.label()}: not probed: {_bounded_by(twin)}")
                continue
            # Counted as the loop goes: a twin that fails brings back what it bounded.
            total = done + sum(self.space.graphed_by(p) is None for p in plans[index:])
            if self.clock() >= self.deadline:
                self.say(f"budget spent: {total - done} pair probe(s) not run")
                return
            done += 1
            self.say(f"pair probe {done}/{total}: {config.label()}")
            ((answer, seconds),) = self._evaluations(
                [([config], "probe")],
                self.request.probe_iterations,
                self.request.probe_min_seconds,
            )
            if isinstance(answer, MlmsError):
                self.say(f"  failed: {answer}")
                self.space.left_out.append(f"{config.label()}: its probe failed: {answer}")
                self.space.configs.remove(config)
                continue
            self.records[answer.id] = answer
            self._tell(self._observe(answer, config, "probe", seconds))

    def _pairs(self, reference: Config, factor: str, precision: str) -> list[Config]:
        """The configurations at the effect batch size that change ``factor`` and, where it
        is not the reference's, the precision to ``precision``, not observed yet."""
        wanted = {factor} if precision == reference.precision else {"precision", factor}
        return [
            config
            for config in self.space.configs
            if config.framework == reference.framework
            and config.batch_size == self.effect_batch
            and config.precision == precision
            and {f for f in _SETTINGS if getattr(config, f) != getattr(reference, f)} == wanted
            and not self._has(config)
        ]

    # -- prediction and verification ------------------------------------------------------

    def predict(self, priors: dict[tuple[str, str, object], Prior]) -> list[AdviceRow]:
        request = self.request
        baselines = {f: self.space.baseline(f, self.effect_batch) for f in self.baselines}
        # Costs, lower is better: ms per batch, ms per input, joules per input.
        rate = request.objective == "throughput"
        cost_of = (lambda o: 1000.0 / o.value) if rate else (lambda o: o.value)
        per_input = request.objective != "latency"
        # A time splits into the host's launch and the device's work; joules do not.
        timed = request.objective != "energy"
        cost = cost_model(self.observations, baselines, cost_of, per_input, priors, split=timed)
        self.model = cost
        latency = cost_model(self.observations, baselines, lambda o: o.p50_ms, False)
        tails: dict[str, float] = {}
        for framework in self.baselines:
            ratios = [
                o.latency_ms / o.p50_ms
                for o in self.observations
                if o.config.framework == framework and o.p50_ms > 0
            ]
            tails[framework] = statistics.median(ratios) if ratios else 1.0
        rows = []
        for config in self.space.configs:
            if config.framework not in self.baselines:
                continue
            guess = cost.predict(config)
            if math.isnan(guess.value):
                continue
            value, low, high = guess.value, guess.low, guess.high
            if rate:  # ms per input -> inputs per second (the interval flips)
                value, low, high = 1000.0 / value, 1000.0 / high, 1000.0 / low
            tail = latency.predict(config).value * tails[config.framework]
            rows.append(
                AdviceRow(
                    config=config,
                    predicted=value,
                    low=low,
                    high=high,
                    basis=guess.basis,
                    predicted_latency_ms=tail,
                    meets_slo=None if request.slo_ms is None else tail <= request.slo_ms,
                )
            )
        self._bound_by_twins(rows)
        return _best_predicted_first(rows, request)

    def _bound_by_twins(self, rows: list[AdviceRow]) -> None:
        """Each modelled row whose work a configuration of the space does as one CUDA graph
        predicted no better than that configuration: the model would otherwise credit it with
        what it never measured (its host's launch, as uncompiled, against the graph's)."""
        by_config = {row.config: row for row in rows}
        worse = max if self.request.lower_is_better else min
        for row in rows:
            twin = by_config.get(self.space.graphed_by(row.config))  # type: ignore[arg-type]
            if twin is None or row.basis != "model":
                continue
            row.predicted = worse(row.predicted, twin.predicted)
            row.low, row.high = worse(row.low, twin.low), worse(row.high, twin.high)
            row.predicted_latency_ms = max(row.predicted_latency_ms, twin.predicted_latency_ms)
            if self.request.slo_ms is not None:
                row.meets_slo = row.predicted_latency_ms <= self.request.slo_ms

    def verify(
        self, rows: list[AdviceRow], priors: dict[tuple[str, str, object], Prior]
    ) -> list[AdviceRow]:
        """The best predicted as full evaluations, in rounds while the budget lasts: first the
        best predicted, with those of the next ``verify`` - 1 that are worth an evaluation
        against it (``_worth``); then, with the model fitted again to what they achieved, the
        ``verify`` best predicted of the rows worth one against the best achieved, round after
        round until none is left. An unverified rival
        would leave the recommendation to the model's guess where the model cannot tell; each
        round's measurements rule out rivals that a wide first interval kept in, and spare
        their evaluations (a compiled one pays its compile). A verified row keeps the
        prediction it was verified on, the others take the last one; best predicted first.
        A row whose work another configuration does as one CUDA graph is left to that one
        (``Space.graphed_by``) unless it fails."""
        lower = self.request.lower_is_better
        verified: dict[Config, AdviceRow] = {}
        planned = []
        candidates = self._open(rows)
        if candidates:
            first = candidates[0]
            wanted = [r for r in candidates[1 : self.request.verify] if self._worth(r, first)]
            planned = self._within_budget([first, *wanted])
        if planned:
            planned += _riders(planned, candidates, lambda r: _rivals(r, candidates[0], lower))
        while planned:
            self._verify_round(planned)
            verified.update((row.config, row) for row in planned)
            rows = [r for r in self.predict(priors) if r.config not in verified]
            candidates = self._open(rows)
            holding = _holding(list(verified.values()), self.request)
            best = _best_achieved(holding, self.request) if holding else None
            if best is None:  # nothing verified holds: the next best predicted instead
                rivals = candidates[: self.request.verify]
            else:
                rivals = [r for r in candidates if self._worth(r, best)]
                self._tell_unworthy(candidates, rivals, best)
                # The best predicted few first: a verification refits the model, and its
                # result often rules out rivals that share its settings' effects (a compiled
                # one's evaluation pays its compile).
                rivals = rivals[: self.request.verify]
            planned = self._within_budget(rivals)
            if len(planned) < len(rivals):
                self.say(f"budget spent: {len(rivals) - len(planned)} rival(s) not verified")
            if planned and best is not None:
                at = best.achieved
                planned += _riders(planned, candidates, lambda r, at=at: _reaches(r, at, lower))
        self._keep_better_probes(rows, list(verified.values()))
        return _best_predicted_first([*verified.values(), *rows], self.request)

    def bounded(self, rows: list[AdviceRow]) -> list[str]:
        """A line per compile mode whose rows were left to their CUDA graphs twins."""
        counted = Counter(
            (row.config.framework, row.config.compile, twin.compile)
            for row in rows
            if row.achieved is None and (twin := self.space.graphed_by(row.config)) is not None
        )
        return [
            f"{count} configuration(s) compiled {mode} on {framework} predicted no faster than "
            f"with {twin}, which replays the same kernels as one CUDA graph: not evaluated"
            for (framework, mode, twin), count in counted.items()
        ]

    def _open(self, rows: list[AdviceRow]) -> list[AdviceRow]:
        """The rows worth verifying at all: those no configuration of the space does as one
        CUDA graph."""
        return [row for row in rows if self.space.graphed_by(row.config) is None]

    def _worth(self, row: AdviceRow, best: AdviceRow) -> bool:
        """Whether verifying ``row`` is worth an evaluation against ``best`` (verified, or the
        best predicted): the gain over it that ``row`` is expected to bring, a loss counting
        as none, is at least ``TOLERANCE``. The two are compared by the model's difference of
        them, in which what their predictions share drops out; without a model, by ``row``'s
        interval against what ``best`` achieved (else was predicted)."""
        if self.model is not None:
            log_ratio, sigma = self.model.difference(row.config, best.config)
            gain = -log_ratio  # a cost: lower is better
        else:
            at = best.achieved if best.achieved is not None else best.predicted
            gain = math.log(at / row.predicted)
            gain = gain if self.request.lower_is_better else -gain
            sigma = log_sigma(row.low, row.high)
        if math.isnan(gain):
            return True
        return _expected_gain(gain, sigma) >= math.log1p(TOLERANCE)

    def _tell_unworthy(self, rows: list[AdviceRow], rivals: list[AdviceRow], best: AdviceRow):
        """A line for the rows whose interval reaches past the best achieved but that are not
        verified: each could beat it, but is expected to by less than the tolerance."""
        reach = [
            r
            for r in rows
            if r not in rivals and _reaches(r, best.achieved, self.request.lower_is_better)  # type: ignore[arg-type]
        ]
        if reach:
            self.say(
                f"{len(reach)} configuration(s) could still beat {best.config.label()} but are "
                f"expected to gain less than {TOLERANCE:.0%} over it: not verified"
            )

    def _keep_better_probes(self, unverified: list[AdviceRow], verified: list[AdviceRow]) -> None:
        """Each row left unverified (the budget spent, or too little to gain) whose own probe
        measured it better than every verified row achieved, by more than ``TOLERANCE``,
        takes that probe as what it achieved: a probe evaluates that very configuration, only
        shorter, and a verified configuration measured worse must not be recommended over it.
        A smaller lead is within what two runs of one configuration differ by, and the
        verified measurement stands. Its prediction was the probe, so it counts no prediction
        error."""
        request = self.request
        holding = _holding(verified, request)
        best = _best_achieved(holding, request).achieved if holding else None
        for row in unverified:
            probe = next(
                (o for o in reversed(self.observations)
                 if o.config == row.config and o.source == "probe"),
                None,
            )  # fmt: skip
            if probe is None or (
                best is not None and not _better(probe.value, _beyond(best, request), request)
            ):
                continue
            row.achieved = probe.value
            row.achieved_latency_ms = probe.latency_ms
            row.evaluation_id = probe.evaluation_id
            record = self.records[probe.evaluation_id]
            row.accuracy, row.accuracy_holds = self._accuracy(record, row.config.framework)
            self.from_probes.add(row.config)
            self.say(
                f"{row.config.label()}: its probe measured {probe.value:.4g} {request.unit}, "
                f"better than every verified configuration by more than {TOLERANCE:.0%}; kept "
                "as measured (it was not verified)"
            )

    def _within_budget(self, rows: list[AdviceRow]) -> list[AdviceRow]:
        """The leading ``rows`` whose evaluations fit the budget left (the first always, while
        nothing has been verified), none past the first that misses the SLO."""
        request = self.request
        scale = max(1.0, request.iterations / request.probe_iterations) ** 0.5
        spent = self.clock()
        first_ever = not any(o.source == "verified" for o in self.observations)
        planned: list[AdviceRow] = []
        for row in rows:
            if row.meets_slo is False and planned:
                break
            cost = self._seconds(row.config) * scale
            if spent + cost > self.deadline and (planned or not first_ever):
                continue
            spent += cost
            planned.append(row)
        return planned

    def _seconds(self, config: Config) -> float:
        """What an evaluation of ``config`` is expected to take: the longest probe of its
        framework in its compile mode (a compiled one pays its compile), else the baseline's."""
        alike = [
            o.seconds
            for o in self.observations
            if o.source == "probe"
            and o.config.framework == config.framework
            and o.config.compile == config.compile
        ]
        return max(alike, default=self.seconds_per_eval.get(config.framework, 0.0))

    def _verify_round(self, planned: list[AdviceRow]) -> None:
        # Rows that differ in batch size only share one evaluation (one load, warm-up and
        # record), each batch size measured in its own loop as when run alone.
        groups = by_setting(planned, lambda row: row.config)
        self.say(f"verifying {len(planned)} configuration(s) in {len(groups)} evaluation(s)")
        plans = [([row.config for row in rows], "full") for rows in groups]
        answers = self._evaluations(plans, self.request.iterations, self.request.min_seconds)
        for rows, (answer, seconds) in zip(groups, answers, strict=True):
            for row in rows:
                self._verified(row, answer, seconds / len(rows))

    def _verified(self, row: AdviceRow, answer: EvaluationRecord | MlmsError, seconds: float):
        """``row`` with what its verification achieved (or why it failed)."""
        request = self.request
        if isinstance(answer, MlmsError):
            row.accuracy = f"failed: {answer}"
            row.accuracy_holds = False
            # Out of the running: a configuration it stood for is verified in its place.
            if row.config in self.space.configs:
                self.space.configs.remove(row.config)
            return
        observation = self._observe(answer, row.config, "verified", seconds)
        if observation is None:
            return
        row.achieved = observation.value
        row.achieved_latency_ms = observation.latency_ms
        row.evaluation_id = answer.id
        row.error = abs(row.predicted - row.achieved) / row.achieved
        row.accuracy, row.accuracy_holds = self._accuracy(answer, row.config.framework)
        self.say(
            f"{row.config.label()}: predicted {row.predicted:.4g}, achieved "
            f"{row.achieved:.4g} {request.unit} in {seconds:.1f} s"
        )

    def _accuracy(self, record: EvaluationRecord, framework: str) -> tuple[str, bool]:
        baseline = self.baselines[framework]
        if self.request.dataset is not None:
            mine, theirs = record.accuracy, baseline.accuracy
            drop = mine.drop_from(theirs) if mine and theirs else None
            if mine is None or theirs is None or drop is None:
                return "no accuracy in the records", False
            name, value = mine.headline
            return (
                f"{name} {value:.4f} against {theirs.headline[1]:.4f} (fp32), drop "
                f"{drop:.2f} points",
                drop <= self.request.max_accuracy_drop,
            )
        mine, theirs = record.predictions, baseline.predictions
        if mine is None or theirs is None or mine.inputs != theirs.inputs:
            return "no predictions of the same inputs to compare", False
        pairs = list(zip(mine.top5, theirs.top5, strict=False))
        agree = sum(a[0] == b[0] for a, b in pairs)
        share = agree / len(pairs) if pairs else 0.0
        return (
            f"top-1 agrees with fp32 on {agree}/{len(pairs)} synthetic inputs",
            bool(pairs) and share >= AGREEMENT,
        )


_SETTINGS = ("precision", "compile", "channels_last", "threads")


def _bounded_by(twin: Config) -> str:
    return (
        f"compile {twin.compile} runs its kernels as one CUDA graph, which takes the device as "
        "long and the host no longer"
    )


def _rivals(row: AdviceRow, first: AdviceRow, lower_is_better: bool) -> bool:
    """Whether ``row``'s interval reaches past the best predicted's (it could beat it)."""
    return row.low <= first.high if lower_is_better else row.high >= first.low


def _best_predicted_first(rows: list[AdviceRow], request: AdviceRequest) -> list[AdviceRow]:
    """``rows`` sorted best predicted first, those predicted to miss the SLO last."""
    sign = 1 if request.lower_is_better else -1

    def order(row: AdviceRow) -> tuple[bool, float, float]:
        # Among equal predictions (settings whose effect no measurement told), the one that
        # could do best first: verifying it settles the most.
        hopeful = row.low if request.lower_is_better else row.high
        return row.meets_slo is False, sign * row.predicted, sign * hopeful

    return sorted(rows, key=order)


def _riders(
    planned: list[AdviceRow], rows: list[AdviceRow], could_win: Callable[[AdviceRow], bool]
) -> list[AdviceRow]:
    """The rows not planned that share a planned row's setting (another batch size) and could
    win: they ride in its evaluation, one more batch size's loop in a model loaded anyway."""
    settings = {row.config.model_copy(update={"batch_size": 1}) for row in planned}
    return [
        row
        for row in rows
        if row not in planned
        and row.config.model_copy(update={"batch_size": 1}) in settings
        and could_win(row)
    ]


def _expected_gain(mean: float, sigma: float) -> float:
    """E[max(0, g)] for a log gain g ~ N(mean, sigma): the gain expected where a loss counts
    as none (the best achieved stays the recommendation)."""
    if sigma <= 0:
        return max(mean, 0.0)
    standard, z = statistics.NormalDist(), mean / sigma
    return mean * standard.cdf(z) + sigma * standard.pdf(z)


def _reaches(row: AdviceRow, achieved: float, lower_is_better: bool) -> bool:
    """Whether ``row``'s interval reaches past a value achieved (it could beat it)."""
    return row.low < achieved if lower_is_better else row.high > achieved


def _config_of(record: EvaluationRecord, batch_size: int, tensor_parallel: int) -> Config | None:
    """The configuration a stored evaluation measured, if it is one advise could have run:
    default inputs and sequence length, no generation, inputs staged as advise stages them,
    the model split as ``tensor_parallel`` asks (a split's latency is not the whole model's)."""
    asked = record.request
    if (
        asked.tensor_parallel != tensor_parallel
        or asked.generate is not None
        or asked.seq_len is not None
        or asked.input_on_device
        or asked.inputs not in (["synthetic"], ["dataset"])
    ):
        return None
    return Config(
        framework=record.framework.name,
        precision=asked.precision,
        compile=asked.compile,
        channels_last=asked.channels_last,
        threads=asked.intra_op_threads,
        batch_size=batch_size,
    )


def _request(
    request: AdviceRequest, configs: list[Config], iterations: int, seconds: float, warmup: int
) -> EvaluationRequest:
    """One evaluation of configurations that differ in batch size only."""
    config = configs[0]
    dataset = request.dataset is not None
    return EvaluationRequest(
        model=request.model,
        framework=config.framework,
        hw=request.hw,
        batch_sizes=[c.batch_size for c in configs],
        iterations=iterations,
        warmup=warmup,
        min_seconds=seconds,
        trace_level=TraceLevel.MODEL,
        inputs=["dataset"] if dataset else ["synthetic"],
        dataset=request.dataset,
        intra_op_threads=config.threads,
        precision=config.precision,
        compile=config.compile,
        channels_last=config.channels_last,
        tensor_parallel=request.tensor_parallel,
    )


def _priors(
    bounds: Sequence[BoundRecord], request: AdviceRequest, space: Space, evidence: list[str]
) -> dict[tuple[str, str, object], Prior]:
    """For settings never measured: the speed-up the lower bound's what-if names, from the
    newest bound of this model and hardware (at the batch size nearest the effects')."""
    mine = [b for b in bounds if b.model == request.model and b.request.hw == request.hw]
    if not mine:
        return {}
    bound = max(mine, key=lambda b: b.created_at)
    if not bound.batches:
        return {}
    target = space.batch_sizes[-1]
    batch = min(bound.batches, key=lambda b: abs(b.batch_size - target))
    speedups = {w.name: w.speedup for w in batch.what_ifs if w.if_ms > 0}
    priors = {}
    for framework in space.frameworks:
        for (factor, level), name in WHAT_IFS.items():
            if name in speedups:
                priors[(framework, factor, level)] = Prior(
                    1 / speedups[name], PRIOR_SIGMA, f"bound {bound.id[:8]}: if {name}"
                )
    if priors:
        evidence.append(
            f"bound {bound.id[:8]} (batch size {batch.batch_size}): "
            + ", ".join(f"if {n} x{s:.2f}" for n, s in speedups.items())
            + " stand in for settings not measured"
        )
    return priors


def _holding(verified: list[AdviceRow], request: AdviceRequest) -> list[AdviceRow]:
    """The verified rows whose accuracy holds, and that meet the SLO where one is asked."""
    holding = [r for r in verified if r.achieved is not None and r.accuracy_holds]
    if request.slo_ms is not None:
        holding = [
            r
            for r in holding
            if r.achieved_latency_ms is not None and r.achieved_latency_ms <= request.slo_ms
        ]
    return holding


def _best_achieved(holding: list[AdviceRow], request: AdviceRequest) -> AdviceRow:
    """The row of ``holding`` (verified, not empty) that achieved the best objective."""
    sign = 1 if request.lower_is_better else -1
    return min(holding, key=lambda r: sign * r.achieved)  # type: ignore[operator]


def _beyond(value: float, request: AdviceRequest) -> float:
    """``value`` bettered by ``TOLERANCE``."""
    return value / (1 + TOLERANCE) if request.lower_is_better else value * (1 + TOLERANCE)


def _better(value: float, than: float, request: AdviceRequest) -> bool:
    return value < than if request.lower_is_better else value > than


def _recommend(
    rows: list[AdviceRow], request: AdviceRequest, from_probes: set[Config]
) -> tuple[AdviceRow | None, str]:
    verified = [r for r in rows if r.achieved is not None]
    if not verified:
        return None, "no configuration was verified (the budget or every run failed)"
    holding = _holding(verified, request)
    if not holding:
        slo = f" and meets p{request.percentile:g} <= {request.slo_ms:g} ms"
        return None, (
            f"none of the {len(verified)} verified configurations holds its accuracy"
            + (slo if request.slo_ms is not None else "")
        )
    best = _best_achieved(holding, request)
    constraint = (
        f", p{request.percentile:g} {best.achieved_latency_ms:.3g} ms <= {request.slo_ms:g} ms"
        if request.slo_ms is not None
        else ""
    )
    measured = f"{best.achieved:.4g} {request.unit}{constraint}"
    if best.config in from_probes:
        others = len(verified) - len(from_probes)
        return best, (
            f"the best achieved {request.objective}, measured by its probe ({measured}; not "
            f"verified; the {others} verified configurations did worse by more than "
            f"{TOLERANCE:.0%}); "
            f"accuracy: {best.accuracy}"
        )
    return best, (
        f"the best achieved {request.objective} of {len(verified)} verified configurations "
        f"({measured}); accuracy: {best.accuracy}"
    )
