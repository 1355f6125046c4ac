"""``RemoteClient``: the ``mlms.client.Client`` methods over gRPC to an ``mlms server``.

Each call starts a client span whose W3C context rides in the call's metadata, so the server's
and the agent's spans join the caller's trace; spans are exported over OTLP when
``otlp_endpoint`` (or MLMS_OTLP_ENDPOINT) is set. Failed calls become mlms errors with one line.

Several servers (``a:1,b:2``, the servers of one fleet): calls go to one until it cannot be
reached (UNAVAILABLE from the transport, not an error the server raised), then to the next,
which the client keeps using; each call tries each server once per outage (a call that ran
``NEW_OUTAGE_S`` before its server went away tries those it passed over again: a killed server
comes back on its address). An evaluation carries an id chosen here, so that when its stream
breaks before the server assigned it, the next server takes it with the same id (an evaluation
is stored once, whichever copy finishes first); once assigned, its agent finishes it whatever
became of the server, so the client follows it by id through the next server
(``FOLLOW_POLL_S``, and for ``FOLLOW_UNREACHABLE_S`` while no server answers) until its record
is stored; when neither a server's job, an agent nor the store has it (the server went away
before the agent took it), it is sent again under its id. A call refused for load
(RESOURCE_EXHAUSTED, ``Overloaded``) is made again after the pushback the server sent, when
that is short (``MAX_PUSHBACK_WAIT_S``), at most ``OVERLOAD_RETRIES`` times.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import grpc
from google.protobuf.message import Message
from pydantic import BaseModel

from mlms.advise.record import AdviceRecord, AdviceRequest
from mlms.assets.file_models import ModelOptions
from mlms.assets.packing import chunks, packed
from mlms.bounds.record import BoundRecord, BoundRequest
from mlms.catalog.resolve import is_local
from mlms.client import Evaluations
from mlms.errors import (
    EvaluationInFlight,
    InvalidArgument,
    Overloaded,
    Unavailable,
    UnknownEvaluation,
    UnknownModel,
)
from mlms.evaluation.progress import ProgressCallback
from mlms.evaluation.query import EvaluationQuery, P50Row
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.summary import EvaluationSummary
from mlms.evaluation.sweep import SweepSpec, SweepState
from mlms.manifest import ModelManifest
from mlms.protos.mlms.v2 import (
    advice_pb2,
    calls_pb2,
    evaluation_pb2,
    evaluator_pb2,
    evaluator_pb2_grpc,
    sweep_pb2,
)
from mlms.registry.base import AgentRecord
from mlms.rpc.convert import from_proto, to_proto
from mlms.rpc.options import CHANNEL_OPTIONS
from mlms.rpc.otlp import process_provider
from mlms.rpc.payloads import bound_message, evaluate_message, record_from_events
from mlms.rpc.propagation import outgoing_metadata
from mlms.rpc.serving import split_address
from mlms.rpc.status import error_from_rpc, transport_failure
from mlms.security.tls import TlsFiles, open_channel
from mlms.server.jobs import Job

if TYPE_CHECKING:  # pandas and pyarrow load with the spans and analyses that need them
    import pandas as pd
    import pyarrow as pa

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

#: Unary calls (listings, records, one predict); evaluations and bounds stream for as long as
#: they run.
CALL_TIMEOUT_S = 60.0
#: How often an evaluation whose server went away is looked for through the next server.
FOLLOW_POLL_S = 1.0
#: Looks that find it nowhere (no job, no agent running it, not stored) before it is lost: a
#: record is stored before its agent stops listing it, so two in a row are no race.
FOLLOW_MISSES = 2
#: How long an evaluation is followed while no server can be reached (servers restarted one
#: after the other: its agent finishes it meanwhile, and its record waits in the store).
FOLLOW_UNREACHABLE_S = 30.0
#: A call that ran this long before its server went away meets a new outage: servers passed
#: over before it are tried again (a killed server is restarted within seconds).
NEW_OUTAGE_S = 5.0
#: The longest pushback waited for before a call refused for load is made again.
MAX_PUSHBACK_WAIT_S = 2.0
OVERLOAD_RETRIES = 3


def server_addresses(text: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` -> the addresses, naming a bad one otherwise."""
    addresses = [part.strip() for part in text.split(",")]
    for address in addresses:
        try:
            split_address(address)
        except InvalidArgument:
            raise InvalidArgument(
                f"bad server address {address!r} in {text!r}: expected HOST:PORT, or several "
                "separated by commas like 10.0.0.1:50051,10.0.0.2:50051"
            ) from None
    if len(set(addresses)) != len(addresses):
        raise InvalidArgument(f"servers {text!r}: an address is named twice")
    return addresses


