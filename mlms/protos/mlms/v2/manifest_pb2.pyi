from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Task(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_UNSPECIFIED: _ClassVar[Task]
    TASK_IMAGE_CLASSIFICATION: _ClassVar[Task]
    TASK_TEXT_CLASSIFICATION: _ClassVar[Task]
    TASK_TEXT_GENERATION: _ClassVar[Task]
    TASK_OBJECT_DETECTION: _ClassVar[Task]
    TASK_SEMANTIC_SEGMENTATION: _ClassVar[Task]
    TASK_TRANSLATION: _ClassVar[Task]

class Color(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLOR_UNSPECIFIED: _ClassVar[Color]
    COLOR_RGB: _ClassVar[Color]
    COLOR_BGR: _ClassVar[Color]
    COLOR_L: _ClassVar[Color]

class Dtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[Dtype]
    DTYPE_FLOAT32: _ClassVar[Dtype]
    DTYPE_FLOAT16: _ClassVar[Dtype]
    DTYPE_UINT8: _ClassVar[Dtype]
    DTYPE_INT64: _ClassVar[Dtype]

class Layout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAYOUT_UNSPECIFIED: _ClassVar[Layout]
    LAYOUT_CHW: _ClassVar[Layout]
    LAYOUT_HWC: _ClassVar[Layout]
    LAYOUT_TOKENS: _ClassVar[Layout]

class OutputType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_TYPE_UNSPECIFIED: _ClassVar[OutputType]
    OUTPUT_TYPE_CLASSIFICATION: _ClassVar[OutputType]
    OUTPUT_TYPE_NEXT_TOKEN: _ClassVar[OutputType]
    OUTPUT_TYPE_DETECTION: _ClassVar[OutputType]
    OUTPUT_TYPE_SEGMENTATION: _ClassVar[OutputType]

class ModelFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_FORMAT_UNSPECIFIED: _ClassVar[ModelFormat]
    MODEL_FORMAT_ONNX: _ClassVar[ModelFormat]
    MODEL_FORMAT_TORCH_EXPORT: _ClassVar[ModelFormat]
    MODEL_FORMAT_TORCHSCRIPT: _ClassVar[ModelFormat]
    MODEL_FORMAT_KERAS: _ClassVar[ModelFormat]
    MODEL_FORMAT_SAVED_MODEL: _ClassVar[ModelFormat]
    MODEL_FORMAT_HF_FOLDER: _ClassVar[ModelFormat]

class Dataset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATASET_UNSPECIFIED: _ClassVar[Dataset]
    DATASET_DIGITS: _ClassVar[Dataset]

class Split(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPLIT_UNSPECIFIED: _ClassVar[Split]
    SPLIT_TEST: _ClassVar[Split]

class Origin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORIGIN_UNSPECIFIED: _ClassVar[Origin]
    ORIGIN_ZOO: _ClassVar[Origin]
    ORIGIN_USER: _ClassVar[Origin]
    ORIGIN_FILE: _ClassVar[Origin]
    ORIGIN_HUB: _ClassVar[Origin]
TASK_UNSPECIFIED: Task
TASK_IMAGE_CLASSIFICATION: Task
TASK_TEXT_CLASSIFICATION: Task
TASK_TEXT_GENERATION: Task
TASK_OBJECT_DETECTION: Task
TASK_SEMANTIC_SEGMENTATION: Task
TASK_TRANSLATION: Task
COLOR_UNSPECIFIED: Color
COLOR_RGB: Color
COLOR_BGR: Color
COLOR_L: Color
DTYPE_UNSPECIFIED: Dtype
DTYPE_FLOAT32: Dtype
DTYPE_FLOAT16: Dtype
DTYPE_UINT8: Dtype
DTYPE_INT64: Dtype
LAYOUT_UNSPECIFIED: Layout
LAYOUT_CHW: Layout
LAYOUT_HWC: Layout
LAYOUT_TOKENS: Layout
OUTPUT_TYPE_UNSPECIFIED: OutputType
OUTPUT_TYPE_CLASSIFICATION: OutputType
OUTPUT_TYPE_NEXT_TOKEN: OutputType
OUTPUT_TYPE_DETECTION: OutputType
OUTPUT_TYPE_SEGMENTATION: OutputType
MODEL_FORMAT_UNSPECIFIED: ModelFormat
MODEL_FORMAT_ONNX: ModelFormat
MODEL_FORMAT_TORCH_EXPORT: ModelFormat
MODEL_FORMAT_TORCHSCRIPT: ModelFormat
MODEL_FORMAT_KERAS: ModelFormat
MODEL_FORMAT_SAVED_MODEL: ModelFormat
MODEL_FORMAT_HF_FOLDER: ModelFormat
DATASET_UNSPECIFIED: Dataset
DATASET_DIGITS: Dataset
SPLIT_UNSPECIFIED: Split
SPLIT_TEST: Split
ORIGIN_UNSPECIFIED: Origin
ORIGIN_ZOO: Origin
ORIGIN_USER: Origin
ORIGIN_FILE: Origin
ORIGIN_HUB: Origin

class FrameworkConstraint(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: _types_pb2.Framework
    version: str
    def __init__(self, name: _Optional[_Union[_types_pb2.Framework, str]] = ..., version: _Optional[str] = ...) -> None: ...

class Preprocessing(_message.Message):
    __slots__ = ("color", "resize", "crop", "scale", "mean", "std")
    COLOR_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    CROP_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    color: Color
    resize: int
    crop: int
    scale: float
    mean: _containers.RepeatedScalarFieldContainer[float]
    std: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, color: _Optional[_Union[Color, str]] = ..., resize: _Optional[int] = ..., crop: _Optional[int] = ..., scale: _Optional[float] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ...) -> None: ...

class InputSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype", "layout", "preprocessing", "vocab_size", "max_length")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSING_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: Dtype
    layout: Layout
    preprocessing: Preprocessing
    vocab_size: int
    max_length: int
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[Dtype, str]] = ..., layout: _Optional[_Union[Layout, str]] = ..., preprocessing: _Optional[_Union[Preprocessing, _Mapping]] = ..., vocab_size: _Optional[int] = ..., max_length: _Optional[int] = ...) -> None: ...

class Labels(_message.Message):
    __slots__ = ("file", "names")
    FILE_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    file: str
    names: _types_pb2.StringList
    def __init__(self, file: _Optional[str] = ..., names: _Optional[_Union[_types_pb2.StringList, _Mapping]] = ...) -> None: ...

class OutputSpec(_message.Message):
    __slots__ = ("name", "type", "labels")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: OutputType
    labels: Labels
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[OutputType, str]] = ..., labels: _Optional[_Union[Labels, _Mapping]] = ...) -> None: ...

