"""The Open Inference Protocol (KServe v2 / Triton ``inference.GRPCInferenceService``) on an
agent, beside its own ``Predictor`` service and on the same port, so that ``tritonclient``,
``perf_analyzer`` and KServe clients can drive any mlms agent.

A model is one of the agent's zoo models, under its zoo name and version; it is loaded on the
device on its first ModelInfer (or RepositoryModelLoad) and stays loaded. Each ModelInfer is a
span whose parent is the caller's trace context from the call's metadata, and runs under the
device lock like a Predict. Bad requests are mlms errors (``ErrorInterceptor`` makes them
INVALID_ARGUMENT or NOT_FOUND), each one line naming the bad value and what was expected.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from mlms import __version__
from mlms.config import mlms_home
from mlms.errors import InvalidArgument, NotFound
from mlms.evaluation.device_lock import exclusive_device
from mlms.predictors.base import Predictor, PredictorOptions
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.protos.inference import grpc_predict_v2_pb2 as oip
from mlms.protos.inference import grpc_predict_v2_pb2_grpc as oip_grpc
from mlms.registry import hardware
from mlms.rpc.propagation import incoming_context
from mlms.store.base import ObjectStore
from mlms.zoo.assets import AssetManager
from mlms.zoo.catalog import get_model, labels_of
from mlms.zoo.manifest import ModelManifest

SERVICE_NAME = oip.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
add_to_server = oip_grpc.add_GRPCInferenceServiceServicer_to_server

#: numpy dtypes of the zoo's inputs and outputs <-> the protocol's tensor data types.
DATATYPES = {"float32": "FP32", "float16": "FP16", "uint8": "UINT8", "int64": "INT64"}
#: Which typed ``InferTensorContents`` field carries each data type when raw bytes are not used
#: (FP16 has none: it travels as raw bytes only).
CONTENTS = {"FP32": "fp32_contents", "UINT8": "uint_contents", "INT64": "int64_contents"}


@dataclass
class _Loaded:
    manifest: ModelManifest
    predictor: Predictor


class OpenInferenceService(oip_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        *,
        framework: str,
        models: Sequence[str],
        store: ObjectStore,
        provider: TracerProvider,
        agent_labels: Callable[[], dict[str, str]],
        device: str = "cpu",
    ) -> None:
        self.framework = framework
        self.models = tuple(models)
        self.store = store
        self.tracer = provider.get_tracer("mlms.agent")
        self.agent_labels = agent_labels
        self.device = device
        self._loaded: dict[str, _Loaded] = {}
        self._lock = threading.Lock()
        # One loader at a time: two first calls for a model must not load it twice.
        self._loading = threading.Lock()

    # -- health and metadata ------------------------------------------------------------------

    def ServerLive(self, request, context):
        return oip.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return oip.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        self._manifest(request.name, request.version)
        return oip.ModelReadyResponse(ready=True)  # any of our models: loaded on first use

    def ServerMetadata(self, request, context):
        return oip.ServerMetadataResponse(
            name="mlms", version=__version__, extensions=["model_repository"]
        )

    def ModelMetadata(self, request, context):
        manifest = self._manifest(request.name, request.version)
        spec = manifest.inputs[0]
        classes = len(labels_of(manifest)) or -1  # a vocabulary's size is the model's
        return oip.ModelMetadataResponse(
            name=manifest.name,
            versions=[manifest.version],
            platform=self.framework,
            inputs=[_metadata(spec.name, spec.dtype, [-1, *spec.shape])],
            outputs=[_metadata(manifest.outputs[0].name, "float32", [-1, classes])],
        )

    # -- repository ---------------------------------------------------------------------------

    def RepositoryModelLoad(self, request, context):
        self._model(request.model_name, "")
        return oip.RepositoryModelLoadResponse(model_name=request.model_name, isLoaded=True)

    def RepositoryModelUnload(self, request, context):
        self._manifest(request.model_name, "")
        with self._lock:
            loaded = self._loaded.pop(request.model_name, None)
        if loaded is not None:
            loaded.predictor.close()
        return oip.RepositoryModelUnloadResponse(model_name=request.model_name, isUnloaded=True)

    # -- inference ----------------------------------------------------------------------------

    def ModelInfer(self, request, context):
        with self.tracer.start_as_current_span(
            "agent.infer",
            context=incoming_context(context),
            kind=SpanKind.SERVER,
            attributes={
                "mlms.model": request.model_name,
                "mlms.protocol": "open-inference",
                **self.agent_labels(),
            },
        ) as span:
            manifest = self._manifest(request.model_name, request.model_version)
            batch = _input(request, manifest)
            _check_outputs(request, manifest)
            loaded = self._model(request.model_name, request.model_version)
            span.set_attribute("mlms.batch_size", int(batch.shape[0]))
            # Not while an evaluation measures this device: wait for it, as Predict does.
            with exclusive_device(mlms_home() / "locks", self.device):
                start = time.perf_counter_ns()
                logits = np.asarray(loaded.predictor.predict(batch), dtype=np.float32)
                span.set_attribute("mlms.predict_ns", time.perf_counter_ns() - start)
        return oip.ModelInferResponse(
            model_name=manifest.name,
            model_version=manifest.version,
            id=request.id,
            outputs=[
                oip.ModelInferResponse.InferOutputTensor(
                    name=manifest.outputs[0].name, datatype="FP32", shape=list(logits.shape)
                )
            ],
            raw_output_contents=[logits.astype("<f4", copy=False).tobytes()],
        )

    def close(self) -> None:
        with self._lock:
            loaded, self._loaded = list(self._loaded.values()), {}
        for model in loaded:
            model.predictor.close()

    # -- models -------------------------------------------------------------------------------

    def _manifest(self, name: str, version: str) -> ModelManifest:
        if name not in self.models:
            raise NotFound(
                f"model {name!r} is not served by this {self.framework} agent: expected one of "
                f"{_few(self.models)}"
            )
        manifest = get_model(name)
        if version not in ("", manifest.version):
            raise NotFound(
                f"model {name!r} version {version!r}: this agent serves version "
                f"{manifest.version!r} (or leave the version empty)"
            )
        return manifest

    def _model(self, name: str, version: str) -> _Loaded:
        manifest = self._manifest(name, version)
        with self._lock:
            loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        with self._loading:
            with self._lock:
                loaded = self._loaded.get(name)
            if loaded is None:
                framework, _version = choose_framework(manifest, self.framework)
                asset = AssetManager(self.store, mlms_home() / "cache").ensure(manifest, framework)
                predictor = predictor_class(framework)(
                    manifest, asset.path, PredictorOptions(self.device)
                )
                loaded = _Loaded(manifest, predictor)
                with self._lock:
                    self._loaded[name] = loaded
        return loaded


def default_device() -> str:
    """The machine's first GPU, else its CPU: the protocol has no field to choose a device."""
    gpus = hardware.detect().gpus
    return f"cuda:{gpus[0].index}" if gpus else "cpu"


