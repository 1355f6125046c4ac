"""The agent's gRPC ``Predictor`` service: protobuf in, domain calls, protobuf out.

Predict sessions hold a loaded predictor between calls; ``Evaluate`` plans the evaluation
(``mlms.evaluation.plan``), runs the plan with ``mlms.evaluation.runner.evaluate`` on a worker
thread (which queues on the device lock behind other evaluations) and streams its progress,
then the record; ``Bound`` does the same with ``mlms.bounds.run.bound``. The caller's trace
context comes from the call's metadata and becomes the evaluation's parent, so the agent's model
and layer spans join the caller's trace.
"""

from __future__ import annotations

import io
import logging
import queue
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import grpc
import numpy as np
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from PIL import Image, UnidentifiedImageError

from mlms import hardware
from mlms.assets.manager import AssetManager
from mlms.bounds.record import BoundRecord
from mlms.catalog.resolve import resolve_served
from mlms.config import mlms_home
from mlms.errors import InvalidArgument, NotFound, UnsupportedFramework
from mlms.evaluation.device_lock import exclusive_device
from mlms.evaluation.plan import plan_evaluation
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.record_store import RecordIndex
from mlms.evaluation.runner import evaluate
from mlms.library_errors import library_failures
from mlms.predictors.base import Predictor, PredictorOptions
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.protos.mlms.v2 import calls_pb2, fleet_pb2, predictor_pb2, predictor_pb2_grpc
from mlms.registry.base import AgentRecord
from mlms.rpc import tensors
from mlms.rpc.convert import to_proto
from mlms.rpc.otlp import otlp_sinks
from mlms.rpc.payloads import bound_request, evaluation_request, record_event
from mlms.rpc.propagation import incoming_context
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

_JOB_ID = re.compile(r"[0-9a-f]{32}")


@dataclass
class Session:
    predictor: Predictor
    framework_version: str


class Load:
    """Evaluations and bounds queued or running here, by id; ``on_change`` publishes them
    (the agent's registry record lists them, so a server that did not dispatch one, or a
    dispatcher that died, still finds it running here)."""

    def __init__(self, on_change: Callable[[int], None] = lambda _count: None) -> None:
        self._ids: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.on_change = on_change

    @property
    def count(self) -> int:
        return self._ids.total()

    @property
    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._ids)

    @contextmanager
    def holding(self, job_id: str) -> Iterator[None]:
        self._add(job_id, 1)
        try:
            yield
        finally:
            self._add(job_id, -1)

    def _add(self, job_id: str, delta: int) -> None:
        with self._lock:
            self._ids[job_id] += delta
            self._ids = +self._ids  # drops the ids that reached 0
            count = self._ids.total()
        self.on_change(count)


