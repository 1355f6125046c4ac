"""One MLPerf LoadGen run (SingleStream, MultiStream, Server or Offline) on a predict target.

LoadGen decides when queries arrive and times them; mlms answers them and keeps its own clock
too (from the query's arrival in ``issue_queries`` to the logits), so a run states LoadGen's
percentiles and mlms's side by side. Settings not given are derived from a short untimed
calibration (the target's latency for one sample), so a short run stays short.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

from mlms.errors import InvalidArgument
from mlms.loadgen.targets import PredictTarget, synthetic_samples

SCENARIOS = {
    "single-stream": lg.TestScenario.SingleStream,
    "multi-stream": lg.TestScenario.MultiStream,
    "server": lg.TestScenario.Server,
    "offline": lg.TestScenario.Offline,
}

#: Untimed predicts before LoadGen starts: the first calls of a framework are slow (allocation,
#: kernel selection) and would mislead the calibration.
CALIBRATION_PREDICTS = 10
#: The Server scenario's default rate: this share of what the calibration says the target can
#: answer, so that queueing does not decide the latency bound.
SERVER_LOAD = 0.5


@dataclass(frozen=True)
class ScenarioSettings:
    scenario: str
    duration_ms: int = 10_000
    min_queries: int | None = None  # None: LoadGen's default for the scenario
    target_qps: float | None = None  # Server: the arrival rate; Offline: the expected rate
    target_latency_ms: float = 100.0  # Server: the p99 bound a VALID run meets
    samples_per_query: int = 8  # MultiStream: samples per query, predicted as one batch
    batch_size: int = 1  # Offline: samples per predict
    workers: int = 1  # Server and Offline: predicts in flight at once
    samples: int = 64  # the query sample library: distinct synthetic inputs
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise InvalidArgument(
                f"scenario {self.scenario!r}: expected one of {', '.join(SCENARIOS)}"
            )
        for name in ("duration_ms", "samples_per_query", "batch_size", "workers", "samples"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} {getattr(self, name)}: expected 1 or more")
        if self.target_qps is not None and self.target_qps <= 0:
            raise InvalidArgument(f"target QPS {self.target_qps}: expected a positive rate")


@dataclass
class ScenarioRun:
    settings: ScenarioSettings
    log_dir: Path  # what LoadGen wrote
    calibration_ms: float  # the target's median latency for one sample before the run
    effective: dict[str, float | int]  # the settings LoadGen was given, derived ones included
    #: mlms's latency of every sample (arrival to logits), in completion order.
    latencies_ns: list[int] = field(default_factory=list)


def run_scenario(target: PredictTarget, settings: ScenarioSettings, log_dir: Path) -> ScenarioRun:
    """Run LoadGen (performance mode) on ``target``; its logs go to ``log_dir``."""
    pool = synthetic_samples(target.info, settings.samples, settings.seed)
    calibration_ns = _calibrate(target, pool)
    run = ScenarioRun(settings, log_dir, calibration_ns / 1e6, _effective(settings, calibration_ns))
    sut = _Sut(target, pool, settings, run.latencies_ns)
    handle = lg.ConstructSUT(sut.issue_queries, sut.flush_queries)
    qsl = lg.ConstructQSL(settings.samples, settings.samples, _no_op, _no_op)
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        lg.StartTestWithLogSettings(handle, qsl, _test_settings(run), _log_settings(log_dir))
    finally:
        sut.close()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(handle)
    if sut.error is not None:
        raise sut.error
    return run


class _Sut:
    """LoadGen's system under test: each query's samples become predict calls."""

    def __init__(
        self,
        target: PredictTarget,
        pool: np.ndarray,
        settings: ScenarioSettings,
        latencies_ns: list[int],
    ) -> None:
        self.target = target
        self.pool = pool
        self.latencies_ns = latencies_ns
        self.error: BaseException | None = None
        scenario = settings.scenario
        # SingleStream waits for each answer before the next query: answering on LoadGen's
        # own thread saves a thread hop that both clocks would otherwise include.
        self.inline = scenario == "single-stream"
        self.chunk_size = {
            "multi-stream": settings.samples_per_query,
            "offline": settings.batch_size,
        }.get(scenario, 1)
        self.executor = ThreadPoolExecutor(settings.workers, thread_name_prefix="loadgen-sut")
        self._lock = threading.Lock()

    def issue_queries(self, samples: Sequence[lg.QuerySample]) -> None:
        arrived = time.perf_counter_ns()
        chunks = [samples[i : i + self.chunk_size] for i in range(0, len(samples), self.chunk_size)]
        for chunk in chunks:
            if self.inline:
                self._answer(chunk, arrived)
            else:
                self.executor.submit(self._answer, chunk, arrived)

    def _answer(self, chunk: Sequence[lg.QuerySample], arrived: int) -> None:
        try:
            self.target.predict(self.pool[[s.index for s in chunk]])
        except BaseException as exc:
            # LoadGen waits for every sample: answer it anyway, and fail the run afterwards.
            with self._lock:
                self.error = self.error or exc
        done = time.perf_counter_ns()
        with self._lock:
            self.latencies_ns.extend([done - arrived] * len(chunk))
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in chunk])

    def flush_queries(self) -> None:
        """Nothing is held back waiting for a fuller batch, so there is nothing to flush."""

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def _no_op(_indices: Sequence[int]) -> None:
    """The sample library is in memory from the start: nothing to load or unload."""


def _calibrate(target: PredictTarget, pool: np.ndarray) -> int:
    """The median latency (ns) of one sample after the framework's first, slow calls."""
    times = []
    for i in range(CALIBRATION_PREDICTS):
        start = time.perf_counter_ns()
        target.predict(pool[i % len(pool) : i % len(pool) + 1])
        times.append(time.perf_counter_ns() - start)
    return int(statistics.median(times[CALIBRATION_PREDICTS // 2 :]))


def _effective(settings: ScenarioSettings, latency_ns: int) -> dict[str, float | int]:
    """The LoadGen settings of this run: those given, and the rest from the calibration."""
    capacity_qps = settings.workers * 1e9 / max(latency_ns, 1)
    effective: dict[str, float | int] = {"min_duration_ms": settings.duration_ms}
    if settings.min_queries is not None:
        effective["min_query_count"] = settings.min_queries
    match settings.scenario:
        case "single-stream":
            effective["single_stream_expected_latency_ns"] = latency_ns
        case "multi-stream":
            effective["multi_stream_samples_per_query"] = settings.samples_per_query
            effective["multi_stream_expected_latency_ns"] = latency_ns * settings.samples_per_query
        case "server":
            effective["server_target_qps"] = settings.target_qps or SERVER_LOAD * capacity_qps
            effective["server_target_latency_ns"] = int(settings.target_latency_ms * 1e6)
        case "offline":
            effective["offline_expected_qps"] = settings.target_qps or capacity_qps
    return effective


def _test_settings(run: ScenarioRun) -> lg.TestSettings:
    test = lg.TestSettings()
    test.scenario = SCENARIOS[run.settings.scenario]
    test.mode = lg.TestMode.PerformanceOnly
    for name, value in run.effective.items():
        setattr(test, name, value)
    return test


def _log_settings(log_dir: Path) -> lg.LogSettings:
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False  # printed from the file, with mlms's numbers
    log.enable_trace = False  # a trace event per sample: large, and not read
    return log
