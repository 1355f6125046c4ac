import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_KIND_UNSPECIFIED: _ClassVar[JobKind]
    JOB_KIND_EVALUATION: _ClassVar[JobKind]
    JOB_KIND_BOUND: _ClassVar[JobKind]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_DISPATCHING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
JOB_KIND_UNSPECIFIED: JobKind
JOB_KIND_EVALUATION: JobKind
JOB_KIND_BOUND: JobKind
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_DISPATCHING: JobState
JOB_STATE_RUNNING: JobState

class GpuInfo(_message.Message):
    __slots__ = ("index", "name", "alias", "memory_bytes", "compute_capability", "driver", "clocks_mhz", "uuid", "pci_bus_id")
    class ClocksMhzEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    CLOCKS_MHZ_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    alias: str
    memory_bytes: int
    compute_capability: str
    driver: str
    clocks_mhz: _containers.ScalarMap[str, int]
    uuid: str
    pci_bus_id: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., alias: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., compute_capability: _Optional[str] = ..., driver: _Optional[str] = ..., clocks_mhz: _Optional[_Mapping[str, int]] = ..., uuid: _Optional[str] = ..., pci_bus_id: _Optional[str] = ...) -> None: ...

class GpuLink(_message.Message):
    __slots__ = ("gpus", "kind", "nvlinks")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NVLINKS_FIELD_NUMBER: _ClassVar[int]
    gpus: _containers.RepeatedScalarFieldContainer[int]
    kind: str
    nvlinks: int
    def __init__(self, gpus: _Optional[_Iterable[int]] = ..., kind: _Optional[str] = ..., nvlinks: _Optional[int] = ...) -> None: ...

class HardwareInfo(_message.Message):
    __slots__ = ("host", "cpu_brand", "cpu_cores_logical", "cpu_cores_physical", "memory_bytes", "machine", "gpus", "links")
    HOST_FIELD_NUMBER: _ClassVar[int]
    CPU_BRAND_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_LOGICAL_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    host: str
    cpu_brand: str
    cpu_cores_logical: int
    cpu_cores_physical: int
    memory_bytes: int
    machine: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuInfo]
    links: _containers.RepeatedCompositeFieldContainer[GpuLink]
    def __init__(self, host: _Optional[str] = ..., cpu_brand: _Optional[str] = ..., cpu_cores_logical: _Optional[int] = ..., cpu_cores_physical: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., machine: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuInfo, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[GpuLink, _Mapping]]] = ...) -> None: ...

class AgentRecord(_message.Message):
    __slots__ = ("agent_id", "address", "framework", "framework_version", "hardware", "models", "in_flight", "started_at", "mlms_version", "running", "gpus")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    MLMS_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    address: str
    framework: str
    framework_version: str
    hardware: HardwareInfo
    models: _containers.RepeatedScalarFieldContainer[str]
    in_flight: int
    started_at: _timestamp_pb2.Timestamp
    mlms_version: str
    running: _containers.RepeatedScalarFieldContainer[str]
    gpus: _types_pb2.Int64List
    def __init__(self, agent_id: _Optional[str] = ..., address: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., hardware: _Optional[_Union[HardwareInfo, _Mapping]] = ..., models: _Optional[_Iterable[str]] = ..., in_flight: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mlms_version: _Optional[str] = ..., running: _Optional[_Iterable[str]] = ..., gpus: _Optional[_Union[_types_pb2.Int64List, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("evaluation_id", "kind", "server", "model", "state", "agent_id", "attempt", "started_at", "updated_at")
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    evaluation_id: str
    kind: JobKind
    server: str
    model: str
    state: JobState
    agent_id: str
    attempt: int
    started_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, evaluation_id: _Optional[str] = ..., kind: _Optional[_Union[JobKind, str]] = ..., server: _Optional[str] = ..., model: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., agent_id: _Optional[str] = ..., attempt: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
