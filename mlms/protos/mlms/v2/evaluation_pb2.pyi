import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mlms.protos.mlms.v2 import fleet_pb2 as _fleet_pb2
from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnergySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENERGY_SOURCE_UNSPECIFIED: _ClassVar[EnergySource]
    ENERGY_SOURCE_NVML: _ClassVar[EnergySource]
    ENERGY_SOURCE_RAPL: _ClassVar[EnergySource]

class EvaluationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVALUATION_STATUS_UNSPECIFIED: _ClassVar[EvaluationStatus]
    EVALUATION_STATUS_COMPLETED: _ClassVar[EvaluationStatus]
    EVALUATION_STATUS_FAILED: _ClassVar[EvaluationStatus]
ENERGY_SOURCE_UNSPECIFIED: EnergySource
ENERGY_SOURCE_NVML: EnergySource
ENERGY_SOURCE_RAPL: EnergySource
EVALUATION_STATUS_UNSPECIFIED: EvaluationStatus
EVALUATION_STATUS_COMPLETED: EvaluationStatus
EVALUATION_STATUS_FAILED: EvaluationStatus

class EvaluationSpec(_message.Message):
    __slots__ = ("model", "framework", "hw", "batch_sizes", "iterations", "warmup", "min_seconds", "trace_level", "inputs", "intra_op_threads", "inter_op_threads", "seed", "seq_len", "precision", "compile", "channels_last", "input_on_device", "generate", "dataset", "input_shapes", "tensor_parallel", "cudnn_benchmark")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRACE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    INTRA_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    INTER_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_LAST_FIELD_NUMBER: _ClassVar[int]
    INPUT_ON_DEVICE_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    CUDNN_BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    model: str
    framework: str
    hw: str
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    iterations: int
    warmup: int
    min_seconds: float
    trace_level: _types_pb2.TraceLevel
    inputs: _containers.RepeatedScalarFieldContainer[str]
    intra_op_threads: int
    inter_op_threads: int
    seed: int
    seq_len: int
    precision: str
    compile: str
    channels_last: bool
    input_on_device: bool
    generate: int
    dataset: str
    input_shapes: _containers.RepeatedCompositeFieldContainer[InputShape]
    tensor_parallel: int
    cudnn_benchmark: bool
    def __init__(self, model: _Optional[str] = ..., framework: _Optional[str] = ..., hw: _Optional[str] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., iterations: _Optional[int] = ..., warmup: _Optional[int] = ..., min_seconds: _Optional[float] = ..., trace_level: _Optional[_Union[_types_pb2.TraceLevel, str]] = ..., inputs: _Optional[_Iterable[str]] = ..., intra_op_threads: _Optional[int] = ..., inter_op_threads: _Optional[int] = ..., seed: _Optional[int] = ..., seq_len: _Optional[int] = ..., precision: _Optional[str] = ..., compile: _Optional[str] = ..., channels_last: _Optional[bool] = ..., input_on_device: _Optional[bool] = ..., generate: _Optional[int] = ..., dataset: _Optional[str] = ..., input_shapes: _Optional[_Iterable[_Union[InputShape, _Mapping]]] = ..., tensor_parallel: _Optional[int] = ..., cudnn_benchmark: _Optional[bool] = ...) -> None: ...

class InputShape(_message.Message):
    __slots__ = ("name", "shape")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class LatencyStats(_message.Message):
    __slots__ = ("p50", "p90", "p95", "p99", "mean", "min", "max", "trimmed_mean", "stdev", "median_ci95", "warning")
    P50_FIELD_NUMBER: _ClassVar[int]
    P90_FIELD_NUMBER: _ClassVar[int]
    P95_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    TRIMMED_MEAN_FIELD_NUMBER: _ClassVar[int]
    STDEV_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_CI95_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    min: float
    max: float
    trimmed_mean: float
    stdev: float
    median_ci95: _containers.RepeatedScalarFieldContainer[float]
    warning: str
    def __init__(self, p50: _Optional[float] = ..., p90: _Optional[float] = ..., p95: _Optional[float] = ..., p99: _Optional[float] = ..., mean: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., trimmed_mean: _Optional[float] = ..., stdev: _Optional[float] = ..., median_ci95: _Optional[_Iterable[float]] = ..., warning: _Optional[str] = ...) -> None: ...

