"""Domain models -> mlms.v2 messages -> domain models gives back what went in (hypothesis), and
a message that breaks a model's rules is one InvalidArgument line naming the field."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from mlms.bounds.record import BoundRecord, BoundRequest
from mlms.catalog.zoo import all_models
from mlms.errors import InvalidArgument
from mlms.evaluation.precisions import PRECISIONS
from mlms.evaluation.record import (
    MAX_BATCH_SIZE,
    MAX_ITERATIONS,
    MAX_SEED,
    MAX_THREADS,
    MAX_WARMUP,
    EvaluationRecord,
    EvaluationRequest,
)
from mlms.hardware import HardwareInfo
from mlms.manifest import ModelManifest
from mlms.protos.mlms.v2 import bound_pb2, evaluation_pb2, fleet_pb2, manifest_pb2
from mlms.registry.base import AgentRecord
from mlms.rpc.convert import from_proto, to_proto
from mlms.server.jobs import Job
from mlms.tracer.levels import TraceLevel

INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = st.one_of(st.none(), st.booleans(), INT64, st.floats(allow_nan=False), st.text())
SIMPLE: dict[Any, st.SearchStrategy] = {
    int: INT64,
    float: st.floats(allow_nan=False),
    str: st.text(max_size=12),
    bool: st.booleans(),
    datetime: st.datetimes(timezones=st.just(UTC)),
    type(None): st.none(),
    object: st.one_of(SCALARS, st.lists(st.text(max_size=5), max_size=3)),  # settings
}


def strategy(annotation: Any) -> st.SearchStrategy:
    """Values of a model field's type (models built field by field, with no constraints: the
    models used here have none that these values break)."""
    if annotation in SIMPLE:
        return SIMPLE[annotation]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return models(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*map(strategy, args))
    if origin is list:
        return st.lists(strategy(args[0]), max_size=3)
    if origin is tuple:
        return st.tuples(*map(strategy, args))
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), strategy(args[1]), max_size=3)
    raise TypeError(f"no strategy for {annotation!r}")


def models(model: type[BaseModel], **fixed: st.SearchStrategy) -> st.SearchStrategy:
    fields = {
        name: fixed[name] if name in fixed else strategy(info.annotation)
        for name, info in model.model_fields.items()
    }
    return st.fixed_dictionaries(fields).map(model.model_validate)


def sizes() -> st.SearchStrategy:
    return st.lists(st.integers(1, MAX_BATCH_SIZE), min_size=1, max_size=4)


REQUESTS = st.builds(
    EvaluationRequest,
    model=st.text(max_size=12),
    framework=st.none() | st.text(max_size=8),
    hw=st.text(max_size=8),
    batch_sizes=sizes(),
    iterations=st.integers(1, MAX_ITERATIONS),
    warmup=st.integers(0, MAX_WARMUP),
    min_seconds=st.floats(0, 3600),
    trace_level=st.sampled_from(list(TraceLevel)),
    inputs=st.lists(st.text(max_size=8), min_size=1, max_size=3),
    intra_op_threads=st.none() | st.integers(1, MAX_THREADS),
    inter_op_threads=st.none() | st.integers(1, MAX_THREADS),
    seed=st.integers(0, MAX_SEED),
)
BOUND_REQUESTS = st.builds(
    BoundRequest,
    model=st.text(max_size=12),
    framework=st.none() | st.text(max_size=8),
    batch_sizes=sizes(),
    precisions=st.none() | st.lists(st.sampled_from(PRECISIONS), min_size=1, max_size=4),
    repeats=st.integers(3, 10_000),
)


def round_trip(model: BaseModel, message: type) -> BaseModel:
    return from_proto(to_proto(model, message), type(model), "test value")


@settings(max_examples=150, deadline=None)
@given(REQUESTS)
def test_evaluation_requests(request: EvaluationRequest) -> None:
    assert round_trip(request, evaluation_pb2.EvaluationSpec) == request


@settings(max_examples=60, deadline=None)
@given(
    models(
        EvaluationRecord,
        request=REQUESTS,
        trace_level=st.sampled_from([level.label for level in TraceLevel]),
    )
)
def test_evaluation_records(record: EvaluationRecord) -> None:
    assert round_trip(record, evaluation_pb2.EvaluationRecord) == record


@settings(max_examples=60, deadline=None)
@given(models(BoundRecord, request=BOUND_REQUESTS))
def test_bound_records(record: BoundRecord) -> None:
    assert round_trip(record, bound_pb2.BoundRecord) == record


@settings(max_examples=100, deadline=None)
@given(st.one_of(models(AgentRecord), models(Job), models(HardwareInfo)))
def test_fleet(value: BaseModel) -> None:
    message = {AgentRecord: fleet_pb2.AgentRecord, Job: fleet_pb2.Job}.get(
        type(value), fleet_pb2.HardwareInfo
    )
    assert round_trip(value, message) == value


@pytest.mark.parametrize("manifest", all_models(), ids=lambda m: m.name)
def test_every_manifest_of_the_zoo(manifest: ModelManifest) -> None:
    assert round_trip(manifest, manifest_pb2.ModelManifest) == manifest


def test_unset_fields_take_the_defaults() -> None:
    """A client in another language sets only what it needs."""
    spec = evaluation_pb2.EvaluationSpec(model="resnet50")
    assert from_proto(spec, EvaluationRequest, "evaluation request") == EvaluationRequest(
        model="resnet50"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            evaluation_pb2.EvaluationSpec(model="m", batch_sizes=[0]),
            "bad evaluation request: batch_sizes: batch sizes must be positive integers up to "
            "4096, 1 to 32 of them, got [0]",
        ),
        (
            evaluation_pb2.EvaluationSpec(model="m", batch_sizes=[1], iterations=-3),
            "bad evaluation request: iterations: Input should be greater than or equal to 1, "
            "got -3",
        ),
        (
            evaluation_pb2.EvaluationSpec(model="m", batch_sizes=[1], trace_level=42),
            "bad evaluation request: trace_level: unknown TraceLevel 42; expected one of: "
            "TRACE_LEVEL_NO_TRACE, TRACE_LEVEL_APPLICATION, TRACE_LEVEL_MODEL, "
            "TRACE_LEVEL_FRAMEWORK, TRACE_LEVEL_ML_LIBRARY, TRACE_LEVEL_SYSTEM_LIBRARY, "
            "TRACE_LEVEL_HARDWARE, TRACE_LEVEL_FULL",
        ),
    ],
)
def test_a_bad_field_is_one_line_naming_it(spec, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        from_proto(spec, EvaluationRequest, "evaluation request")
    assert str(caught.value) == message


def test_an_unknown_enum_in_a_nested_message_is_invalid() -> None:
    manifest = to_proto(all_models()[0], manifest_pb2.ModelManifest)
    manifest.inputs[0].layout = 99
    with pytest.raises(InvalidArgument, match="layout: unknown Layout 99; expected one of: "):
        from_proto(manifest, ModelManifest, "manifest")
