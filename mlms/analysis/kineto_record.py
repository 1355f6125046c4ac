"""The evaluation record of an imported Kineto trace, so that ``mlms evals``, ``mlms analyze``
and ``mlms trace export`` treat it like an evaluation mlms ran itself.

What the record can say is what the trace says: the ProfilerStep durations are the latencies
(one batch size, given by the user; of a folder of rank traces, each step's slowest rank's),
the GPUs come from ``deviceProperties``, CUDA versions from the trace's metadata. Kineto
records neither the torch version (unless the profiler was given it:
``prof.add_metadata("torch_version", torch.__version__)``) nor the host's CPU: unless the trace
names this machine as its host, those fields say "unknown" rather than describe the machine
that imported it. ``settings`` and ``agent`` say that the record is an import.
"""

from __future__ import annotations

import socket
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mlms.analysis.kineto_import import WHOLE_TRACE, KinetoTrace
from mlms.errors import InvalidArgument
from mlms.evaluation.record import (
    BatchResult,
    EvaluationRecord,
    EvaluationRequest,
    FrameworkRef,
    ModelRef,
)
from mlms.evaluation.stats import latency_stats
from mlms.hardware import GpuInfo, HardwareInfo, alias_of, detect
from mlms.tracer.levels import TraceLevel

UNKNOWN = "unknown"
#: Trace metadata worth keeping in the record's ``software``, by the name it gets there.
SOFTWARE_KEYS = {
    "torch": "torch_version",
    "cuda_runtime": "cuda_runtime_version",
    "cuda_driver": "cuda_driver_version",
    "cupti": "cupti_version",
    "kineto_schema": "schemaVersion",
}


def import_record(
    trace: KinetoTrace, *, source: str, model: str, batch_size: int, archive: str
) -> EvaluationRecord:
    """The record of ``trace`` (imported from the file named ``source``, archived at
    ``archive``); ``InvalidArgument`` when it has no step to take a latency from."""
    table = trace.table
    steps_ns = _step_durations(table)
    if not steps_ns:
        raise InvalidArgument(f"{source} has no host events to take a latency from")
    kernels = int(pc.sum(pc.equal(table["kind"], "kernel")).as_py() or 0)
    level = TraceLevel.HARDWARE if kernels else TraceLevel.FRAMEWORK
    hardware, hardware_source = _hardware(trace.metadata)
    device = _device(table)
    seconds = sum(steps_ns) / 1e9
    framework_version = str(trace.metadata.get("torch_version", UNKNOWN))
    return EvaluationRecord(
        id=uuid.uuid4().hex,
        created_at=datetime.now(UTC),
        request=EvaluationRequest(
            model=model,
            framework="torch",
            hw=alias_of(hardware.gpus[0].name) if hardware.gpus else "cpu",
            batch_sizes=[batch_size],
            iterations=len(steps_ns),
            warmup=0,
            min_seconds=0.0,
            trace_level=level,
            inputs=[source],
        ),
        model=ModelRef(name=model, version=UNKNOWN),
        framework=FrameworkRef(name="torch", version=framework_version),
        hardware=hardware,
        device=device,
        software={
            name: str(trace.metadata[key])
            for name, key in SOFTWARE_KEYS.items()
            if key in trace.metadata
        },
        settings={
            "imported": "kineto",
            "source": source,
            "source_sha256": trace.sha256,
            "steps": "the whole trace counts as one predict: it has no ProfilerStep#N"
            if whole_trace(table)
            else "ProfilerStep#N annotations",
            "hardware": hardware_source,
            **(
                {"ranks": ", ".join(f"{r}: {name}" for r, name in trace.sources.items())}
                if len(trace.sources) > 1
                else {}
            ),
        },
        trace_level=level.label,
        trace_id=trace.trace_id,
        trace_archive=archive,
        span_count=table.num_rows,
        queue_wait_seconds=0.0,
        asset_sha256="",
        results=[
            BatchResult(
                batch_size=batch_size,
                iterations=len(steps_ns),
                seconds=seconds,
                latency_ms=latency_stats(steps_ns),
                throughput=batch_size * len(steps_ns) / seconds if seconds else 0.0,
            )
        ],
        accuracy=None,
        agent={"mode": "import", "source": source},
    )


def whole_trace(table: pa.Table) -> bool:
    """Whether the trace had no ProfilerStep and the import made one of its whole range."""
    return bool(pc.any(pc.equal(table["name"], WHOLE_TRACE)).as_py())


def _step_durations(table: pa.Table) -> list[int]:
    """ProfilerStep durations (ns) in time order; of several ranks, each step's slowest
    rank's (the run's step ends with its last rank), over the steps every rank recorded."""
    steps = table.filter(pc.equal(table["level"], int(TraceLevel.MODEL)))
    steps = steps.sort_by([("rank", "ascending"), ("start_ns", "ascending")])
    durations = pc.subtract(steps["end_ns"], steps["start_ns"]).to_pylist()
    by_rank: dict[int | None, list[int]] = defaultdict(list)
    for rank, duration in zip(steps["rank"].to_pylist(), durations, strict=True):
        by_rank[rank].append(duration)
    return [max(step) for step in zip(*by_rank.values(), strict=False)]


def _hardware(metadata: dict[str, Any]) -> tuple[HardwareInfo, str]:
    """GPUs from ``deviceProperties``; host and CPU from this machine only when the trace
    names it as its host, else unknown. Also says where the figures came from."""
    driver = str(metadata.get("cuda_driver_version", UNKNOWN))
    gpus = [
        GpuInfo(
            index=int(device.get("id", index)),
            name=str(device.get("name", UNKNOWN)),
            alias=alias_of(str(device.get("name", UNKNOWN))),
            memory_bytes=int(device.get("totalGlobalMem", 0)),
            compute_capability=f"{device.get('computeMajor')}.{device.get('computeMinor')}",
            driver=driver,
        )
        for index, device in enumerate(metadata.get("deviceProperties") or [])
        if isinstance(device, dict)
    ]
    if metadata.get("host_name") == socket.gethostname():
        source = "GPUs from the trace's deviceProperties; CPU and memory of this machine, "
        return detect().model_copy(update={"gpus": gpus}), source + "its host"
    unknown = HardwareInfo(
        host=str(metadata.get("host_name", UNKNOWN)),
        cpu_brand=UNKNOWN,
        cpu_cores_logical=0,
        cpu_cores_physical=None,
        memory_bytes=0,
        machine=UNKNOWN,
        gpus=gpus,
    )
    return unknown, "GPUs from the trace's deviceProperties; the host's CPU is not in the trace"


def _device(table: pa.Table) -> str:
    """The GPU the kernels ran on (the first of several), else cpu: a trace of CPU work made
    on a machine with GPUs lists them in deviceProperties, but ran on none of them."""
    devices = pc.drop_null(table["device"]).unique().to_pylist()
    return sorted(devices)[0] if devices else "cpu"
