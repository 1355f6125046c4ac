from mlms.protos.mlms.v2 import bound_pb2 as _bound_pb2
from mlms.protos.mlms.v2 import evaluation_pb2 as _evaluation_pb2
from mlms.protos.mlms.v2 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PredictRequest(_message.Message):
    __slots__ = ("session_id", "spec", "tensor", "images", "top_k")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    spec: _types_pb2.ModelSpec
    tensor: _types_pb2.Tensor
    images: _types_pb2.ImageBatch
    top_k: int
    def __init__(self, session_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.ModelSpec, _Mapping]] = ..., tensor: _Optional[_Union[_types_pb2.Tensor, _Mapping]] = ..., images: _Optional[_Union[_types_pb2.ImageBatch, _Mapping]] = ..., top_k: _Optional[int] = ...) -> None: ...

class TopK(_message.Message):
    __slots__ = ("indices", "scores")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("logits", "top", "predict_ns", "agent_id")
    LOGITS_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    PREDICT_NS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    logits: _types_pb2.Tensor
    top: _containers.RepeatedCompositeFieldContainer[TopK]
    predict_ns: int
    agent_id: str
    def __init__(self, logits: _Optional[_Union[_types_pb2.Tensor, _Mapping]] = ..., top: _Optional[_Iterable[_Union[TopK, _Mapping]]] = ..., predict_ns: _Optional[int] = ..., agent_id: _Optional[str] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("spec", "evaluation_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    spec: _evaluation_pb2.EvaluationSpec
    evaluation_id: str
    def __init__(self, spec: _Optional[_Union[_evaluation_pb2.EvaluationSpec, _Mapping]] = ..., evaluation_id: _Optional[str] = ...) -> None: ...

class BoundRequest(_message.Message):
    __slots__ = ("spec", "bound_id")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    BOUND_ID_FIELD_NUMBER: _ClassVar[int]
    spec: _bound_pb2.BoundSpec
    bound_id: str
    def __init__(self, spec: _Optional[_Union[_bound_pb2.BoundSpec, _Mapping]] = ..., bound_id: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("batch_size", "run", "done", "target")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    run: str
    done: int
    target: int
    def __init__(self, batch_size: _Optional[int] = ..., run: _Optional[str] = ..., done: _Optional[int] = ..., target: _Optional[int] = ...) -> None: ...

class Assigned(_message.Message):
    __slots__ = ("evaluation_id", "agent_id", "address", "attempt")
    EVALUATION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    evaluation_id: str
    agent_id: str
    address: str
    attempt: int
    def __init__(self, evaluation_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., address: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class EvaluateEvent(_message.Message):
    __slots__ = ("progress", "assigned", "evaluation", "bound")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    progress: Progress
    assigned: Assigned
    evaluation: _evaluation_pb2.EvaluationRecord
    bound: _bound_pb2.BoundRecord
    def __init__(self, progress: _Optional[_Union[Progress, _Mapping]] = ..., assigned: _Optional[_Union[Assigned, _Mapping]] = ..., evaluation: _Optional[_Union[_evaluation_pb2.EvaluationRecord, _Mapping]] = ..., bound: _Optional[_Union[_bound_pb2.BoundRecord, _Mapping]] = ...) -> None: ...
