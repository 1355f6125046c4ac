"""One batch size's measurement (docs/DESIGN.md, "Leveled measurement"): an untraced warm-up,
then one run per level, each with its level's collectors attached; the model-level run comes
first and is the one the result's latency, throughput and energy come from.

Two strategies feed the runs: ``FixedInputs`` predicts the input source's batches until both the
iteration count and the minimum time are met; ``DatasetPasses`` passes over a stored data set,
the model-level run once over every sample (its pass counts the accuracy), deeper runs over the
first ``iterations`` batches only.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from mlms.evaluation.conditions import host_steal, run_conditions
from mlms.evaluation.dataset_run import DatasetInputs, Pass, post_step, run_pass
from mlms.evaluation.energy import EnergyMeter
from mlms.evaluation.feed import Feed, host_batch
from mlms.evaluation.inputs import InputSource
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import (
    BatchResult,
    EvaluationRequest,
    GenerationResult,
    InputCopyResult,
    LevelResult,
)
from mlms.evaluation.stats import latency_stats
from mlms.predictors.base import InputCopy, LayerCapture, Predictor, TokenGenerator
from mlms.tracer.gpu_run import gpu_run
from mlms.tracer.hierarchy import innermost_containers
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer


def measure_batch(
    predictor: Predictor,
    source: InputSource,
    data: DatasetInputs | None,
    tracer: Tracer,
    request: EvaluationRequest,
    runs: list[TraceLevel],
    batch_size: int,
    report: ProgressCallback,
    meter: EnergyMeter,
) -> tuple[BatchResult, Pass | None]:
    """One batch size's runs, on the input source or, where given, passes over the data set
    (the model-level run's pass is returned with the result)."""
    with tracer.span(
        f"batch_size={batch_size}",
        TraceLevel.APPLICATION,
        attributes={"mlms.batch_size": batch_size},
    ):
        strategy: BatchRuns = (
            FixedInputs(predictor, tracer, request, batch_size, report, source)
            if data is None
            else DatasetPasses(predictor, tracer, request, batch_size, report, data)
        )
        return strategy.measure(runs, meter)


#: Predicts whose device time is taken alone (``Predictor.device_times``), after the runs.
DEVICE_PREDICTS = 5


@dataclass(frozen=True)
class Run:
    """What one measured run's loop did."""

    latencies: list[int]  # each predict's (ns)
    seconds: float  # the loop's wall time
    inferences: int  # samples predicted
    throughput: float  # inferences a second
    copies: list[InputCopy]  # the inputs' copies to the device
    passed: Pass | None = None  # a data set's pass
    launches: list[int] = field(default_factory=list)  # each predict's host part (ns)


@dataclass
class BatchRuns(ABC):
    """The runs of one batch size; a subclass says where their batches come from."""

    predictor: Predictor
    tracer: Tracer
    request: EvaluationRequest
    batch_size: int
    report: ProgressCallback

    @abstractmethod
    def warm_up(self) -> None:
        """Untraced, uncounted predicts before the measured runs."""

    @abstractmethod
    def loop(self, level: TraceLevel, number: int) -> Run:
        """The measured loop of run ``number`` (the first: the model-level run)."""

    @abstractmethod
    def first_batch(self) -> np.ndarray:
        """What a GPU run replays for its counters."""

    def generation(self) -> GenerationResult | None:
        """Token generation after the runs, where the request asks for it."""
        return None

    def device_times(self, model_run: Run) -> list[int]:
        """The device's time alone for a few predicts (``Predictor.device_times``), where the
        model-level run timed its launches; none by default."""
        return []

    def progress(self, run: str, done: int, target: int) -> None:
        self.report(Progress(self.batch_size, run, done, target))

    def measure(
        self, runs: list[TraceLevel], meter: EnergyMeter
    ) -> tuple[BatchResult, Pass | None]:
        """The warm-up, then one run per level of ``runs``, then any generation."""
        with self.tracer.run(0, TraceLevel.NO_TRACE):
            self.warm_up()
        levels: dict[str, LevelResult] = {}
        measured: list[Run] = []
        for number, level in enumerate(runs, start=1):
            # Everything but the loop happens before the run's span opens, so that the span
            # starts with its loop (min_seconds is measured from the loop's start).
            before = len(self.tracer.records())
            with (
                meter.measure() as energy,
                host_steal() as steal,
                self.tracer.run(number, level),
                self.tracer.span(
                    f"run {number}: {level.label}",
                    TraceLevel.APPLICATION,
                    attributes={"mlms.run_level": level.label},
                ),
            ):
                run, dropped = self._collected(level, number)
                spans = len(self.tracer.records()) - before
            if not measured:
                model_energy = energy.result(run.inferences)
                conditions = run_conditions(energy.samples, meter.max_sm_mhz, steal.share)
            measured.append(run)
            p50 = float(np.percentile(run.latencies, 50)) / 1e6
            base = float(np.percentile(measured[0].latencies, 50)) / 1e6
            levels[level.label] = LevelResult(
                run=number,
                iterations=len(run.latencies),
                latency_ms={"p50": p50, "mean": float(np.mean(run.latencies)) / 1e6},
                overhead=p50 / base,
                spans=spans,
                dropped=dropped,
            )
        generation = self.generation()
        model_run = measured[0]
        with self.tracer.run(0, TraceLevel.NO_TRACE):
            device = self.device_times(model_run)
        result = BatchResult(
            batch_size=self.batch_size,
            iterations=len(model_run.latencies),
            seconds=model_run.seconds,
            latency_ms=latency_stats(model_run.latencies),
            throughput=model_run.throughput,
            levels=levels,
            input_copy=_copy_result(model_run.copies),
            launch_ms=_ms_result(model_run.launches),
            device_ms=_ms_result(device),
            generation=generation,
            energy=model_energy,
            samples=model_run.passed.hits.samples if model_run.passed is not None else None,
            conditions=conditions,
        )
        return result, model_run.passed

    def _collected(self, level: TraceLevel, number: int) -> tuple[Run, int]:
        """Run ``number``'s loop with the collectors of ``level`` attached; how many events
        they dropped."""
        if level < TraceLevel.FRAMEWORK:
            return self.loop(level, number), 0
        tracer = self.tracer
        first = len(tracer.records())
        gpu = gpu_run(self.predictor, level, self.first_batch(), self.request.warmup)
        predictor = self.predictor
        layers = predictor.has_layers(predictor.options.compile)
        with (
            predictor.profile_layers() if layers else nullcontext(LayerCapture()) as capture,
            gpu or nullcontext(),
        ):
            run = self.loop(level, number)
        models = [r for r in tracer.records()[first:] if r.level == TraceLevel.MODEL]
        parents = innermost_containers(models, capture.events)
        tracer.add_events(capture.events, [models[i] if i is not None else None for i in parents])
        dropped = gpu.emit(tracer, first) if gpu else 0
        return run, capture.dropped + dropped


@dataclass
class FixedInputs(BatchRuns):
    """Batches of an input source, fed as often as each run needs them."""

    source: InputSource
    feed: Feed = field(init=False)

    def __post_init__(self) -> None:
        self.feed = Feed(
            self.predictor, self.source, self.batch_size, on_device=self.request.input_on_device
        )

    def warm_up(self) -> None:
        for index in range(self.request.warmup):
            # The whole pipeline: post-processing has its own first-call costs (a detector's
            # anchors) that a measured iteration must not carry.
            batch = self.feed.next(index, self.tracer)
            self.predictor.postprocess(self.predictor.predict(batch))
            self.progress("warmup", index + 1, self.request.warmup)

    def loop(self, level: TraceLevel, number: int) -> Run:
        latencies, seconds, launches = measure_loop(
            self.predictor,
            self.feed,
            self.tracer,
            self.request,
            self.batch_size,
            level,
            self.report,
        )
        inferences = self.batch_size * len(latencies)
        return Run(
            latencies,
            seconds,
            inferences,
            # The predicts' own time: the pipeline's steps around them are not the model's.
            throughput=inferences / (sum(latencies) / 1e9),
            copies=list(self.feed.copies),
            launches=launches,
        )

    def first_batch(self) -> np.ndarray:
        return host_batch(self.predictor, self.source.take(0, self.batch_size))

    def device_times(self, model_run: Run) -> list[int]:
        if not model_run.launches:
            return []
        longest = max(model_run.launches)
        return self.predictor.device_times(self.first_batch(), DEVICE_PREDICTS, longest)

    def generation(self) -> GenerationResult | None:
        if self.request.generate is None or not isinstance(self.predictor, TokenGenerator):
            return None
        with self.tracer.run(0, TraceLevel.NO_TRACE):
            return _generation(
                self.predictor, self.feed, self.tracer, self.request, self.batch_size
            )


@dataclass
class DatasetPasses(BatchRuns):
    """Passes over a data set's samples in their order."""

    data: DatasetInputs

    def warm_up(self) -> None:
        run_pass(
            self.predictor,
            self.data,
            self.tracer,
            self.batch_size,
            limit=self.request.warmup,
            report=self._warmup_progress,
        )

    def _warmup_progress(self, done: int, _target: int) -> None:
        self.progress("warmup", done, self.request.warmup)

    def loop(self, level: TraceLevel, number: int) -> Run:
        done = run_pass(
            self.predictor,
            self.data,
            self.tracer,
            self.batch_size,
            limit=None if number == 1 else self.request.iterations,
            report=functools.partial(self.progress, level.label),
        )
        return Run(
            done.latencies,
            done.seconds,
            done.hits.samples,
            # Every sample over the pass's wall time, pipeline stalls included.
            throughput=done.hits.samples / done.seconds,
            copies=done.copies,
            passed=done,
        )

    def first_batch(self) -> np.ndarray:
        return self.data.first(self.batch_size)[0]


def measure_loop(
    predictor: Predictor,
    feed: Feed,
    tracer: Tracer,
    request: EvaluationRequest,
    batch_size: int,
    level: TraceLevel,
    report: ProgressCallback,
) -> tuple[list[int], float, list[int]]:
    """Predict until both the iteration count and the minimum time are met.

    Returns each predict's latency (ns, host clock around the call, which returns only once the
    device is done), the run's wall time (s) and each predict's launch (ns, the host's part:
    ``Predictor.launches``; empty where the predictor does not report one for every predict);
    ``feed.copies`` holds the run's input copies.
    """
    feed.clear()
    predictor.launches.clear()
    latencies: list[int] = []
    clock = time.perf_counter_ns
    began = clock()
    deadline = began + int(request.min_seconds * 1e9)
    index = 0
    # A split model's ranks agree on every iteration (the slowest rank's clock decides).
    while predictor.ranks.agree(index < request.iterations or clock() < deadline):
        batch = feed.next(index, tracer)
        with tracer.span("predict", TraceLevel.APPLICATION):
            with tracer.span(
                "model", TraceLevel.MODEL, kind="model", attributes={"mlms.batch_size": batch_size}
            ):
                start = clock()
                logits = predictor.predict(batch)
                latencies.append(clock() - start)
        with tracer.span("postprocess", TraceLevel.APPLICATION):
            predictor.postprocess(logits, step=functools.partial(post_step, tracer))
        index += 1
        report(Progress(batch_size, level.label, index, request.iterations))
    launches = list(predictor.launches) if len(predictor.launches) == len(latencies) else []
    return predictor.ranks.slowest(latencies), (clock() - began) / 1e9, launches


def _ms_result(samples_ns: list[int]) -> dict[str, float] | None:
    if not samples_ns:
        return None
    return {"p50": float(np.median(samples_ns)) / 1e6, "mean": float(np.mean(samples_ns)) / 1e6}


def _copy_result(copies: list[InputCopy]) -> InputCopyResult | None:
    if not copies:
        return None
    seconds = [copy.seconds for copy in copies]
    median = float(np.median(seconds))
    return InputCopyResult(
        bytes=copies[0].bytes,
        latency_ms={"p50": median * 1e3, "mean": float(np.mean(seconds)) * 1e3},
        gb_per_s=copies[0].bytes / median / 1e9,
    )


def _generation(
    predictor: TokenGenerator,
    feed: Feed,
    tracer: Tracer,
    request: EvaluationRequest,
    batch_size: int,
) -> GenerationResult:
    """Untraced greedy decoding of ``request.generate`` tokens after each input: a warm-up,
    then ``request.iterations`` generations."""
    new_tokens = request.generate or 1
    for index in range(max(request.warmup, 1)):
        predictor.generate(feed.next(index, tracer), new_tokens)
    first: list[int] = []
    later: list[int] = []
    for index in range(request.iterations):
        ttft, steps = predictor.generate(feed.next(index, tracer), new_tokens)
        first.append(ttft)
        later.extend(steps)
    first, later = predictor.ranks.slowest(first), predictor.ranks.slowest(later)
    decoding_s = (sum(first) + sum(later)) / 1e9
    return GenerationResult(
        new_tokens=new_tokens,
        time_to_first_token_ms=latency_stats(first),
        time_per_output_token_ms=latency_stats(later) if later else None,
        tokens_per_second=batch_size * new_tokens * request.iterations / decoding_s,
    )
