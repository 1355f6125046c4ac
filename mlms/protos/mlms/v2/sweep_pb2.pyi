import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CellState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CELL_STATE_UNSPECIFIED: _ClassVar[CellState]
    CELL_STATE_PENDING: _ClassVar[CellState]
    CELL_STATE_RUNNING: _ClassVar[CellState]
    CELL_STATE_COMPLETED: _ClassVar[CellState]
    CELL_STATE_FAILED: _ClassVar[CellState]
CELL_STATE_UNSPECIFIED: CellState
CELL_STATE_PENDING: CellState
CELL_STATE_RUNNING: CellState
CELL_STATE_COMPLETED: CellState
CELL_STATE_FAILED: CellState

class SweepSpec(_message.Message):
    __slots__ = ("models", "frameworks", "batch_sizes", "hw", "iterations", "warmup", "min_seconds", "tensor_parallel", "precisions", "cudnn_benchmark")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    CUDNN_BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    frameworks: _containers.RepeatedScalarFieldContainer[str]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    hw: _containers.RepeatedScalarFieldContainer[str]
    iterations: int
    warmup: int
    min_seconds: float
    tensor_parallel: int
    precisions: _containers.RepeatedScalarFieldContainer[str]
    cudnn_benchmark: bool
    def __init__(self, models: _Optional[_Iterable[str]] = ..., frameworks: _Optional[_Iterable[str]] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., hw: _Optional[_Iterable[str]] = ..., iterations: _Optional[int] = ..., warmup: _Optional[int] = ..., min_seconds: _Optional[float] = ..., tensor_parallel: _Optional[int] = ..., precisions: _Optional[_Iterable[str]] = ..., cudnn_benchmark: _Optional[bool] = ...) -> None: ...

class SweepCell(_message.Message):
    __slots__ = ("model", "framework", "batch_size", "hw", "evaluation_id", "state", "agent_id", "started_at", "finished_at", "error", "p50_ms", "throughput", "joules_per_inference", "precision")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    JOULES_PER_INFERENCE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    model: str
    framework: str
    batch_size: int
    hw: str
    evaluation_id: str
    state: CellState
    agent_id: str
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    error: str
    p50_ms: float
    throughput: float
    joules_per_inference: float
    precision: str
    def __init__(self, model: _Optional[str] = ..., framework: _Optional[str] = ..., batch_size: _Optional[int] = ..., hw: _Optional[str] = ..., evaluation_id: _Optional[str] = ..., state: _Optional[_Union[CellState, str]] = ..., agent_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., p50_ms: _Optional[float] = ..., throughput: _Optional[float] = ..., joules_per_inference: _Optional[float] = ..., precision: _Optional[str] = ...) -> None: ...

class SweepState(_message.Message):
    __slots__ = ("id", "created_at", "spec", "cells")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: _timestamp_pb2.Timestamp
    spec: SweepSpec
    cells: _containers.RepeatedCompositeFieldContainer[SweepCell]
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., spec: _Optional[_Union[SweepSpec, _Mapping]] = ..., cells: _Optional[_Iterable[_Union[SweepCell, _Mapping]]] = ...) -> None: ...

class SweepRequest(_message.Message):
    __slots__ = ("spec", "sweep_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SWEEP_ID_FIELD_NUMBER: _ClassVar[int]
    spec: SweepSpec
    sweep_id: str
    def __init__(self, spec: _Optional[_Union[SweepSpec, _Mapping]] = ..., sweep_id: _Optional[str] = ...) -> None: ...