class LevelResult(_message.Message):
    __slots__ = ("run", "iterations", "latency_ms", "overhead", "spans", "dropped")
    class LatencyMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    run: int
    iterations: int
    latency_ms: _containers.ScalarMap[str, float]
    overhead: float
    spans: int
    dropped: int
    def __init__(self, run: _Optional[int] = ..., iterations: _Optional[int] = ..., latency_ms: _Optional[_Mapping[str, float]] = ..., overhead: _Optional[float] = ..., spans: _Optional[int] = ..., dropped: _Optional[int] = ...) -> None: ...

class InputCopyResult(_message.Message):
    __slots__ = ("bytes", "latency_ms", "gb_per_s")
    class LatencyMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    GB_PER_S_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    latency_ms: _containers.ScalarMap[str, float]
    gb_per_s: float
    def __init__(self, bytes: _Optional[int] = ..., latency_ms: _Optional[_Mapping[str, float]] = ..., gb_per_s: _Optional[float] = ...) -> None: ...

class GenerationResult(_message.Message):
    __slots__ = ("new_tokens", "time_to_first_token_ms", "time_per_output_token_ms", "tokens_per_second")
    NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_PER_OUTPUT_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    new_tokens: int
    time_to_first_token_ms: LatencyStats
    time_per_output_token_ms: LatencyStats
    tokens_per_second: float
    def __init__(self, new_tokens: _Optional[int] = ..., time_to_first_token_ms: _Optional[_Union[LatencyStats, _Mapping]] = ..., time_per_output_token_ms: _Optional[_Union[LatencyStats, _Mapping]] = ..., tokens_per_second: _Optional[float] = ...) -> None: ...

class EnergyResult(_message.Message):
    __slots__ = ("source", "reason", "joules", "seconds", "joules_per_inference", "inferences_per_joule", "average_watts", "peak_watts", "idle_watts", "power_samples", "counter_period_s", "joules_uncertainty")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    JOULES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    JOULES_PER_INFERENCE_FIELD_NUMBER: _ClassVar[int]
    INFERENCES_PER_JOULE_FIELD_NUMBER: _ClassVar[int]
    AVERAGE_WATTS_FIELD_NUMBER: _ClassVar[int]
    PEAK_WATTS_FIELD_NUMBER: _ClassVar[int]
    IDLE_WATTS_FIELD_NUMBER: _ClassVar[int]
    POWER_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    COUNTER_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    JOULES_UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    source: EnergySource
    reason: str
    joules: float
    seconds: float
    joules_per_inference: float
    inferences_per_joule: float
    average_watts: float
    peak_watts: float
    idle_watts: float
    power_samples: int
    counter_period_s: float
    joules_uncertainty: float
    def __init__(self, source: _Optional[_Union[EnergySource, str]] = ..., reason: _Optional[str] = ..., joules: _Optional[float] = ..., seconds: _Optional[float] = ..., joules_per_inference: _Optional[float] = ..., inferences_per_joule: _Optional[float] = ..., average_watts: _Optional[float] = ..., peak_watts: _Optional[float] = ..., idle_watts: _Optional[float] = ..., power_samples: _Optional[int] = ..., counter_period_s: _Optional[float] = ..., joules_uncertainty: _Optional[float] = ...) -> None: ...

