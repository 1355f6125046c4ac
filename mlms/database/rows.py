"""A record as rows of the index, and an index row as a summary."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mlms.database.schema import NO_ACCURACY
from mlms.evaluation.headline import higher_is_better
from mlms.evaluation.listed_options import RunOptions
from mlms.evaluation.summary import EvaluationSummary

if TYPE_CHECKING:
    from mlms.evaluation.record import EvaluationRecord


def utc_naive(moment: datetime) -> datetime:
    """The index keeps UTC without a zone (both dialects compare those the same way)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def evaluation_row(record: EvaluationRecord) -> dict[str, Any]:
    summary = EvaluationSummary.of(record)
    request = record.request
    row = {
        "id": record.id,
        "created_at": utc_naive(record.created_at),
        "status": record.status,
        "model": summary.model,
        "model_version": summary.model_version,
        "framework": summary.framework,
        "framework_version": summary.framework_version,
        "hw": summary.hw,
        "hardware": summary.hardware,
        "device": record.device,
        "host": record.hardware.host,
        "precision": request.precision,
        "compile": request.compile,
        "channels_last": request.channels_last,
        "input_on_device": request.input_on_device,
        "inputs": ",".join(request.inputs)[:512],
        "seq_len": request.seq_len,
        "generate": request.generate,
        "trace_level": record.trace_level,
        "trace_id": record.trace_id,
        "batch_sizes": ",".join(map(str, summary.batch_sizes)),
        "p50_ms": summary.p50_ms,
        "throughput": summary.throughput,
        "accuracy_top1": summary.accuracy_top1,
        "accuracy_top5": record.accuracy.top5 if record.accuracy else None,
        "dataset": record.accuracy.dataset if record.accuracy else None,
        "task": summary.task,
        "accuracy_metric": summary.accuracy_metric,
        "accuracy_value": summary.accuracy_value,
        "accuracy_order": accuracy_order(summary),
        "agent_id": record.agent.get("agent_id", ""),
        "agent": summary.agent,
    }
    row["search"] = " ".join(
        str(row[key]).lower()
        for key in ("id", "model", "framework", "framework_version", "hw", "hardware", "device",
                    "precision", "trace_level", "status", "agent", "host")
    )  # fmt: skip
    return row


def accuracy_order(summary: EvaluationSummary) -> float:
    """The headline signed so that higher is better whatever the task (a perplexity negated):
    what sorting by accuracy orders on; below every headline where there is none."""
    value = summary.accuracy_value
    if value is None or summary.task is None:
        return float(NO_ACCURACY)
    return value if higher_is_better(summary.task) else -value


def result_rows(record: EvaluationRecord) -> list[dict[str, Any]]:
    return [
        {
            "evaluation_id": record.id,
            "batch_size": result.batch_size,
            "p50_ms": result.latency_ms.p50,
            "p90_ms": result.latency_ms.p90,
            "p99_ms": result.latency_ms.p99,
            "mean_ms": result.latency_ms.mean,
            "throughput": result.throughput,
        }
        for result in record.results
    ]


def summary_of(row: Mapping[str, Any]) -> EvaluationSummary:
    # The row holds what a validated record gave it (``evaluation_row``): no second validation
    # per row of a page.
    return EvaluationSummary.model_construct(
        id=row["id"],
        created_at=row["created_at"].replace(tzinfo=UTC),
        status=row["status"],
        model=row["model"],
        model_version=row["model_version"],
        framework=row["framework"],
        framework_version=row["framework_version"],
        hw=row["hw"],
        hardware=row["hardware"],
        device=row["device"],
        precision=row["precision"],
        compile=row["compile"],
        trace_level=row["trace_level"],
        trace_id=row["trace_id"],
        batch_sizes=[int(b) for b in row["batch_sizes"].split(",") if b],
        p50_ms=row["p50_ms"],
        throughput=row["throughput"],
        accuracy_top1=row["accuracy_top1"],
        task=row["task"],
        accuracy_metric=row["accuracy_metric"],
        accuracy_value=row["accuracy_value"],
        agent=row["agent"],
        options=_options(row),
    )


def _options(row: Mapping[str, Any]) -> str:
    """``EvaluationRequest.options`` from the indexed fields (threads are not indexed)."""
    return RunOptions(
        precision=row["precision"],
        compile=row["compile"],
        channels_last=row["channels_last"],
        inputs=tuple(row["inputs"].split(",")) if row["inputs"] else ("synthetic",),
        input_on_device=row["input_on_device"],
        seq_len=row["seq_len"],
        generate=row["generate"],
    ).line()