class BuildSource(_message.Message):
    __slots__ = ("builder", "seed")
    BUILDER_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    builder: str
    seed: int
    def __init__(self, builder: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class UrlSource(_message.Message):
    __slots__ = ("framework", "url", "sha256", "filename")
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    framework: _types_pb2.Framework
    url: str
    sha256: str
    filename: str
    def __init__(self, framework: _Optional[_Union[_types_pb2.Framework, str]] = ..., url: _Optional[str] = ..., sha256: _Optional[str] = ..., filename: _Optional[str] = ...) -> None: ...

class FileSource(_message.Message):
    __slots__ = ("format", "framework", "filename", "sha256", "size", "path")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    format: ModelFormat
    framework: _types_pb2.Framework
    filename: str
    sha256: str
    size: int
    path: str
    def __init__(self, format: _Optional[_Union[ModelFormat, str]] = ..., framework: _Optional[_Union[_types_pb2.Framework, str]] = ..., filename: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("build", "url", "file")
    BUILD_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    build: BuildSource
    url: UrlSource
    file: FileSource
    def __init__(self, build: _Optional[_Union[BuildSource, _Mapping]] = ..., url: _Optional[_Union[UrlSource, _Mapping]] = ..., file: _Optional[_Union[FileSource, _Mapping]] = ...) -> None: ...

class DatasetSpec(_message.Message):
    __slots__ = ("name", "split")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    name: Dataset
    split: Split
    def __init__(self, name: _Optional[_Union[Dataset, str]] = ..., split: _Optional[_Union[Split, str]] = ...) -> None: ...

class ModelManifest(_message.Message):
    __slots__ = ("name", "version", "task", "description", "frameworks", "inputs", "outputs", "sources", "dataset", "attributes", "origin")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _types_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_types_pb2.Value, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    task: Task
    description: str
    frameworks: _containers.RepeatedCompositeFieldContainer[FrameworkConstraint]
    inputs: _containers.RepeatedCompositeFieldContainer[InputSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[OutputSpec]
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    dataset: DatasetSpec
    attributes: _containers.MessageMap[str, _types_pb2.Value]
    origin: Origin
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., task: _Optional[_Union[Task, str]] = ..., description: _Optional[str] = ..., frameworks: _Optional[_Iterable[_Union[FrameworkConstraint, _Mapping]]] = ..., inputs: _Optional[_Iterable[_Union[InputSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[OutputSpec, _Mapping]]] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., dataset: _Optional[_Union[DatasetSpec, _Mapping]] = ..., attributes: _Optional[_Mapping[str, _types_pb2.Value]] = ..., origin: _Optional[_Union[Origin, str]] = ...) -> None: ...