def _metadata(name: str, dtype: str, shape: list[int]) -> oip.ModelMetadataResponse.TensorMetadata:
    return oip.ModelMetadataResponse.TensorMetadata(
        name=name, datatype=DATATYPES[dtype], shape=shape
    )


def _input(request: oip.ModelInferRequest, manifest: ModelManifest) -> np.ndarray:
    """The request's one input tensor as the batch the model takes, or InvalidArgument."""
    spec = manifest.inputs[0]
    if len(request.inputs) != 1:
        raise InvalidArgument(
            f"{len(request.inputs)} inputs: model {manifest.name!r} takes 1 ({spec.name!r})"
        )
    tensor = request.inputs[0]
    if tensor.name != spec.name:
        raise InvalidArgument(
            f"input {tensor.name!r}: model {manifest.name!r} takes input {spec.name!r}"
        )
    expected_type = DATATYPES[spec.dtype]
    if tensor.datatype != expected_type:
        raise InvalidArgument(
            f"input {spec.name!r} datatype {tensor.datatype!r}: model {manifest.name!r} "
            f"expects {expected_type!r}"
        )
    shape = list(tensor.shape)
    if len(shape) != len(spec.shape) + 1 or shape[1:] != spec.shape or shape[0] < 1:
        raise InvalidArgument(
            f"input {spec.name!r} shape {_short(shape)}: model {manifest.name!r} expects "
            f"{[-1, *spec.shape]} with a batch of 1 or more"
        )
    dtype = np.dtype(spec.dtype).newbyteorder("<")
    count = math.prod(shape)  # a Python int: a huge batch must not wrap around
    if request.raw_input_contents:
        if len(request.raw_input_contents) != 1:
            raise InvalidArgument(
                f"{len(request.raw_input_contents)} raw input contents: expected 1, one for "
                f"each input"
            )
        data = request.raw_input_contents[0]  # each read of a bytes field copies it
        if len(data) != count * dtype.itemsize:
            raise InvalidArgument(
                f"input {spec.name!r} raw contents are {len(data)} bytes, but shape {shape} of "
                f"{expected_type} needs {count * dtype.itemsize}"
            )
        # A writable copy: frameworks (torch.from_numpy) warn on read-only buffers.
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
    field = CONTENTS.get(expected_type)
    values = getattr(tensor.contents, field) if field else ()
    if len(values) != count:
        where = f"contents.{field}" if field else "raw_input_contents (its only encoding)"
        raise InvalidArgument(
            f"input {spec.name!r} has {len(values)} values in {where}, but shape {shape} "
            f"needs {count}"
        )
    return np.asarray(values, dtype=dtype).reshape(shape)


def _check_outputs(request: oip.ModelInferRequest, manifest: ModelManifest) -> None:
    output = manifest.outputs[0].name
    for wanted in request.outputs:
        if wanted.name != output:
            raise InvalidArgument(
                f"output {wanted.name!r}: model {manifest.name!r} has output {output!r}"
            )


def _few(names: Sequence[str], most: int = 8) -> str:
    """Names for a one-line message: the first few and how many more."""
    shown = ", ".join(names[:most]) or "none"
    return shown if len(names) <= most else f"{shown} (and {len(names) - most} more)"


def _short(shape: list[int]) -> str:
    """A shape for a message: a hundred axes are not worth a hundred numbers."""
    return str(shape) if len(shape) <= 8 else f"[{', '.join(map(str, shape[:8]))}, ...]"
