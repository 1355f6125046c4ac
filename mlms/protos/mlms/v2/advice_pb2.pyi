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

class AdviceSpec(_message.Message):
    __slots__ = ("model", "hw", "objective", "frameworks", "precisions", "compile_modes", "channels_last", "threads", "batch_sizes", "slo_ms", "percentile", "dataset", "max_accuracy_drop", "budget_minutes", "verify", "iterations", "min_seconds", "probe_iterations", "probe_min_seconds", "use_stored", "tensor_parallel")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MODES_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_LAST_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    SLO_MS_FIELD_NUMBER: _ClassVar[int]
    PERCENTILE_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    MAX_ACCURACY_DROP_FIELD_NUMBER: _ClassVar[int]
    BUDGET_MINUTES_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROBE_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    PROBE_MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USE_STORED_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    hw: str
    objective: str
    frameworks: _types_pb2.StringList
    precisions: _types_pb2.StringList
    compile_modes: _types_pb2.StringList
    channels_last: bool
    threads: _types_pb2.Int64List
    batch_sizes: _types_pb2.Int64List
    slo_ms: float
    percentile: float
    dataset: str
    max_accuracy_drop: float
    budget_minutes: float
    verify: int
    iterations: int
    min_seconds: float
    probe_iterations: int
    probe_min_seconds: float
    use_stored: bool
    tensor_parallel: int
    def __init__(self, model: _Optional[str] = ..., hw: _Optional[str] = ..., objective: _Optional[str] = ..., frameworks: _Optional[_Union[_types_pb2.StringList, _Mapping]] = ..., precisions: _Optional[_Union[_types_pb2.StringList, _Mapping]] = ..., compile_modes: _Optional[_Union[_types_pb2.StringList, _Mapping]] = ..., channels_last: _Optional[bool] = ..., threads: _Optional[_Union[_types_pb2.Int64List, _Mapping]] = ..., batch_sizes: _Optional[_Union[_types_pb2.Int64List, _Mapping]] = ..., slo_ms: _Optional[float] = ..., percentile: _Optional[float] = ..., dataset: _Optional[str] = ..., max_accuracy_drop: _Optional[float] = ..., budget_minutes: _Optional[float] = ..., verify: _Optional[int] = ..., iterations: _Optional[int] = ..., min_seconds: _Optional[float] = ..., probe_iterations: _Optional[int] = ..., probe_min_seconds: _Optional[float] = ..., use_stored: _Optional[bool] = ..., tensor_parallel: _Optional[int] = ...) -> None: ...

