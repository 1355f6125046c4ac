from mlms.protos.mlms.v2 import advice_pb2 as _advice_pb2
from mlms.protos.mlms.v2 import bound_pb2 as _bound_pb2
from mlms.protos.mlms.v2 import calls_pb2 as _calls_pb2
from mlms.protos.mlms.v2 import evaluation_pb2 as _evaluation_pb2
from mlms.protos.mlms.v2 import fleet_pb2 as _fleet_pb2
from mlms.protos.mlms.v2 import manifest_pb2 as _manifest_pb2
from mlms.protos.mlms.v2 import sweep_pb2 as _sweep_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelUploadHeader(_message.Message):
    __slots__ = ("name", "version", "task", "labels", "preprocess", "input_shapes", "seq_len", "layout", "replace", "filename", "archive", "size", "sha256", "framework")
    class PreprocessEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PREPROCESS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    task: _manifest_pb2.Task
    labels: _containers.RepeatedScalarFieldContainer[str]
    preprocess: _containers.ScalarMap[str, str]
    input_shapes: _containers.RepeatedCompositeFieldContainer[_evaluation_pb2.InputShape]
    seq_len: int
    layout: _manifest_pb2.Layout
    replace: bool
    filename: str
    archive: bool
    size: int
    sha256: str
    framework: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., task: _Optional[_Union[_manifest_pb2.Task, str]] = ..., labels: _Optional[_Iterable[str]] = ..., preprocess: _Optional[_Mapping[str, str]] = ..., input_shapes: _Optional[_Iterable[_Union[_evaluation_pb2.InputShape, _Mapping]]] = ..., seq_len: _Optional[int] = ..., layout: _Optional[_Union[_manifest_pb2.Layout, str]] = ..., replace: _Optional[bool] = ..., filename: _Optional[str] = ..., archive: _Optional[bool] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., framework: _Optional[str] = ...) -> None: ...

class ModelUpload(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ModelUploadHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[ModelUploadHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class AddModelResponse(_message.Message):
    __slots__ = ("manifest",)
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    manifest: _manifest_pb2.ModelManifest
    def __init__(self, manifest: _Optional[_Union[_manifest_pb2.ModelManifest, _Mapping]] = ...) -> None: ...

class RemoveModelRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class RemoveModelResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, versions: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[_fleet_pb2.AgentRecord]
    def __init__(self, agents: _Optional[_Iterable[_Union[_fleet_pb2.AgentRecord, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("libraries", "names")
    LIBRARIES_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    libraries: bool
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, libraries: _Optional[bool] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("manifests",)
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    manifests: _containers.RepeatedCompositeFieldContainer[_manifest_pb2.ModelManifest]
    def __init__(self, manifests: _Optional[_Iterable[_Union[_manifest_pb2.ModelManifest, _Mapping]]] = ...) -> None: ...

class GetEvaluationRequest(_message.Message):
    __slots__ = ("evaluation_id",)
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    evaluation_id: str
    def __init__(self, evaluation_id: _Optional[str] = ...) -> None: ...

class GetEvaluationResponse(_message.Message):
    __slots__ = ("record", "job")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    record: _evaluation_pb2.EvaluationRecord
    job: _fleet_pb2.Job
    def __init__(self, record: _Optional[_Union[_evaluation_pb2.EvaluationRecord, _Mapping]] = ..., job: _Optional[_Union[_fleet_pb2.Job, _Mapping]] = ...) -> None: ...

class ListEvaluationsRequest(_message.Message):
    __slots__ = ("known_ids", "query")
    KNOWN_IDS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    known_ids: _containers.RepeatedScalarFieldContainer[str]
    query: _evaluation_pb2.EvaluationQuery
    def __init__(self, known_ids: _Optional[_Iterable[str]] = ..., query: _Optional[_Union[_evaluation_pb2.EvaluationQuery, _Mapping]] = ...) -> None: ...

class ListEvaluationsResponse(_message.Message):
    __slots__ = ("records", "jobs", "stored_ids", "summaries", "next_page_token", "total")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    STORED_IDS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_evaluation_pb2.EvaluationRecord]
    jobs: _containers.RepeatedCompositeFieldContainer[_fleet_pb2.Job]
    stored_ids: _containers.RepeatedScalarFieldContainer[str]
    summaries: _containers.RepeatedCompositeFieldContainer[_evaluation_pb2.EvaluationSummary]
    next_page_token: str
    total: int
    def __init__(self, records: _Optional[_Iterable[_Union[_evaluation_pb2.EvaluationRecord, _Mapping]]] = ..., jobs: _Optional[_Iterable[_Union[_fleet_pb2.Job, _Mapping]]] = ..., stored_ids: _Optional[_Iterable[str]] = ..., summaries: _Optional[_Iterable[_Union[_evaluation_pb2.EvaluationSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class ListBoundsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBoundsResponse(_message.Message):
    __slots__ = ("bounds",)
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    bounds: _containers.RepeatedCompositeFieldContainer[_bound_pb2.BoundRecord]
    def __init__(self, bounds: _Optional[_Iterable[_Union[_bound_pb2.BoundRecord, _Mapping]]] = ...) -> None: ...

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

class ViewEvaluationsRequest(_message.Message):
    __slots__ = ("view", "query")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    view: str
    query: _evaluation_pb2.EvaluationQuery
    def __init__(self, view: _Optional[str] = ..., query: _Optional[_Union[_evaluation_pb2.EvaluationQuery, _Mapping]] = ...) -> None: ...

class ViewEvaluationsResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[_evaluation_pb2.P50Row]
    def __init__(self, rows: _Optional[_Iterable[_Union[_evaluation_pb2.P50Row, _Mapping]]] = ...) -> None: ...
