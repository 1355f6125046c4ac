import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mlms.protos.mlms.v2 import fleet_pb2 as _fleet_pb2
from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BoundSpec(_message.Message):
    __slots__ = ("model", "framework", "hw", "batch_sizes", "precisions", "repeats", "iterations", "min_seconds", "model_precision")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_PRECISION_FIELD_NUMBER: _ClassVar[int]
    model: str
    framework: str
    hw: str
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    precisions: _types_pb2.StringList
    repeats: int
    iterations: int
    min_seconds: float
    model_precision: str
    def __init__(self, model: _Optional[str] = ..., framework: _Optional[str] = ..., hw: _Optional[str] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., precisions: _Optional[_Union[_types_pb2.StringList, _Mapping]] = ..., repeats: _Optional[int] = ..., iterations: _Optional[int] = ..., min_seconds: _Optional[float] = ..., model_precision: _Optional[str] = ...) -> None: ...

class LayerBound(_message.Message):
    __slots__ = ("name", "node", "kind", "op", "input_shapes", "output_shape", "config", "framework_ms", "bound_ms", "bound_variant", "any_precision_ms", "any_precision_variant", "measured_ms", "on_critical_path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_MS_FIELD_NUMBER: _ClassVar[int]
    BOUND_MS_FIELD_NUMBER: _ClassVar[int]
    BOUND_VARIANT_FIELD_NUMBER: _ClassVar[int]
    ANY_PRECISION_MS_FIELD_NUMBER: _ClassVar[int]
    ANY_PRECISION_VARIANT_FIELD_NUMBER: _ClassVar[int]
    MEASURED_MS_FIELD_NUMBER: _ClassVar[int]
    ON_CRITICAL_PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    node: str
    kind: str
    op: str
    input_shapes: _containers.RepeatedCompositeFieldContainer[_types_pb2.Int64List]
    output_shape: _containers.RepeatedScalarFieldContainer[int]
    config: str
    framework_ms: float
    bound_ms: float
    bound_variant: str
    any_precision_ms: float
    any_precision_variant: str
    measured_ms: float
    on_critical_path: bool
    def __init__(self, name: _Optional[str] = ..., node: _Optional[str] = ..., kind: _Optional[str] = ..., op: _Optional[str] = ..., input_shapes: _Optional[_Iterable[_Union[_types_pb2.Int64List, _Mapping]]] = ..., output_shape: _Optional[_Iterable[int]] = ..., config: _Optional[str] = ..., framework_ms: _Optional[float] = ..., bound_ms: _Optional[float] = ..., bound_variant: _Optional[str] = ..., any_precision_ms: _Optional[float] = ..., any_precision_variant: _Optional[str] = ..., measured_ms: _Optional[float] = ..., on_critical_path: _Optional[bool] = ...) -> None: ...

class WhatIf(_message.Message):
    __slots__ = ("name", "now_ms", "if_ms", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    IF_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    now_ms: float
    if_ms: float
    detail: str
    def __init__(self, name: _Optional[str] = ..., now_ms: _Optional[float] = ..., if_ms: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class BatchBound(_message.Message):
    __slots__ = ("batch_size", "evaluation_id", "measured_ms", "kernel_ms", "sequential_ms", "parallel_ms", "what_ifs", "layers", "traced_ms")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEASURED_MS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_MS_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_MS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_MS_FIELD_NUMBER: _ClassVar[int]
    WHAT_IFS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    TRACED_MS_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    evaluation_id: str
    measured_ms: float
    kernel_ms: float
    sequential_ms: float
    parallel_ms: float
    what_ifs: _containers.RepeatedCompositeFieldContainer[WhatIf]
    layers: _containers.RepeatedCompositeFieldContainer[LayerBound]
    traced_ms: float
    def __init__(self, batch_size: _Optional[int] = ..., evaluation_id: _Optional[str] = ..., measured_ms: _Optional[float] = ..., kernel_ms: _Optional[float] = ..., sequential_ms: _Optional[float] = ..., parallel_ms: _Optional[float] = ..., what_ifs: _Optional[_Iterable[_Union[WhatIf, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[LayerBound, _Mapping]]] = ..., traced_ms: _Optional[float] = ...) -> None: ...

class BoundRecord(_message.Message):
    __slots__ = ("id", "created_at", "request", "model", "framework", "framework_version", "hardware", "device", "device_name", "libraries", "precisions", "framework_precisions", "benchmarked", "cached", "bench_seconds", "batches")
    class LibrariesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FrameworkPrecisionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    LIBRARIES_FIELD_NUMBER: _ClassVar[int]
    PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    BENCHMARKED_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    BENCH_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: _timestamp_pb2.Timestamp
    request: BoundSpec
    model: str
    framework: str
    framework_version: str
    hardware: _fleet_pb2.HardwareInfo
    device: str
    device_name: str
    libraries: _containers.ScalarMap[str, str]
    precisions: _containers.RepeatedScalarFieldContainer[str]
    framework_precisions: _containers.ScalarMap[str, str]
    benchmarked: int
    cached: int
    bench_seconds: float
    batches: _containers.RepeatedCompositeFieldContainer[BatchBound]
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request: _Optional[_Union[BoundSpec, _Mapping]] = ..., model: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., hardware: _Optional[_Union[_fleet_pb2.HardwareInfo, _Mapping]] = ..., device: _Optional[str] = ..., device_name: _Optional[str] = ..., libraries: _Optional[_Mapping[str, str]] = ..., precisions: _Optional[_Iterable[str]] = ..., framework_precisions: _Optional[_Mapping[str, str]] = ..., benchmarked: _Optional[int] = ..., cached: _Optional[int] = ..., bench_seconds: _Optional[float] = ..., batches: _Optional[_Iterable[_Union[BatchBound, _Mapping]]] = ...) -> None: ...
