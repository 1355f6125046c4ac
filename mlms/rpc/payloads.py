"""The requests and records that mlms.v2 calls carry, as the domain models (``convert``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from mlms.bounds.record import BoundRecord, BoundRequest
from mlms.errors import InvalidArgument, Unavailable
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.protos.mlms.v2 import bound_pb2, calls_pb2, evaluation_pb2
from mlms.reasons import short
from mlms.rpc.convert import from_proto, to_proto

R = TypeVar("R", EvaluationRecord, BoundRecord)


def evaluation_request(spec: evaluation_pb2.EvaluationSpec) -> EvaluationRequest:
    """The request an ``EvaluationSpec`` holds; a bad field is one InvalidArgument line.

    Image files are read where the evaluation runs: over gRPC that is another machine, whose
    files are not the caller's to name, so only the synthetic and dataset inputs come this way.
    """
    request = from_proto(spec, EvaluationRequest, "evaluation request")
    if request.inputs not in (["synthetic"], ["dataset"]):
        raise InvalidArgument(
            f"bad evaluation request: inputs {short(request.inputs)}: image files are read "
            "where the evaluation runs, so a remote evaluation takes 'synthetic' or 'dataset' "
            "(evaluate image files without --server)"
        )
    return request


def bound_request(spec: bound_pb2.BoundSpec) -> BoundRequest:
    """The request a ``BoundSpec`` holds; a bad field is one InvalidArgument line."""
    return from_proto(spec, BoundRequest, "bound request")


def evaluate_message(
    request: EvaluationRequest, evaluation_id: str = ""
) -> calls_pb2.EvaluateRequest:
    return calls_pb2.EvaluateRequest(
        spec=to_proto(request, evaluation_pb2.EvaluationSpec), evaluation_id=evaluation_id
    )


def bound_message(request: BoundRequest, bound_id: str = "") -> calls_pb2.BoundRequest:
    return calls_pb2.BoundRequest(spec=to_proto(request, bound_pb2.BoundSpec), bound_id=bound_id)


def record_event(record: EvaluationRecord | BoundRecord) -> calls_pb2.EvaluateEvent:
    """The event that ends an Evaluate or a Bound stream."""
    if isinstance(record, BoundRecord):
        return calls_pb2.EvaluateEvent(bound=to_proto(record, bound_pb2.BoundRecord))
    return calls_pb2.EvaluateEvent(evaluation=to_proto(record, evaluation_pb2.EvaluationRecord))


def record_from_events(
    events: Iterable[calls_pb2.EvaluateEvent],
    progress: ProgressCallback | None,
    peer: str,
    record: type[R],
) -> R:
    """Report an Evaluate or Bound stream's progress events; return the record that ends it."""
    field = "bound" if record is BoundRecord else "evaluation"
    for event in events:
        which = event.WhichOneof("event")
        if which == "progress" and progress is not None:
            p = event.progress
            progress(Progress(p.batch_size, p.run, p.done, p.target))
        elif which == field:
            return from_proto(getattr(event, field), record, f"record from {peer}")
    raise Unavailable(f"{peer} ended the {field} stream without a record")