class AdviceConfig(_message.Message):
    __slots__ = ("framework", "precision", "compile", "channels_last", "threads", "batch_size")
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_LAST_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    framework: str
    precision: str
    compile: str
    channels_last: bool
    threads: int
    batch_size: int
    def __init__(self, framework: _Optional[str] = ..., precision: _Optional[str] = ..., compile: _Optional[str] = ..., channels_last: _Optional[bool] = ..., threads: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class AdviceObservation(_message.Message):
    __slots__ = ("config", "source", "evaluation_id", "value", "p50_ms", "latency_ms", "spread", "seconds", "launch_ms", "device_ms")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SPREAD_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_MS_FIELD_NUMBER: _ClassVar[int]
    config: AdviceConfig
    source: str
    evaluation_id: str
    value: float
    p50_ms: float
    latency_ms: float
    spread: float
    seconds: float
    launch_ms: float
    device_ms: float
    def __init__(self, config: _Optional[_Union[AdviceConfig, _Mapping]] = ..., source: _Optional[str] = ..., evaluation_id: _Optional[str] = ..., value: _Optional[float] = ..., p50_ms: _Optional[float] = ..., latency_ms: _Optional[float] = ..., spread: _Optional[float] = ..., seconds: _Optional[float] = ..., launch_ms: _Optional[float] = ..., device_ms: _Optional[float] = ...) -> None: ...

class AdviceRow(_message.Message):
    __slots__ = ("config", "predicted", "low", "high", "basis", "predicted_latency_ms", "meets_slo", "achieved", "achieved_latency_ms", "evaluation_id", "error", "accuracy", "accuracy_holds")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    MEETS_SLO_FIELD_NUMBER: _ClassVar[int]
    ACHIEVED_FIELD_NUMBER: _ClassVar[int]
    ACHIEVED_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_HOLDS_FIELD_NUMBER: _ClassVar[int]
    config: AdviceConfig
    predicted: float
    low: float
    high: float
    basis: str
    predicted_latency_ms: float
    meets_slo: bool
    achieved: float
    achieved_latency_ms: float
    evaluation_id: str
    error: float
    accuracy: str
    accuracy_holds: bool
    def __init__(self, config: _Optional[_Union[AdviceConfig, _Mapping]] = ..., predicted: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., basis: _Optional[str] = ..., predicted_latency_ms: _Optional[float] = ..., meets_slo: _Optional[bool] = ..., achieved: _Optional[float] = ..., achieved_latency_ms: _Optional[float] = ..., evaluation_id: _Optional[str] = ..., error: _Optional[float] = ..., accuracy: _Optional[str] = ..., accuracy_holds: _Optional[bool] = ...) -> None: ...

class AdviceRecord(_message.Message):
    __slots__ = ("id", "created_at", "request", "model", "device", "device_name", "hardware", "frameworks", "space", "left_out", "evidence", "observations", "rows", "recommendation", "why", "baselines", "probe_seconds", "verify_seconds", "seconds", "median_error", "coverage")
    class FrameworksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class BaselinesEntry(_message.Message):
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
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    LEFT_OUT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDATION_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    BASELINES_FIELD_NUMBER: _ClassVar[int]
    PROBE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_ERROR_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: _timestamp_pb2.Timestamp
    request: AdviceSpec
    model: str
    device: str
    device_name: str
    hardware: _fleet_pb2.HardwareInfo
    frameworks: _containers.ScalarMap[str, str]
    space: int
    left_out: _containers.RepeatedScalarFieldContainer[str]
    evidence: _containers.RepeatedScalarFieldContainer[str]
    observations: _containers.RepeatedCompositeFieldContainer[AdviceObservation]
    rows: _containers.RepeatedCompositeFieldContainer[AdviceRow]
    recommendation: AdviceRow
    why: str
    baselines: _containers.ScalarMap[str, str]
    probe_seconds: float
    verify_seconds: float
    seconds: float
    median_error: float
    coverage: float
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request: _Optional[_Union[AdviceSpec, _Mapping]] = ..., model: _Optional[str] = ..., device: _Optional[str] = ..., device_name: _Optional[str] = ..., hardware: _Optional[_Union[_fleet_pb2.HardwareInfo, _Mapping]] = ..., frameworks: _Optional[_Mapping[str, str]] = ..., space: _Optional[int] = ..., left_out: _Optional[_Iterable[str]] = ..., evidence: _Optional[_Iterable[str]] = ..., observations: _Optional[_Iterable[_Union[AdviceObservation, _Mapping]]] = ..., rows: _Optional[_Iterable[_Union[AdviceRow, _Mapping]]] = ..., recommendation: _Optional[_Union[AdviceRow, _Mapping]] = ..., why: _Optional[str] = ..., baselines: _Optional[_Mapping[str, str]] = ..., probe_seconds: _Optional[float] = ..., verify_seconds: _Optional[float] = ..., seconds: _Optional[float] = ..., median_error: _Optional[float] = ..., coverage: _Optional[float] = ...) -> None: ...

class AdviseRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: AdviceSpec
    def __init__(self, spec: _Optional[_Union[AdviceSpec, _Mapping]] = ...) -> None: ...

class AdviseEvent(_message.Message):
    __slots__ = ("step", "advice")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ADVICE_FIELD_NUMBER: _ClassVar[int]
    step: str
    advice: AdviceRecord
    def __init__(self, step: _Optional[str] = ..., advice: _Optional[_Union[AdviceRecord, _Mapping]] = ...) -> None: ...

class ListAdviceRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAdviceResponse(_message.Message):
    __slots__ = ("advice",)
    ADVICE_FIELD_NUMBER: _ClassVar[int]
    advice: _containers.RepeatedCompositeFieldContainer[AdviceRecord]
    def __init__(self, advice: _Optional[_Iterable[_Union[AdviceRecord, _Mapping]]] = ...) -> None: ...
