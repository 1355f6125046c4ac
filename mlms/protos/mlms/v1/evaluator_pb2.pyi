from mlms.protos.mlms.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents_json",)
    AGENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    agents_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agents_json: _Optional[_Iterable[str]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("manifests_json",)
    MANIFESTS_JSON_FIELD_NUMBER: _ClassVar[int]
    manifests_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, manifests_json: _Optional[_Iterable[str]] = ...) -> None: ...

class GetEvaluationRequest(_message.Message):
    __slots__ = ("evaluation_id",)
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    evaluation_id: str
    def __init__(self, evaluation_id: _Optional[str] = ...) -> None: ...

class GetEvaluationResponse(_message.Message):
    __slots__ = ("record_json", "job_json")
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    JOB_JSON_FIELD_NUMBER: _ClassVar[int]
    record_json: str
    job_json: str
    def __init__(self, record_json: _Optional[str] = ..., job_json: _Optional[str] = ...) -> None: ...

class ListEvaluationsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEvaluationsResponse(_message.Message):
    __slots__ = ("records_json", "jobs_json")
    RECORDS_JSON_FIELD_NUMBER: _ClassVar[int]
    JOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    records_json: _containers.RepeatedScalarFieldContainer[str]
    jobs_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, records_json: _Optional[_Iterable[str]] = ..., jobs_json: _Optional[_Iterable[str]] = ...) -> None: ...

class ListBoundsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBoundsResponse(_message.Message):
    __slots__ = ("bounds_json",)
    BOUNDS_JSON_FIELD_NUMBER: _ClassVar[int]
    bounds_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, bounds_json: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSpansRequest(_message.Message):
    __slots__ = ("trace_id",)
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    def __init__(self, trace_id: _Optional[str] = ...) -> None: ...

class SpansChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class AnalyzeRequest(_message.Message):
    __slots__ = ("evaluation_ids", "analyses", "top")
    EVALUATION_IDS_FIELD_NUMBER: _ClassVar[int]
    ANALYSES_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    evaluation_ids: _containers.RepeatedScalarFieldContainer[str]
    analyses: _containers.RepeatedScalarFieldContainer[str]
    top: int
    def __init__(self, evaluation_ids: _Optional[_Iterable[str]] = ..., analyses: _Optional[_Iterable[str]] = ..., top: _Optional[int] = ...) -> None: ...

class AnalysisChunk(_message.Message):
    __slots__ = ("analysis", "data")
    ANALYSIS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    analysis: str
    data: bytes
    def __init__(self, analysis: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...
