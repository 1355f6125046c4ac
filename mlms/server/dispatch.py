"""Dispatch: send an evaluation, a bound or a predict to a chosen agent, and retry when the
agent dies.

A transport failure (UNAVAILABLE, DEADLINE_EXCEEDED, a stream cut by a killed process) moves
the work to another agent that fits, keeping the evaluation id; an error the agent raised on
purpose (it carries the ``mlms-error`` trailer: bad input, unknown model) goes back to the
caller as it is. The job in the registry follows each attempt.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from google.protobuf.message import Message
from opentelemetry import context as otel_context

from mlms.bounds.record import BoundRequest
from mlms.catalog.resolve import resolve_served
from mlms.errors import MlmsError, Unavailable
from mlms.evaluation.record import EvaluationRequest
from mlms.manifest import ModelManifest
from mlms.protos.mlms.v2 import calls_pb2, predictor_pb2, types_pb2
from mlms.registry.base import AgentRecord
from mlms.rpc.payloads import bound_message, evaluate_message
from mlms.rpc.propagation import outgoing_metadata
from mlms.rpc.status import error_from_rpc, transport_failure
from mlms.server.agents import AgentChannels
from mlms.server.fleet import Fleet, Pending
from mlms.server.jobs import Jobs, Kind
from mlms.server.selection import choose, parse_framework
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

#: What ``Dispatcher._dispatch`` sends to an agent.
Work = TypeVar("Work", EvaluationRequest, BoundRequest)

#: Agents tried for one request before giving up.
MAX_ATTEMPTS = 3
#: One predict call; evaluations have none (their length is unknown): keepalive finds the dead.
PREDICT_TIMEOUT_S = 60.0


@dataclass
class Failures:
    """The agents that one request failed on, and why: the next choice skips them, and the
    error that ends the request names every one."""

    what: str  # "evaluation <id>", "predict": named in messages
    agents: frozenset[str] = frozenset()
    reasons: list[str] = field(default_factory=list)

    def add(self, agent: AgentRecord, exc: grpc.RpcError) -> None:
        self.agents |= {agent.id}
        self.reasons.append(f"failed on {_peer(agent)}: {_transport_reason(exc)}")

    def explain(self, exc: MlmsError) -> MlmsError:
        """``exc`` (no agent left to choose) with what happened to those tried, if any."""
        if not self.reasons:
            return exc
        return type(exc)(f"{exc}; {self.what} {'; '.join(self.reasons)}")

    def exhausted(self) -> Unavailable:
        return Unavailable(
            f"{self.what} failed on {len(self.reasons)} agents in a row "
            f"({'; '.join(self.reasons)}); the fleet may be going down"
        )


class Dispatcher:
    def __init__(
        self,
        fleet: Fleet,
        jobs: Jobs,
        channels: AgentChannels,
        store: ObjectStore | None = None,
    ) -> None:
        """``store``: where models users added are found (none: the zoo's only)."""
        self.store = store
        self.fleet = fleet
        self.jobs = jobs
        self.channels = channels
        self.pending = Pending()
        self._sessions: dict[tuple[str, str, str, str], str] = {}
        self._sessions_lock = threading.Lock()

    @contextlib.contextmanager
    def _reserved(
        self,
        request: EvaluationRequest | BoundRequest | types_pb2.ModelSpec,
        manifest: ModelManifest,
        failures: Failures,
    ) -> Iterator[AgentRecord]:
        """The next agent for ``request`` (of model ``manifest``), none of those that failed,
        counted as this server's until the block ends; when none is left, the error names
        what happened to each one tried ("no live agents" alone hid it)."""
        framework = parse_framework(request.framework or None)

        def pick(pending: Mapping[str, int]) -> AgentRecord:
            try:
                return choose(
                    self.fleet.agents(),
                    manifest=manifest,
                    framework=framework,
                    hw=request.hw or "cpu",
                    pending=pending,
                    exclude=failures.agents,
                    devices=getattr(request, "tensor_parallel", 1),
                )
            except MlmsError as exc:
                raise failures.explain(exc) from exc

        with self.pending.reserve(pick) as agent:
            yield agent

    def model(self, name: str) -> ModelManifest:
        return resolve_served(name, self.store)

    def evaluate(
        self,
        request: EvaluationRequest,
        parent: otel_context.Context | None = None,
        evaluation_id: str | None = None,
    ) -> Iterator[calls_pb2.EvaluateEvent]:
        """Assigned, progress and record events; the record comes from whichever agent
        finished. ``evaluation_id``: the id to give it (a sweep's cell); default a new one."""
        return self._dispatch(
            request,
            kind="evaluation",
            method="Evaluate",
            message=evaluate_message,
            parent=parent,
            job_id=evaluation_id,
        )

    def bound(
        self, request: BoundRequest, parent: otel_context.Context | None = None
    ) -> Iterator[calls_pb2.EvaluateEvent]:
        """The same events for a bound, which ends with its ``BoundRecord``."""
        return self._dispatch(
            request,
            kind="bound",
            method="Bound",
            message=bound_message,
            parent=parent,
        )

    def _dispatch(
        self,
        request: Work,
        *,
        kind: Kind,
        method: str,
        message: Callable[[Work, str], Message],
        parent: otel_context.Context | None,
        job_id: str | None = None,
    ) -> Iterator[calls_pb2.EvaluateEvent]:
        """Run ``method`` of the Predictor service on a chosen agent with ``message(request
        for that agent's framework, id)``, moving to another agent on a transport failure;
        the id (given to the agent, kept across attempts) is the job's in the registry."""
        manifest = self.model(request.model)  # unknown: fails before anything is recorded
        parse_framework(request.framework)
        job_id = job_id or uuid.uuid4().hex
        failures = Failures(f"{kind} {job_id}")
        job = None
        try:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                with self._reserved(request, manifest, failures) as agent:
                    # Written once its agent is chosen: one registry write (an etcd commit) on
                    # the way to the agent instead of two.
                    job = (
                        self.jobs.start(job_id, request.model, kind, agent.id, attempt)
                        if job is None
                        else self.jobs.running(job, agent.id, attempt)
                    )
                    yield _assigned(job_id, agent, attempt)
                    forwarded = request.model_copy(update={"framework": agent.framework})
                    call = getattr(self.channels.stub(agent.address), method)(
                        message(forwarded, job_id), metadata=outgoing_metadata(parent)
                    )
                    if (yield from self._stream(call, agent, failures)):
                        return
            raise failures.exhausted()
        finally:
            if job is not None:
                self.jobs.finish(job_id)

    def _stream(
        self, call: Iterator[calls_pb2.EvaluateEvent], agent: AgentRecord, failures: Failures
    ) -> Generator[calls_pb2.EvaluateEvent, None, bool]:
        """The agent's events, passed on; True when the stream ended, False when the agent
        went away (noted in ``failures``). An error the agent raised itself is raised."""
        try:
            yield from call
            return True
        except grpc.RpcError as exc:
            if not transport_failure(exc):
                raise error_from_rpc(exc, _peer(agent)) from exc
            log.warning(
                "%s: agent %s at %s failed (%s: %s); retrying elsewhere",
                failures.what,
                agent.id,
                agent.address,
                exc.code().name,  # type: ignore[attr-defined]
                exc.details(),  # type: ignore[attr-defined]
            )
            failures.add(agent, exc)
            return False
        finally:
            call.cancel()  # type: ignore[attr-defined]  # the client went away: stop the agent's stream too

    def predict(
        self, request: calls_pb2.PredictRequest, parent: otel_context.Context | None = None
    ) -> calls_pb2.PredictResponse:
        failures = Failures("predict")
        manifest = self.model(request.spec.model)
        for _attempt in range(MAX_ATTEMPTS):
            with self._reserved(request.spec, manifest, failures) as agent:
                try:
                    return self._predict_on(agent, request, parent)
                except grpc.RpcError as exc:
                    if not transport_failure(exc):
                        raise error_from_rpc(exc, _peer(agent)) from exc
                    self._forget(agent, request.spec)
                    failures.add(agent, exc)
        raise failures.exhausted()

    def _predict_on(
        self,
        agent: AgentRecord,
        request: calls_pb2.PredictRequest,
        parent: otel_context.Context | None,
    ) -> calls_pb2.PredictResponse:
        """One predict in the agent's session for the model, opened as needed, and opened
        again once when the agent answers NOT_FOUND (it restarted and lost the session); both
        calls carry the caller's trace."""
        stub = self.channels.stub(agent.address)
        forwarded = calls_pb2.PredictRequest()
        forwarded.CopyFrom(request)
        forwarded.ClearField("spec")
        metadata = outgoing_metadata(parent)
        forwarded.session_id = self._session(agent, request.spec, stub)
        try:
            return stub.Predict(forwarded, timeout=PREDICT_TIMEOUT_S, metadata=metadata)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                raise
        self._forget(agent, request.spec)
        forwarded.session_id = self._session(agent, request.spec, stub)
        return stub.Predict(forwarded, timeout=PREDICT_TIMEOUT_S, metadata=metadata)

    def _session(self, agent: AgentRecord, spec: types_pb2.ModelSpec, stub) -> str:
        key = _session_key(agent, spec)
        with self._sessions_lock:
            session = self._sessions.get(key)
        if session is None:
            opened = stub.Open(
                predictor_pb2.OpenRequest(
                    spec=types_pb2.ModelSpec(
                        model=spec.model, framework=agent.framework, hw=spec.hw or "cpu"
                    )
                ),
                timeout=PREDICT_TIMEOUT_S * 5,  # the first open may build the asset
            )
            session = opened.session_id
            with self._sessions_lock:
                self._sessions[key] = session
        return session

    def _forget(self, agent: AgentRecord, spec: types_pb2.ModelSpec) -> None:
        with self._sessions_lock:
            self._sessions.pop(_session_key(agent, spec), None)


def _assigned(job_id: str, agent: AgentRecord, attempt: int) -> calls_pb2.EvaluateEvent:
    return calls_pb2.EvaluateEvent(
        assigned=calls_pb2.Assigned(
            evaluation_id=job_id, agent_id=agent.id, address=agent.address, attempt=attempt
        )
    )


def _session_key(agent: AgentRecord, spec: types_pb2.ModelSpec) -> tuple[str, str, str, str]:
    # One session per device however the alias is spelled (" CPU" and "cpu" alike).
    return (agent.id, spec.model, agent.framework, (spec.hw or "cpu").strip().lower())


def _transport_reason(exc: grpc.RpcError) -> str:
    """gRPC's words for a lost agent, with what they mean for the ones that need it."""
    details = exc.details() or ""  # type: ignore[attr-defined]
    said = f"{exc.code().name}: {details}"  # type: ignore[attr-defined]
    # The keepalive gave up: no reset, no answer. A kill -9 resets the connection instead.
    if "timed out" in details or "keepalive" in details.lower():
        return f"it stopped answering (a network partition or a hung host; {said})"
    return said


def _peer(agent: AgentRecord) -> str:
    return f"agent {agent.id} at {agent.address}"