class RemoteClient:
    def __init__(
        self,
        address: str,
        *,
        otlp_endpoint: str | None = None,
        tls: TlsFiles | None = None,
        insecure: bool = False,
        token: str | None = None,
    ) -> None:
        """``address``: a server's HOST:PORT, or several separated by commas (the servers of
        one fleet, tried in turn). TLS with ``tls``'s CA (the system's when none), unless the
        server is on loopback and no CA is given, or ``insecure``; ``token`` is sent as a
        bearer token."""
        self.addresses = server_addresses(address)
        self._channels = [
            open_channel(
                each, tls or TlsFiles(), insecure=insecure, options=CHANNEL_OPTIONS, token=token
            )
            for each in self.addresses
        ]
        self._stubs = [evaluator_pb2_grpc.EvaluatorStub(c) for c in self._channels]
        self._current = 0  # the server calls go to, until it cannot be reached
        self._lock = threading.Lock()
        self._provider = process_provider(
            "mlms-client", otlp_endpoint or os.environ.get("MLMS_OTLP_ENDPOINT") or None
        )
        self._tracer = self._provider.get_tracer("mlms.client")
        self.last_trace_id: str | None = None

    @property
    def address(self) -> str:
        """The server calls go to now."""
        return self.addresses[self._current]

    @property
    def peer(self) -> str:
        return f"mlms server at {self.address}"

    @property
    def _stub(self) -> evaluator_pb2_grpc.EvaluatorStub:
        return self._stubs[self._current]

    def evaluate(
        self, request: EvaluationRequest, progress: ProgressCallback | None = None
    ) -> EvaluationRecord:
        _not_a_path(request.model)
        evaluation_id = uuid.uuid4().hex
        assigned: list[str] = []

        def events(metadata) -> Iterator[calls_pb2.EvaluateEvent]:
            if assigned:  # its server went away after assigning it: the agent finishes it
                record = self._follow(assigned[0])
                if record is not None:
                    yield calls_pb2.EvaluateEvent(
                        evaluation=to_proto(record, evaluation_pb2.EvaluationRecord)
                    )
                    return
                assigned.clear()  # ran nowhere: again, under its id (stored once)
            for event in self._stub.Evaluate(
                evaluate_message(request, evaluation_id), metadata=metadata
            ):
                if event.WhichOneof("event") == "assigned":
                    assigned[:] = [event.assigned.evaluation_id]
                yield event

        with self._span("client.evaluate", {"mlms.model": request.model}) as metadata:
            return self._call(
                lambda: record_from_events(events(metadata), progress, self.peer, EvaluationRecord)
            )

    def _follow(self, evaluation_id: str) -> EvaluationRecord | None:
        """The record of an evaluation assigned by a server that went away, once stored; None
        when no server's job, no agent and no store has it."""
        misses = 0
        reached = time.monotonic()
        while True:
            try:
                running = any(evaluation_id in agent.running for agent in self.list_agents())
                record = self.get_evaluation(evaluation_id)
            except EvaluationInFlight:
                misses = 0
            except UnknownEvaluation:
                misses = 0 if running else misses + 1
                if misses >= FOLLOW_MISSES:
                    return None
            except Unavailable:
                if time.monotonic() - reached > FOLLOW_UNREACHABLE_S:
                    raise
                time.sleep(FOLLOW_POLL_S)
                continue
            else:
                return record
            reached = time.monotonic()
            time.sleep(FOLLOW_POLL_S)

    def bound(self, request: BoundRequest, progress: ProgressCallback | None = None) -> BoundRecord:
        with self._span("client.bound", {"mlms.model": request.model}) as metadata:
            return self._call(
                lambda: record_from_events(
                    self._stub.Bound(bound_message(request), metadata=metadata),
                    progress,
                    self.peer,
                    BoundRecord,
                )
            )

    def advise(
        self, request: AdviceRequest, step: Callable[[str], None] | None = None
    ) -> AdviceRecord:
        _not_a_path(request.model)
        with self._span("client.advise", {"mlms.model": request.model}) as metadata:

            def call() -> AdviceRecord:
                message = advice_pb2.AdviseRequest(spec=to_proto(request, advice_pb2.AdviceSpec))
                for event in self._stub.Advise(message, metadata=metadata):
                    if event.WhichOneof("event") == "advice":
                        return self._decode(event.advice, AdviceRecord)
                    if step is not None:
                        step(event.step)
                raise Unavailable(f"{self.peer} ended the advice without a record")

            return self._call(call)

    def list_advice(self) -> list[AdviceRecord]:
        reply = self._call(
            lambda: self._stub.ListAdvice(advice_pb2.ListAdviceRequest(), timeout=CALL_TIMEOUT_S)
        )
        return [self._decode(a, AdviceRecord) for a in reply.advice]

    def list_bounds(self) -> list[BoundRecord]:
        reply = self._call(
            lambda: self._stub.ListBounds(evaluator_pb2.ListBoundsRequest(), timeout=CALL_TIMEOUT_S)
        )
        return [self._decode(b, BoundRecord) for b in reply.bounds]

    def predict(self, request: calls_pb2.PredictRequest) -> calls_pb2.PredictResponse:
        with self._span("client.predict", {"mlms.model": request.spec.model}) as metadata:
            return self._call(
                lambda: self._stub.Predict(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
            )

    def list_models(self, *, libraries: bool = False) -> list[ModelManifest]:
        request = evaluator_pb2.ListModelsRequest(libraries=libraries)
        reply = self._call(lambda: self._stub.ListModels(request, timeout=CALL_TIMEOUT_S))
        return [self._decode(m, ModelManifest) for m in reply.manifests]

    def model(self, name: str) -> ModelManifest:
        """Found by the server as its evaluations find it (an unknown name: NOT_FOUND with
        the closest names)."""
        _not_a_path(name)
        request = evaluator_pb2.ListModelsRequest(names=[name])
        reply = self._call(lambda: self._stub.ListModels(request, timeout=CALL_TIMEOUT_S))
        found = next((self._decode(m, ModelManifest) for m in reply.manifests), None)
        if found is None:
            raise UnknownModel(f"unknown model {name!r} at {self.peer}; 'mlms models' lists them")
        return found

    def add_model(self, path: Path, options: ModelOptions, replace: bool = False) -> ModelManifest:
        """Upload the artifact (a folder as a tar) with its size and sha256 in the header."""
        with packed(path) as sent, self._span("client.add_model", {}) as metadata:
            header = to_proto(options, evaluator_pb2.ModelUploadHeader)
            header.replace = replace
            header.filename = Path(path).expanduser().resolve().name
            header.archive = sent.archive
            header.size = sent.size
            header.sha256 = sent.sha256

            def parts() -> Iterator[evaluator_pb2.ModelUpload]:
                yield evaluator_pb2.ModelUpload(header=header)
                for chunk in chunks(sent.path):
                    yield evaluator_pb2.ModelUpload(chunk=chunk)

            reply = self._call(lambda: self._stub.AddModel(parts(), metadata=metadata))
        return self._decode(reply.manifest, ModelManifest)

    def remove_model(self, name: str, version: str | None = None) -> list[str]:
        request = evaluator_pb2.RemoveModelRequest(name=name, version=version)
        reply = self._call(lambda: self._stub.RemoveModel(request, timeout=CALL_TIMEOUT_S))
        return list(reply.versions)

    def list_agents(self) -> list[AgentRecord]:
        reply = self._call(
            lambda: self._stub.ListAgents(evaluator_pb2.ListAgentsRequest(), timeout=CALL_TIMEOUT_S)
        )
        return [self._decode(a, AgentRecord) for a in reply.agents]

    def get_evaluation(self, evaluation_id: str) -> EvaluationRecord:
        reply = self._call(
            lambda: self._stub.GetEvaluation(
                evaluator_pb2.GetEvaluationRequest(evaluation_id=evaluation_id),
                timeout=CALL_TIMEOUT_S,
            )
        )
        if reply.HasField("job"):
            job = self._decode(reply.job, Job)
            raise EvaluationInFlight(
                f"{job.describe()}; its record is stored when it finishes "
                "('mlms evals' lists what is in flight)"
            )
        return self._decode(reply.record, EvaluationRecord)

    def list_evaluations(self, query: EvaluationQuery | None = None) -> Evaluations:
        request = evaluator_pb2.ListEvaluationsRequest(
            query=to_proto(query or EvaluationQuery(), evaluation_pb2.EvaluationQuery)
        )
        reply = self._call(lambda: self._stub.ListEvaluations(request, timeout=CALL_TIMEOUT_S))
        return Evaluations(
            [self._decode(s, EvaluationSummary) for s in reply.summaries],
            [self._decode(j, Job) for j in reply.jobs],
            reply.total,
            reply.next_page_token,
        )

    def view_evaluations(self, view: str, query: EvaluationQuery | None = None) -> list[P50Row]:
        request = evaluator_pb2.ViewEvaluationsRequest(
            view=view, query=to_proto(query or EvaluationQuery(), evaluation_pb2.EvaluationQuery)
        )
        reply = self._call(lambda: self._stub.ViewEvaluations(request, timeout=CALL_TIMEOUT_S))
        return [self._decode(row, P50Row) for row in reply.rows]

    def spans(self, trace_id: str) -> pa.Table:
        from mlms.tracer.archive import read_parquet, upgrade

        return upgrade(read_parquet(self._archive_bytes(trace_id)))

    def span_archive(self, trace_id: str) -> Path:
        from mlms.tracer.archive import cached_archive

        path = cached_archive(trace_id)
        if not path.is_file():
            data = self._archive_bytes(trace_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
                tmp.write(data)
            os.replace(tmp.name, path)
        return path

    def analyze(
        self, evaluation_ids: Sequence[str], analyses: Sequence[str], top: int | None = None
    ) -> dict[str, pd.DataFrame]:
        from mlms.analysis.catalog import from_ipc

        request = evaluator_pb2.AnalyzeRequest(
            evaluation_ids=list(evaluation_ids), analyses=list(analyses), top=top or 0
        )
        chunks = self._call(lambda: list(self._stub.Analyze(request, timeout=CALL_TIMEOUT_S)))
        data: dict[str, list[bytes]] = {name: [] for name in analyses}
        for chunk in chunks:
            data[chunk.analysis].append(chunk.data)
        return {name: from_ipc(b"".join(parts)) for name, parts in data.items()}

    def _archive_bytes(self, trace_id: str) -> bytes:
        chunks = self._call(
            lambda: [
                chunk.data
                for chunk in self._stub.GetSpans(
                    evaluator_pb2.GetSpansRequest(trace_id=trace_id), timeout=CALL_TIMEOUT_S
                )
            ]
        )
        return b"".join(chunks)

    def close(self) -> None:
        self._provider.shutdown()
        for channel in self._channels:
            channel.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sweep(
        self,
        spec: SweepSpec | None,
        sweep_id: str | None,
        changed: Callable[[SweepState], None],
    ) -> SweepState:
        request = sweep_pb2.SweepRequest(sweep_id=sweep_id or "")
        if spec is not None:
            request.spec.CopyFrom(to_proto(spec, sweep_pb2.SweepSpec))

        def follow(metadata: list[tuple[str, str]]) -> SweepState:
            state = None
            for message in self._stub.Sweep(request, metadata=metadata):
                state = self._decode(message, SweepState)
                changed(state)
            if state is None:
                raise Unavailable(f"{self.peer} ended the sweep stream without its state")
            return state

        with self._span("client.sweep", {"mlms.sweep_id": sweep_id or ""}) as metadata:
            return self._call(lambda: follow(metadata))

    def _decode(self, message: Message, model: type[M]) -> M:
        return from_proto(message, model, f"{model.__name__} from {self.peer}")

    def _call(self, call: Callable[[], T]) -> T:
        """``call()`` (which reads ``self._stub``), on the next server while the one it went to
        cannot be reached, and again after a short pushback while refused for load."""
        unreachable: list[str] = []
        refused = 0
        while True:
            used = self._current
            began = time.monotonic()
            try:
                return call()
            except grpc.RpcError as exc:
                error = error_from_rpc(exc, self.peer)
                if time.monotonic() - began > NEW_OUTAGE_S:
                    unreachable.clear()
                if transport_failure(exc) and len(unreachable) + 1 < len(self.addresses):
                    unreachable.append(f"{self.addresses[used]}: {exc.details()}")  # type: ignore[attr-defined]
                    self._move_on(used)
                    continue
                if (
                    isinstance(error, Overloaded)
                    and error.retry_after is not None
                    and error.retry_after <= MAX_PUSHBACK_WAIT_S
                    and refused < OVERLOAD_RETRIES
                ):
                    refused += 1
                    time.sleep(error.retry_after)
                    continue
                if unreachable:
                    error = type(error)(f"{error} (and before it: {'; '.join(unreachable)})")
                raise error from exc

    def _move_on(self, used: int) -> None:
        """The next server, unless another thread moved on from ``used`` already."""
        with self._lock:
            if self._current == used:
                self._current = (used + 1) % len(self.addresses)

    @contextmanager
    def _span(self, name: str, attributes: dict[str, str]) -> Iterator[list[tuple[str, str]]]:
        with self._tracer.start_as_current_span(name, attributes=attributes) as span:
            self.last_trace_id = f"{span.get_span_context().trace_id:032x}"
            yield outgoing_metadata()
        self._provider.force_flush()


def _not_a_path(model: str) -> None:
    if is_local(model):
        raise InvalidArgument(
            f"--model {model}: a path is read where the evaluation runs, which a server "
            "cannot: add it with 'mlms models add PATH --name NAME --server ...' and use the name"
        )
