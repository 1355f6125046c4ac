"""The JSON payloads inside mlms.v1 messages, parsed into the pydantic models they carry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mlms.bounds.record import BoundRequest
from mlms.errors import InvalidArgument, Unavailable
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import Progress, ProgressCallback

M = TypeVar("M", bound=BaseModel)


def evaluation_request(text: str) -> EvaluationRequest:
    """An ``EvaluationRequest`` from JSON; a bad field is one InvalidArgument line.

    Image files are read where the evaluation runs: over gRPC that is another machine, whose
    files are not the caller's to name, so only the synthetic and dataset inputs come this way.
    """
    request = _parse(EvaluationRequest, text, "evaluation")
    if request.inputs not in (["synthetic"], ["dataset"]):
        raise InvalidArgument(
            f"bad evaluation request: inputs {_short(request.inputs)}: image files are read "
            "where the evaluation runs, so a remote evaluation takes 'synthetic' or 'dataset' "
            "(evaluate image files without --server)"
        )
    return request


def bound_request(text: str) -> BoundRequest:
    """A ``BoundRequest`` from JSON; a bad field is one InvalidArgument line."""
    return _parse(BoundRequest, text, "bound")


def _parse(model: type[M], text: str, what: str) -> M:
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "request"
        got = "" if first["type"] == "value_error" else f", got {_short(first['input'])}"
        raise InvalidArgument(f"bad {what} request: {field}: {first['msg']}{got}") from None


def _short(value: Any) -> str:
    """A value for a one-line message: at most 80 characters of its repr."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def record_from_events(events: Iterable[Any], progress: ProgressCallback | None, peer: str) -> str:
    """Report an Evaluate stream's progress events; return the record's JSON, which ends it."""
    for event in events:
        which = event.WhichOneof("event")
        if which == "progress" and progress is not None:
            p = event.progress
            progress(Progress(p.batch_size, p.run, p.done, p.target))
        elif which == "record_json":
            return event.record_json
    raise Unavailable(f"{peer} ended the evaluation stream without a record")
