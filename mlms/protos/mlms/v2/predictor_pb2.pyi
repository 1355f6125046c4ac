from mlms.protos.mlms.v2 import calls_pb2 as _calls_pb2
from mlms.protos.mlms.v2 import fleet_pb2 as _fleet_pb2
from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.ModelSpec
    def __init__(self, spec: _Optional[_Union[_types_pb2.ModelSpec, _Mapping]] = ...) -> None: ...

class OpenResponse(_message.Message):
    __slots__ = ("session_id", "input_shape", "input_dtype", "framework", "framework_version", "device")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_DTYPE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    input_shape: _containers.RepeatedScalarFieldContainer[int]
    input_dtype: str
    framework: str
    framework_version: str
    device: str
    def __init__(self, session_id: _Optional[str] = ..., input_shape: _Optional[_Iterable[int]] = ..., input_dtype: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., device: _Optional[str] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
