"""What the run form and ``POST /api/evaluations`` send, checked into an ``EvaluationRequest``
with one message naming the first bad value; the same parsing as ``mlms eval``'s options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlms.errors import InvalidArgument, UnknownModel
from mlms.evaluation.record import EvaluationRequest
from mlms.frameworks import FRAMEWORKS
from mlms.manifest import ModelManifest
from mlms.user_input import parse_batch_sizes, validated

FIELDS = ("model", "framework", "hw", "batch_sizes", "trace_level", "iterations", "warmup",
          "min_seconds")  # fmt: skip
DEFAULTS = {"hw": "cpu", "batch_sizes": "1", "trace_level": "model", "iterations": "20",
            "warmup": "3", "min_seconds": "1"}  # fmt: skip


def as_text(fields: Mapping[str, object]) -> dict[str, str]:
    """JSON values as the form's text (``[1, 8]`` -> ``"1,8"``); unknown names refused."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise InvalidArgument(f"unknown field {unknown[0]!r}: expected some of {', '.join(FIELDS)}")
    text = {}
    for name, value in fields.items():
        if isinstance(value, list):
            value = ",".join(map(str, value))
        elif value is None:
            continue
        elif not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InvalidArgument(f"bad {name} {value!r}: expected text or a number")
        text[name] = str(value)
    return text


def evaluation_request(
    fields: Mapping[str, str], models: Sequence[ModelManifest]
) -> EvaluationRequest:
    values = {**DEFAULTS, **{k: v.strip() for k, v in fields.items() if v.strip()}}
    model = values.get("model", "")
    names = [m.name for m in models]
    if model not in names:
        raise UnknownModel(
            f"unknown model {model!r}: expected one of the zoo's {', '.join(names)}"
            if model
            else f"no model given: expected one of the zoo's {', '.join(names)}"
        )
    framework = values.get("framework") or None
    if framework is not None and framework not in FRAMEWORKS:
        raise InvalidArgument(
            f"unknown framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}"
        )
    return validated(
        EvaluationRequest,
        model=model,
        framework=framework,
        hw=values["hw"],
        batch_sizes=parse_batch_sizes(values["batch_sizes"]),
        trace_level=values["trace_level"],
        iterations=_number("iterations", values["iterations"], int),
        warmup=_number("warmup", values["warmup"], int),
        min_seconds=_number("min_seconds", values["min_seconds"], float),
    )


def _number(name: str, text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        expected = "a whole number" if kind is int else "a number of seconds"
        raise InvalidArgument(f"bad {name} {text!r}: expected {expected}") from None
