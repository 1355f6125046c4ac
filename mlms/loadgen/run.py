"""A load run end to end: drive the target, store LoadGen's logs and the mlms record."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from mlms.loadgen.concurrency import SweepSettings, sweep
from mlms.loadgen.logs import read_result
from mlms.loadgen.record import PREFIX, CurvePoint, Latencies, LoadRecord, save_record
from mlms.loadgen.scenarios import ScenarioSettings, run_scenario
from mlms.loadgen.targets import PredictTarget
from mlms.store.base import ObjectStore


def run_loadgen(
    target: PredictTarget, settings: ScenarioSettings, store: ObjectStore, log_dir: Path
) -> LoadRecord:
    """The stored record; LoadGen writes its logs to ``log_dir`` first, then they are stored."""
    run_id = uuid.uuid4().hex
    run = run_scenario(target, settings, log_dir)
    result = read_result(log_dir)
    logs = []
    for path in sorted(log_dir.iterdir()):
        if path.stat().st_size > 0:  # the trace, off, is an empty file
            key = f"{PREFIX}/{run_id}/{path.name}"
            store.put_file(key, path)
            logs.append(key)
    mlms = Latencies.of(run.latencies_ns) if run.latencies_ns else None
    loadgen_p90 = result.latency_ns("90.00")
    record = LoadRecord(
        **_target_fields(target),
        id=run_id,
        scenario=settings.scenario,
        settings={**asdict(settings), **run.effective},
        calibration_ms=run.calibration_ms,
        validity=result.validity,
        invalid_because=result.invalid_because,
        loadgen=result.results,
        mlms=mlms,
        p90_ratio=(
            loadgen_p90 / 1e6 / mlms.p90_ms if mlms and loadgen_p90 and mlms.p90_ms else None
        ),
        logs=logs,
    )
    save_record(store, record)
    return record


def run_sweep(
    target: PredictTarget,
    settings: SweepSettings,
    store: ObjectStore,
    on_point: Callable[[CurvePoint], None] = lambda _point: None,
) -> LoadRecord:
    record = LoadRecord(
        **_target_fields(target),
        id=uuid.uuid4().hex,
        scenario="concurrency",
        settings={
            "levels": ",".join(map(str, settings.levels)),
            "window_s": settings.window_s,
            "max_windows": settings.max_windows,
            "samples": settings.samples,
        },
        curve=sweep(target, settings, on_point),
    )
    save_record(store, record)
    return record


def _target_fields(target: PredictTarget) -> dict[str, object]:
    info = target.info
    return {
        "created_at": datetime.now(UTC),
        "model": info.model,
        "framework": info.framework,
        "framework_version": info.framework_version,
        "device": info.device,
        "where": info.where,
        "tensor_parallel": info.tensor_parallel,
        "devices": list(info.devices),
    }
