"""The JSON payloads inside mlms.v1 messages, parsed into the pydantic models they carry."""

from __future__ import annotations

from pydantic import ValidationError

from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRequest


def evaluation_request(text: str) -> EvaluationRequest:
    """An ``EvaluationRequest`` from JSON; a bad field is one InvalidArgument line."""
    try:
        return EvaluationRequest.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "request"
        raise InvalidArgument(f"bad evaluation request: {field}: {first['msg']}") from None
