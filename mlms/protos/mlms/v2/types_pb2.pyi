from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TraceLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACE_LEVEL_NO_TRACE: _ClassVar[TraceLevel]
    TRACE_LEVEL_APPLICATION: _ClassVar[TraceLevel]
    TRACE_LEVEL_MODEL: _ClassVar[TraceLevel]
    TRACE_LEVEL_FRAMEWORK: _ClassVar[TraceLevel]
    TRACE_LEVEL_ML_LIBRARY: _ClassVar[TraceLevel]
    TRACE_LEVEL_SYSTEM_LIBRARY: _ClassVar[TraceLevel]
    TRACE_LEVEL_HARDWARE: _ClassVar[TraceLevel]
    TRACE_LEVEL_FULL: _ClassVar[TraceLevel]

class Framework(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRAMEWORK_UNSPECIFIED: _ClassVar[Framework]
    FRAMEWORK_TORCH: _ClassVar[Framework]
    FRAMEWORK_ONNXRUNTIME: _ClassVar[Framework]
    FRAMEWORK_TENSORFLOW: _ClassVar[Framework]
    FRAMEWORK_MXNET: _ClassVar[Framework]
    FRAMEWORK_JAX: _ClassVar[Framework]
TRACE_LEVEL_NO_TRACE: TraceLevel
TRACE_LEVEL_APPLICATION: TraceLevel
TRACE_LEVEL_MODEL: TraceLevel
TRACE_LEVEL_FRAMEWORK: TraceLevel
TRACE_LEVEL_ML_LIBRARY: TraceLevel
TRACE_LEVEL_SYSTEM_LIBRARY: TraceLevel
TRACE_LEVEL_HARDWARE: TraceLevel
TRACE_LEVEL_FULL: TraceLevel
FRAMEWORK_UNSPECIFIED: Framework
FRAMEWORK_TORCH: Framework
FRAMEWORK_ONNXRUNTIME: Framework
FRAMEWORK_TENSORFLOW: Framework
FRAMEWORK_MXNET: Framework
FRAMEWORK_JAX: Framework

class Tensor(_message.Message):
    __slots__ = ("data", "shape", "dtype")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, data: _Optional[bytes] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class ImageBatch(_message.Message):
    __slots__ = ("images",)
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, images: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("model", "framework", "hw")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    HW_FIELD_NUMBER: _ClassVar[int]
    model: str
    framework: str
    hw: str
    def __init__(self, model: _Optional[str] = ..., framework: _Optional[str] = ..., hw: _Optional[str] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Int64List(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class DoubleList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("string_value", "int_value", "double_value", "bool_value", "string_list")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_LIST_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    int_value: int
    double_value: float
    bool_value: bool
    string_list: StringList
    def __init__(self, string_value: _Optional[str] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., bool_value: _Optional[bool] = ..., string_list: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...