class RunConditions(_message.Message):
    __slots__ = ("sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "clock_limits", "cpu_steal")
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MIN_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    CLOCK_LIMITS_FIELD_NUMBER: _ClassVar[int]
    CPU_STEAL_FIELD_NUMBER: _ClassVar[int]
    sm_clock_mhz: float
    sm_clock_min_mhz: float
    sm_clock_max_mhz: float
    clock_limits: _containers.RepeatedScalarFieldContainer[str]
    cpu_steal: float
    def __init__(self, sm_clock_mhz: _Optional[float] = ..., sm_clock_min_mhz: _Optional[float] = ..., sm_clock_max_mhz: _Optional[float] = ..., clock_limits: _Optional[_Iterable[str]] = ..., cpu_steal: _Optional[float] = ...) -> None: ...

class BatchResult(_message.Message):
    __slots__ = ("batch_size", "iterations", "seconds", "latency_ms", "throughput", "levels", "input_copy", "generation", "energy", "samples", "conditions", "launch_ms", "device_ms")
    class LevelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: LevelResult
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[LevelResult, _Mapping]] = ...) -> None: ...
    class LaunchMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class DeviceMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    INPUT_COPY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ENERGY_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_MS_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    iterations: int
    seconds: float
    latency_ms: LatencyStats
    throughput: float
    levels: _containers.MessageMap[str, LevelResult]
    input_copy: InputCopyResult
    generation: GenerationResult
    energy: EnergyResult
    samples: int
    conditions: RunConditions
    launch_ms: _containers.ScalarMap[str, float]
    device_ms: _containers.ScalarMap[str, float]
    def __init__(self, batch_size: _Optional[int] = ..., iterations: _Optional[int] = ..., seconds: _Optional[float] = ..., latency_ms: _Optional[_Union[LatencyStats, _Mapping]] = ..., throughput: _Optional[float] = ..., levels: _Optional[_Mapping[str, LevelResult]] = ..., input_copy: _Optional[_Union[InputCopyResult, _Mapping]] = ..., generation: _Optional[_Union[GenerationResult, _Mapping]] = ..., energy: _Optional[_Union[EnergyResult, _Mapping]] = ..., samples: _Optional[int] = ..., conditions: _Optional[_Union[RunConditions, _Mapping]] = ..., launch_ms: _Optional[_Mapping[str, float]] = ..., device_ms: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Accuracy(_message.Message):
    __slots__ = ("top1", "top5", "samples", "dataset", "dataset_version", "dataset_sha256", "task", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TOP1_FIELD_NUMBER: _ClassVar[int]
    TOP5_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    DATASET_SHA256_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    top1: float
    top5: float
    samples: int
    dataset: str
    dataset_version: str
    dataset_sha256: str
    task: str
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, top1: _Optional[float] = ..., top5: _Optional[float] = ..., samples: _Optional[int] = ..., dataset: _Optional[str] = ..., dataset_version: _Optional[str] = ..., dataset_sha256: _Optional[str] = ..., task: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Predictions(_message.Message):
    __slots__ = ("inputs", "top5", "probabilities")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    TOP5_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    inputs: str
    top5: _containers.RepeatedCompositeFieldContainer[_types_pb2.Int64List]
    probabilities: _containers.RepeatedCompositeFieldContainer[_types_pb2.DoubleList]
    def __init__(self, inputs: _Optional[str] = ..., top5: _Optional[_Iterable[_Union[_types_pb2.Int64List, _Mapping]]] = ..., probabilities: _Optional[_Iterable[_Union[_types_pb2.DoubleList, _Mapping]]] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("name", "version", "origin", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    origin: str
    source: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., origin: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class FrameworkRef(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class EvaluationRecord(_message.Message):
    __slots__ = ("id", "created_at", "status", "request", "model", "framework", "hardware", "device", "software", "settings", "trace_level", "trace_id", "trace_archive", "span_count", "queue_wait_seconds", "asset_sha256", "results", "accuracy", "predictions", "agent", "gpus", "ranks")
    class SoftwareEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _types_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_types_pb2.Value, _Mapping]] = ...) -> None: ...
    class AgentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TRACE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    SPAN_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ASSET_SHA256_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: _timestamp_pb2.Timestamp
    status: EvaluationStatus
    request: EvaluationSpec
    model: ModelRef
    framework: FrameworkRef
    hardware: _fleet_pb2.HardwareInfo
    device: str
    software: _containers.ScalarMap[str, str]
    settings: _containers.MessageMap[str, _types_pb2.Value]
    trace_level: _types_pb2.TraceLevel
    trace_id: str
    trace_archive: str
    span_count: int
    queue_wait_seconds: float
    asset_sha256: str
    results: _containers.RepeatedCompositeFieldContainer[BatchResult]
    accuracy: Accuracy
    predictions: Predictions
    agent: _containers.ScalarMap[str, str]
    gpus: _containers.RepeatedCompositeFieldContainer[_fleet_pb2.GpuInfo]
    ranks: _containers.RepeatedCompositeFieldContainer[RankResult]
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[EvaluationStatus, str]] = ..., request: _Optional[_Union[EvaluationSpec, _Mapping]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., framework: _Optional[_Union[FrameworkRef, _Mapping]] = ..., hardware: _Optional[_Union[_fleet_pb2.HardwareInfo, _Mapping]] = ..., device: _Optional[str] = ..., software: _Optional[_Mapping[str, str]] = ..., settings: _Optional[_Mapping[str, _types_pb2.Value]] = ..., trace_level: _Optional[_Union[_types_pb2.TraceLevel, str]] = ..., trace_id: _Optional[str] = ..., trace_archive: _Optional[str] = ..., span_count: _Optional[int] = ..., queue_wait_seconds: _Optional[float] = ..., asset_sha256: _Optional[str] = ..., results: _Optional[_Iterable[_Union[BatchResult, _Mapping]]] = ..., accuracy: _Optional[_Union[Accuracy, _Mapping]] = ..., predictions: _Optional[_Union[Predictions, _Mapping]] = ..., agent: _Optional[_Mapping[str, str]] = ..., gpus: _Optional[_Iterable[_Union[_fleet_pb2.GpuInfo, _Mapping]]] = ..., ranks: _Optional[_Iterable[_Union[RankResult, _Mapping]]] = ...) -> None: ...

class RankResult(_message.Message):
    __slots__ = ("rank", "device", "gpu", "queue_wait_seconds", "peak_memory_bytes", "energy")
    RANK_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ENERGY_FIELD_NUMBER: _ClassVar[int]
    rank: int
    device: str
    gpu: _fleet_pb2.GpuInfo
    queue_wait_seconds: float
    peak_memory_bytes: int
    energy: _containers.RepeatedCompositeFieldContainer[EnergyResult]
    def __init__(self, rank: _Optional[int] = ..., device: _Optional[str] = ..., gpu: _Optional[_Union[_fleet_pb2.GpuInfo, _Mapping]] = ..., queue_wait_seconds: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., energy: _Optional[_Iterable[_Union[EnergyResult, _Mapping]]] = ...) -> None: ...

class EvaluationSummary(_message.Message):
    __slots__ = ("id", "created_at", "status", "model", "model_version", "framework", "framework_version", "hw", "hardware", "device", "precision", "compile", "trace_level", "trace_id", "batch_sizes", "p50_ms", "throughput", "accuracy_top1", "agent", "options", "task", "accuracy_metric", "accuracy_value")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    TRACE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_TOP1_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_METRIC_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_VALUE_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: _timestamp_pb2.Timestamp
    status: EvaluationStatus
    model: str
    model_version: str
    framework: str
    framework_version: str
    hw: str
    hardware: str
    device: str
    precision: str
    compile: str
    trace_level: str
    trace_id: str
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    p50_ms: float
    throughput: float
    accuracy_top1: float
    agent: str
    options: str
    task: str
    accuracy_metric: str
    accuracy_value: float
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[EvaluationStatus, str]] = ..., model: _Optional[str] = ..., model_version: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., hw: _Optional[str] = ..., hardware: _Optional[str] = ..., device: _Optional[str] = ..., precision: _Optional[str] = ..., compile: _Optional[str] = ..., trace_level: _Optional[str] = ..., trace_id: _Optional[str] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., p50_ms: _Optional[float] = ..., throughput: _Optional[float] = ..., accuracy_top1: _Optional[float] = ..., agent: _Optional[str] = ..., options: _Optional[str] = ..., task: _Optional[str] = ..., accuracy_metric: _Optional[str] = ..., accuracy_value: _Optional[float] = ...) -> None: ...

