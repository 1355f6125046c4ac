"""The report's header: which evaluations it shows, on what, when, and with which settings."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.summary import device_name, gpu_of
from mlms.report.html import Section, collapsed, question, table


def label(record: EvaluationRecord) -> str:
    """A short name for headings: model on framework, device (id prefix)."""
    return (
        f"{record.model.name} on {record.framework.name} {record.framework.version}, "
        f"{device_name(record)} ({record.id[:8]})"
    )


def short_label(record: EvaluationRecord) -> str:
    """A shorter name for the table of contents: model, framework, device, id prefix."""
    return f"{record.model.name} · {record.framework.name} · {record.device} · {record.id[:8]}"


def hardware(record: EvaluationRecord) -> str:
    """The machine in one line: the GPU (with its compute capability and driver) where the
    evaluation ran on one, then the CPU, cores, memory and host."""
    hw = record.hardware
    cpu = (
        f"{hw.cpu_brand}, {hw.cpu_cores_logical} cores, {hw.memory_bytes / 2**30:.0f} GiB "
        f"({hw.host}, {hw.machine})"
    )
    gpu = gpu_of(record)
    if gpu is None:
        return cpu
    return (
        f"{gpu.name} ({gpu.memory_bytes / 2**30:.0f} GiB, compute capability "
        f"{gpu.compute_capability}, driver {gpu.driver}) on {cpu}"
    )


def evaluations_section(records: Sequence[EvaluationRecord]) -> Section:
    """Which evaluations are these? One column each: model, framework, device and hardware,
    date, precision, trace level, batch sizes, accuracy and id; then each one's settings and
    software."""
    section = Section("Evaluations", "evaluations")
    fields = {
        "evaluation": [r.id for r in records],
        "model": [f"{r.model.name} {r.model.version}" for r in records],
        "framework": [f"{r.framework.name} {r.framework.version}" for r in records],
        "device": [r.device for r in records],
        "hardware": [hardware(r) for r in records],
        "date (UTC)": [r.created_at.strftime("%Y-%m-%d %H:%M:%S") for r in records],
        "precision": [r.request.precision for r in records],
        "trace level": [r.trace_level for r in records],
        "batch sizes": [", ".join(str(b.batch_size) for b in r.results) for r in records],
        "status": [r.status for r in records],
        "accuracy": [_accuracy(r) for r in records],
    }
    columns = [r.id[:8] for r in records]
    header = pd.DataFrame(list(fields.values()), columns=columns)
    header.insert(0, "", list(fields))
    section.add(
        question("What was evaluated, on which machine, when, and how deep was it traced?"),
        table(header, table_id="evaluations", wrap=set(columns)),
    )
    for record in records:
        settings = {
            **{f"setting: {k}": v for k, v in record.settings.items()},
            **{f"software: {k}": v for k, v in record.software.items()},
            "trace id": record.trace_id or "none (not traced)",
            "asset sha256": record.asset_sha256,
            "queue wait (s)": record.queue_wait_seconds,
            "spans": record.span_count,
        }
        frame = pd.DataFrame({"key": list(settings), "value": [str(v) for v in settings.values()]})
        section.add(collapsed(f"settings and software of {label(record)}", table(frame)))
    return section


def _accuracy(record: EvaluationRecord) -> str:
    if record.accuracy is None:
        return "not measured"
    acc = record.accuracy
    return f"{acc.line()} on {acc.dataset} ({acc.samples} samples)"
