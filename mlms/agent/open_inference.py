"""The Open Inference Protocol (KServe v2 / Triton ``inference.GRPCInferenceService``) on an
agent, beside its own ``Predictor`` service and on the same port, so that ``tritonclient``,
``perf_analyzer`` and KServe clients can drive any mlms agent.

The service is Triton's (``protos/inference/grpc_service.proto``), a superset of KServe's:
besides the protocol's calls, an agent answers Triton's ModelConfig (from the zoo manifest)
and ModelStatistics (its own counts and durations of ModelInfer calls), which perf_analyzer
calls before and around its measurements. Triton's other extensions (streaming, shared memory,
repository index, trace and log settings) are UNIMPLEMENTED, with a message saying which calls
an agent does serve.

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
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
import numpy as np
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind

from mlms import __version__, hardware
from mlms.assets.manager import AssetManager
from mlms.catalog.resolve import resolve_served
from mlms.catalog.zoo import labels_of
from mlms.config import mlms_home
from mlms.errors import InvalidArgument, NotFound
from mlms.evaluation.device_lock import exclusive_device
from mlms.evaluation.record import MAX_BATCH_SIZE
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor, PredictorOptions
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.protos.inference import grpc_service_pb2 as oip
from mlms.protos.inference import grpc_service_pb2_grpc as oip_grpc
from mlms.protos.inference import model_config_pb2 as triton_config
from mlms.reasons import short_numbers
from mlms.rpc.propagation import incoming_context
from mlms.store.base import ObjectStore

SERVICE_NAME = oip.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
add_to_server = oip_grpc.add_GRPCInferenceServiceServicer_to_server

#: numpy dtypes of the zoo's inputs and outputs <-> the protocol's tensor data types.
DATATYPES = {"float32": "FP32", "float16": "FP16", "uint8": "UINT8", "int64": "INT64"}
#: Which typed ``InferTensorContents`` field carries each data type when raw bytes are not used
#: (FP16 has none: it travels as raw bytes only).
CONTENTS = {"FP32": "fp32_contents", "UINT8": "uint_contents", "INT64": "int64_contents"}
#: Triton's (platform, backend) for each framework, as a Triton model configuration names them;
#: Triton has no MXNet or JAX backend, so such an agent says what it runs.
PLATFORMS = {
    "torch": ("pytorch_libtorch", "pytorch"),
    "onnxruntime": ("onnxruntime_onnx", "onnxruntime"),
    "tensorflow": ("tensorflow_savedmodel", "tensorflow"),
    "jax": ("jax", "jax"),
    "mxnet": ("mxnet", "mxnet"),
}
#: The calls an agent answers, for the message of those it does not.
SERVED = (
    "ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer, "
    "ModelConfig, ModelStatistics, RepositoryModelLoad, RepositoryModelUnload"
)


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def proto(self) -> oip.StatisticDuration:
        return oip.StatisticDuration(count=self.count, ns=self.ns)


@dataclass
class _Stats:
    """One model's ModelInfer calls, as Triton's ModelStatistics counts them: an inference is
    a sample (the batch's rows), an execution a call; ``queue`` is the wait for the device lock
    (an evaluation measuring the device, or another call), ``compute_input`` the decoding of
    the request, ``compute_output`` the encoding of the logits."""

    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    #: batch size -> compute_input, compute_infer, compute_output of its executions.
    batches: dict[int, tuple[_Duration, _Duration, _Duration]] = field(default_factory=dict)


@dataclass
class _Timings:
    """The nanoseconds of one successful ModelInfer's phases."""

    batch: int
    compute_input: int
    queue: int
    compute_infer: int
    compute_output: int


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
        self._stats = {name: _Stats() for name in self.models}
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
        name = _repository_model(request)
        self._model(name, "")
        return _kserve_repository_reply(oip.RepositoryModelLoadResponse, name)

    def RepositoryModelUnload(self, request, context):
        name = _repository_model(request)
        self._manifest(name, "")
        with self._lock:
            loaded = self._loaded.pop(name, None)
        if loaded is not None:
            loaded.predictor.close()
        return _kserve_repository_reply(oip.RepositoryModelUnloadResponse, name)

    # -- inference ----------------------------------------------------------------------------

    def ModelInfer(self, request, context):
        started = time.perf_counter_ns()
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
            # A call naming no model of ours has no model's statistics to count in.
            manifest = self._manifest(request.model_name, request.model_version)
            try:
                reply, timings = self._infer(request, manifest, span)
            except BaseException:
                self._count_failure(manifest.name, time.perf_counter_ns() - started)
                raise
        self._count_success(manifest.name, time.perf_counter_ns() - started, timings)
        return reply

    def _infer(
        self, request: oip.ModelInferRequest, manifest: ModelManifest, span: Span
    ) -> tuple[oip.ModelInferResponse, _Timings]:
        start = time.perf_counter_ns()
        batch = _input(request, manifest)
        _check_outputs(request, manifest)
        decoded = time.perf_counter_ns()
        loaded = self._model(request.model_name, request.model_version)
        span.set_attribute("mlms.batch_size", int(batch.shape[0]))
        waited = time.perf_counter_ns()
        # Not while an evaluation measures this device: wait for it, as Predict does.
        with exclusive_device(mlms_home() / "locks", self.device):
            locked = time.perf_counter_ns()
            logits = np.asarray(loaded.predictor.predict(batch), dtype=np.float32)
            predicted = time.perf_counter_ns()
            span.set_attribute("mlms.predict_ns", predicted - locked)
        reply = oip.ModelInferResponse(
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
        timings = _Timings(
            batch=int(batch.shape[0]),
            compute_input=decoded - start,
            queue=locked - waited,
            compute_infer=predicted - locked,
            compute_output=time.perf_counter_ns() - predicted,
        )
        return reply, timings

    def _count_success(self, name: str, ns: int, timings: _Timings) -> None:
        with self._lock:
            stats = self._stats[name]
            stats.inference_count += timings.batch
            stats.execution_count += 1
            stats.last_inference_ms = time.time_ns() // 1_000_000
            stats.success.add(ns)
            stats.queue.add(timings.queue)
            stats.compute_input.add(timings.compute_input)
            stats.compute_infer.add(timings.compute_infer)
            stats.compute_output.add(timings.compute_output)
            phases = stats.batches.get(timings.batch)
            if phases is None:
                phases = stats.batches[timings.batch] = (_Duration(), _Duration(), _Duration())
            phases[0].add(timings.compute_input)
            phases[1].add(timings.compute_infer)
            phases[2].add(timings.compute_output)

    def _count_failure(self, name: str, ns: int) -> None:
        with self._lock:
            self._stats[name].fail.add(ns)

    # -- Triton's extensions ------------------------------------------------------------------

    def ModelConfig(self, request, context):
        manifest = self._manifest(request.name, request.version)
        spec, output = manifest.inputs[0], manifest.outputs[0]
        platform, backend = PLATFORMS.get(self.framework, (self.framework, self.framework))
        # Triton's dims leave out the batch axis when max_batch_size > 0: perf_analyzer sends
        # [batch, *dims]. The metadata's shapes are [-1, *dims].
        return oip.ModelConfigResponse(
            config=triton_config.ModelConfig(
                name=manifest.name,
                platform=platform,
                backend=backend,
                # The batches mlms evaluates; a larger one is refused only by gRPC's size limit.
                max_batch_size=MAX_BATCH_SIZE,
                input=[
                    triton_config.ModelInput(
                        name=spec.name, data_type=_config_type(spec.dtype), dims=spec.shape
                    )
                ],
                output=[
                    triton_config.ModelOutput(
                        name=output.name,
                        data_type=_config_type("float32"),
                        dims=[len(labels_of(manifest)) or -1],
                    )
                ],
            )
        )

    def ModelStatistics(self, request, context):
        # Triton's convention: no name is every model (and a version needs a name).
        if request.name:
            names = [self._manifest(request.name, request.version).name]
        elif request.version:
            raise InvalidArgument(
                f"version {request.version!r} without a model name: name the model, or leave "
                f"both empty for every model"
            )
        else:
            names = list(self.models)
        with self._lock:
            return oip.ModelStatisticsResponse(
                model_stats=[
                    _statistics(resolve_served(name, self.store), self._stats[name])
                    for name in names
                ]
            )

    def ModelStreamInfer(self, request_iterator, context):
        _unimplemented(context, "ModelStreamInfer")

    def RepositoryIndex(self, request, context):
        _unimplemented(context, "RepositoryIndex")

    def SystemSharedMemoryStatus(self, request, context):
        _unimplemented(context, "SystemSharedMemoryStatus")

    def SystemSharedMemoryRegister(self, request, context):
        _unimplemented(context, "SystemSharedMemoryRegister")

    def SystemSharedMemoryUnregister(self, request, context):
        _unimplemented(context, "SystemSharedMemoryUnregister")

    def CudaSharedMemoryStatus(self, request, context):
        _unimplemented(context, "CudaSharedMemoryStatus")

    def CudaSharedMemoryRegister(self, request, context):
        _unimplemented(context, "CudaSharedMemoryRegister")

    def CudaSharedMemoryUnregister(self, request, context):
        _unimplemented(context, "CudaSharedMemoryUnregister")

    def TraceSetting(self, request, context):
        _unimplemented(context, "TraceSetting")

    def LogSettings(self, request, context):
        _unimplemented(context, "LogSettings")

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
        manifest = resolve_served(name, self.store)
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
    """The first GPU this process sees (its own, for a worker of ``mlms agent --gpus``), else
    the CPU: the protocol has no field to choose a device."""
    return "cuda:0" if hardware.visible_gpus(hardware.detect()) else "cpu"


def _metadata(name: str, dtype: str, shape: list[int]) -> oip.ModelMetadataResponse.TensorMetadata:
    return oip.ModelMetadataResponse.TensorMetadata(
        name=name, datatype=DATATYPES[dtype], shape=shape
    )


def _config_type(dtype: str) -> int:
    """Triton's ``DataType`` for a numpy dtype of the zoo: TYPE_ and the protocol's name."""
    return triton_config.DataType.Value(f"TYPE_{DATATYPES[dtype]}")


def _statistics(manifest: ModelManifest, stats: _Stats) -> oip.ModelStatistics:
    return oip.ModelStatistics(
        name=manifest.name,
        version=manifest.version,
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
        inference_stats=oip.InferStatistics(
            success=stats.success.proto(),
            fail=stats.fail.proto(),
            queue=stats.queue.proto(),
            compute_input=stats.compute_input.proto(),
            compute_infer=stats.compute_infer.proto(),
            compute_output=stats.compute_output.proto(),
        ),
        batch_stats=[
            oip.InferBatchStatistics(
                batch_size=size,
                compute_input=phases[0].proto(),
                compute_infer=phases[1].proto(),
                compute_output=phases[2].proto(),
            )
            for size, phases in sorted(stats.batches.items())
        ],
    )


def _repository_model(
    request: oip.RepositoryModelLoadRequest | oip.RepositoryModelUnloadRequest,
) -> str:
    """The model a load or unload names. KServe's request has the name in field 1, which is
    Triton's ``repository_name`` (Triton's ``model_name`` is field 2): take either, so that
    both protocols' clients can load a model."""
    return request.model_name or request.repository_name


_Reply = TypeVar("_Reply", oip.RepositoryModelLoadResponse, oip.RepositoryModelUnloadResponse)


def _kserve_repository_reply(reply_type: type[_Reply], name: str) -> _Reply:
    """Triton's empty reply carrying KServe's fields 1 (model_name) and 2 (isLoaded /
    isUnloaded, true) as unknown fields: protobuf keeps and re-sends those, so KServe's
    clients still read that the model was loaded, and Triton's ignore them."""
    encoded = name.encode()
    kserve = b"\x0a" + _varint(len(encoded)) + encoded + b"\x10\x01"
    return reply_type.FromString(kserve)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _unimplemented(context: grpc.ServicerContext, method: str) -> None:
    # context.abort, not the generated NotImplementedError: ErrorInterceptor would make that an
    # INTERNAL error, which says the agent broke.
    context.abort(
        grpc.StatusCode.UNIMPLEMENTED,
        f"{method} is a Triton extension that mlms agents do not serve; they serve {SERVED}",
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
            f"input {spec.name!r} shape {short_numbers(shape)}: model {manifest.name!r} expects "
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