class EvaluationQuery(_message.Message):
    __slots__ = ("model", "framework", "hardware", "precision", "status", "since", "until", "sweep_id", "text", "sort", "page_size", "page_token", "task")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    SWEEP_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    model: str
    framework: str
    hardware: str
    precision: str
    status: EvaluationStatus
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    sweep_id: str
    text: str
    sort: str
    page_size: int
    page_token: str
    task: str
    def __init__(self, model: _Optional[str] = ..., framework: _Optional[str] = ..., hardware: _Optional[str] = ..., precision: _Optional[str] = ..., status: _Optional[_Union[EvaluationStatus, str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sweep_id: _Optional[str] = ..., text: _Optional[str] = ..., sort: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., task: _Optional[str] = ...) -> None: ...

class P50Row(_message.Message):
    __slots__ = ("model", "hw", "framework", "framework_version", "batch_size", "p50_ms", "evaluation_id", "evaluations", "mean_p50_ms", "latest")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    MEAN_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    model: str
    hw: str
    framework: str
    framework_version: str
    batch_size: int
    p50_ms: float
    evaluation_id: str
    evaluations: int
    mean_p50_ms: float
    latest: _timestamp_pb2.Timestamp
    def __init__(self, model: _Optional[str] = ..., hw: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., batch_size: _Optional[int] = ..., p50_ms: _Optional[float] = ..., evaluation_id: _Optional[str] = ..., evaluations: _Optional[int] = ..., mean_p50_ms: _Optional[float] = ..., latest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