class PredictorService(predictor_pb2_grpc.PredictorServicer):
    def __init__(
        self,
        *,
        framework: str,
        store: ObjectStore,
        index: RecordIndex | None = None,
        describe: Callable[[], AgentRecord],
        agent_labels: Callable[[], dict[str, str]],
        load: Load,
        provider: TracerProvider,
        otlp_endpoint: str | None = None,
    ) -> None:
        self.framework = framework
        self.store = store
        self.index = index
        self.describe = describe
        self.agent_labels = agent_labels
        self.load = load
        self.provider = provider
        self.tracer = provider.get_tracer("mlms.agent")
        self.otlp_endpoint = otlp_endpoint
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    # -- Info ---------------------------------------------------------------------------------

    def Info(self, request, context):
        return to_proto(self.describe(), fleet_pb2.AgentRecord)

    # -- Open / Predict / Close ---------------------------------------------------------------

    def Open(self, request, context):
        spec = request.spec
        manifest = resolve_served(spec.model, self.store)
        framework, version = choose_framework(manifest, self._framework_for(spec.framework))
        device = hardware.resolve(spec.hw or "cpu")
        asset = AssetManager(self.store, mlms_home() / "cache").ensure(manifest, framework)
        with library_failures(f"{manifest.name} on {framework}"):
            predictor = predictor_class(framework)(manifest, asset.path, PredictorOptions(device))
        session_id = uuid.uuid4().hex
        with self._lock:
            self._sessions[session_id] = Session(predictor, version)
        spec_in = manifest.inputs[0]
        return predictor_pb2.OpenResponse(
            session_id=session_id,
            input_shape=spec_in.shape,
            input_dtype=spec_in.dtype,
            framework=framework,
            framework_version=version,
            device=device,
        )

    def Predict(self, request, context):
        session = self._session(request.session_id)
        predictor = session.predictor
        if request.top_k < 0:
            raise InvalidArgument(f"top_k {request.top_k}: expected 0 or more")
        batch = self._batch(request, predictor)
        # Not while an evaluation measures this device: wait for it, as evaluations do.
        with exclusive_device(mlms_home() / "locks", predictor.options.device):
            start = time.perf_counter_ns()
            logits = predictor.predict(batch)
            elapsed = time.perf_counter_ns() - start
        reply = calls_pb2.PredictResponse(
            logits=tensors.to_proto(np.asarray(logits, dtype=np.float32)),
            predict_ns=elapsed,
            agent_id=self.agent_labels().get("agent_id", ""),
        )
        if request.top_k:
            indices, scores = predictor.postprocess(logits, k=request.top_k)
            reply.top.extend(
                calls_pb2.TopK(indices=i.tolist(), scores=s.tolist())
                for i, s in zip(indices, scores, strict=True)
            )
        return reply

    def Close(self, request, context):
        with self._lock:
            session = self._sessions.pop(request.session_id, None)
        if session is None:
            raise NotFound(f"no predict session {request.session_id!r} on this agent")
        session.predictor.close()
        return predictor_pb2.CloseResponse()

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.predictor.close()

    def _session(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise NotFound(f"no predict session {session_id!r} on this agent; call Open first")
        return session

    def _batch(self, request: calls_pb2.PredictRequest, predictor: Predictor) -> np.ndarray:
        spec = predictor.manifest.inputs[0]
        which = request.WhichOneof("batch")
        if which == "images":
            if not request.images.images:
                raise InvalidArgument("batch size 0: expected at least one image")
            return predictor.preprocess(_decoded(request.images.images))
        if which != "tensor":
            raise InvalidArgument("empty predict request: expected a tensor or images")
        batch = tensors.from_proto(request.tensor)
        if batch.ndim != len(spec.shape) + 1 or list(batch.shape[1:]) != spec.shape:
            raise InvalidArgument(
                f"tensor shape {list(batch.shape)}: model {predictor.manifest.name!r} expects "
                f"[batch, {', '.join(map(str, spec.shape))}]"
            )
        if batch.shape[0] < 1:
            raise InvalidArgument("batch size 0: expected at least one sample")
        if batch.dtype.name != spec.dtype:
            raise InvalidArgument(
                f"tensor dtype {batch.dtype.name!r}: model {predictor.manifest.name!r} expects "
                f"{spec.dtype!r}"
            )
        return batch

    # -- Evaluate / Bound ----------------------------------------------------------------------

    def Evaluate(self, request, context):
        evaluation = evaluation_request(request.spec)
        plan = plan_evaluation(
            evaluation.model_copy(update={"framework": self._framework_for(evaluation.framework)}),
            self.store,
            served=True,  # never a path on this machine
        )
        evaluation_id = _job_id(request.evaluation_id, "evaluation")

        def work(progress: ProgressCallback) -> EvaluationRecord:
            return evaluate(
                plan,
                store=self.store,
                index=self.index,
                progress=progress,
                processors=otlp_sinks(self.otlp_endpoint, f"evaluation {evaluation_id}"),
                parent=trace.set_span_in_context(trace.get_current_span()),
                agent={"mode": "remote", **self.agent_labels()},
                evaluation_id=evaluation_id,
            )

        yield from self._in_thread(
            "agent.evaluate", "mlms.evaluation_id", evaluation_id, work, context
        )

    def Bound(self, request, context):
        from mlms.agent.child import evaluate_in_child
        from mlms.bounds.run import bound

        wanted = bound_request(request.spec)
        resolve_served(wanted.model, self.store)  # never a path on this machine
        wanted = wanted.model_copy(update={"framework": self._framework_for(wanted.framework)})
        bound_id = _job_id(request.bound_id, "bound")

        def work(progress: ProgressCallback) -> BoundRecord:
            return bound(
                wanted,
                store=self.store,
                step=lambda line: log.info("bound %s: %s", bound_id, line),
                progress=progress,
                processors=otlp_sinks(self.otlp_endpoint, f"bound {bound_id}"),
                parent=trace.set_span_in_context(trace.get_current_span()),
                agent={"mode": "remote", **self.agent_labels()},
                bound_id=bound_id,
                apart=evaluate_in_child,
            )

        yield from self._in_thread("agent.bound", "mlms.bound_id", bound_id, work, context)

    def _in_thread(
        self,
        span_name: str,
        id_attribute: str,
        job_id: str,
        work: Callable[[ProgressCallback], EvaluationRecord | BoundRecord],
        context: grpc.ServicerContext,
    ) -> Iterator[calls_pb2.EvaluateEvent]:
        """Run ``work`` on a thread of its own, counted in the load, inside a span whose
        parent is the caller's; stream its progress, then the record it returns (or the error
        it raised)."""
        parent = incoming_context(context)
        events: queue.SimpleQueue[Progress | EvaluationRecord | BoundRecord | BaseException] = (
            queue.SimpleQueue()
        )

        def run() -> None:
            try:
                with (
                    self.load.holding(job_id),
                    self.tracer.start_as_current_span(
                        span_name,
                        context=parent,
                        attributes={id_attribute: job_id, **self.agent_labels()},
                    ),
                ):
                    record = work(_throttled(events.put))
                self.provider.force_flush()
                events.put(record)
            except BaseException as exc:
                events.put(exc)

        threading.Thread(target=run, name=f"{span_name}-{job_id[:8]}", daemon=True).start()
        yield from _stream(events, context)

    def _framework_for(self, requested: str | None) -> str:
        if requested and requested != self.framework:
            raise UnsupportedFramework(
                f"this agent runs {self.framework!r}, not {requested!r}; ask the server, which "
                "routes to an agent of the framework"
            )
        return self.framework


#: Progress goes out at most this often: a message per iteration would make the gRPC thread
#: compete with the measured loop for the CPU.
PROGRESS_INTERVAL_S = 0.2


def _throttled(report: Callable[[Progress], None]) -> Callable[[Progress], None]:
    """``report`` for the first and last event of each run and at most every interval between."""
    last = [0.0]

    def throttled(event: Progress) -> None:
        now = time.monotonic()
        if event.done in (1, event.target) or now - last[0] >= PROGRESS_INTERVAL_S:
            last[0] = now
            report(event)

    return throttled


def _job_id(given: str, kind: str) -> str:
    """The id the server gave an evaluation or a bound (kept across retries), or a new one."""
    job_id = given or uuid.uuid4().hex
    if not _JOB_ID.fullmatch(job_id):
        raise InvalidArgument(f"{kind} id {job_id!r}: expected 32 lowercase hex digits")
    return job_id


def _stream(events: queue.SimpleQueue, context: grpc.ServicerContext) -> Iterator:
    """Progress events while they come, then the record or the error."""
    while True:
        event = events.get()
        if isinstance(event, Progress):
            if context.is_active():
                yield calls_pb2.EvaluateEvent(
                    progress=calls_pb2.Progress(
                        batch_size=event.batch_size,
                        run=event.run,
                        done=event.done,
                        target=event.target,
                    )
                )
        elif isinstance(event, BaseException):
            raise event
        else:
            yield record_event(event)
            return


#: Decoded pixels one image, and one predict request, may hold: a PNG of a few hundred KB
#: can declare 13000 x 13000 pixels (500 MB decoded), and a 64 MiB request holds a hundred of
#: them. 2**25 is a 33-megapixel photo; 2**27 pixels are 400 MB as RGB.
MAX_IMAGE_PIXELS = 2**25
MAX_BATCH_PIXELS = 2**27


class _PixelBudget:
    def __init__(self) -> None:
        self.left = MAX_BATCH_PIXELS

    def take(self, index: int, width: int, height: int) -> None:
        pixels = width * height
        if pixels > MAX_IMAGE_PIXELS:
            raise InvalidArgument(
                f"image {index} of the batch is {width} x {height} pixels: expected at most "
                f"{MAX_IMAGE_PIXELS:,} pixels an image"
            )
        if pixels > self.left:
            raise InvalidArgument(
                f"images 0 to {index} of the batch hold more than {MAX_BATCH_PIXELS:,} pixels: "
                "expected fewer or smaller images per predict"
            )
        self.left -= pixels


def _decoded(images: Sequence[bytes]) -> list[np.ndarray]:
    """The batch's images as RGB arrays, once every image's size (read from its header alone)
    fits the pixel budget: a batch over it is refused before any of its pixels is decoded."""
    budget = _PixelBudget()
    with ExitStack() as stack:
        opened = []
        for index, data in enumerate(images):
            with _readable(index, data):
                opened.append(stack.enter_context(Image.open(io.BytesIO(data))))
            budget.take(index, *opened[-1].size)
        decoded = []
        for index, (data, image) in enumerate(zip(images, opened, strict=True)):
            with _readable(index, data):
                decoded.append(np.asarray(image.convert("RGB")))
        return decoded


@contextmanager
def _readable(index: int, data: bytes) -> Iterator[None]:
    """What PIL raises for a bad image, as the caller's fault naming the image."""
    try:
        yield
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise InvalidArgument(
            f"image {index} of the batch ({len(data)} bytes) is not a readable image: "
            f"{' '.join(str(exc).split())}"
        ) from exc
