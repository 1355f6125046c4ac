"""The server's gRPC ``Evaluator`` service: protobuf in, dispatcher and store calls, out."""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from google.protobuf.message import Message
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from mlms.advise.record import AdviceRecord, AdviceRequest, list_advice
from mlms.advise.run import Ran, advise, stored_from_index
from mlms.analysis.catalog import analyze_stored, to_ipc
from mlms.assets.model_store import remove_model
from mlms.bounds.record import BoundRequest, list_bounds
from mlms.catalog.resolve import all_models, resolve_served
from mlms.database.index import EvaluationIndex
from mlms.database.keeper import index_sweep
from mlms.errors import (
    HardwareNotFound,
    InvalidArgument,
    MlmsError,
    StoreError,
    Unavailable,
    UnknownEvaluation,
)
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.record_store import FULL_ID, load_record
from mlms.evaluation.sweep import SweepSpec, load_sweep, new_sweep
from mlms.hardware import HardwareInfo
from mlms.protos.mlms.v2 import (
    advice_pb2,
    bound_pb2,
    calls_pb2,
    evaluation_pb2,
    evaluator_pb2,
    evaluator_pb2_grpc,
    fleet_pb2,
    manifest_pb2,
    sweep_pb2,
)
from mlms.registry.base import Registry
from mlms.rpc.convert import from_proto, to_proto
from mlms.rpc.options import CHUNK_BYTES
from mlms.rpc.payloads import bound_request, evaluation_request
from mlms.rpc.propagation import incoming_context
from mlms.server import jobs
from mlms.server.caches import (
    DEFAULT_MODEL_LISTINGS,
    MODELS_MAX_AGE_S,
    ListingCache,
    Lru,
    record_cache,
)
from mlms.server.dispatch import Dispatcher
from mlms.server.fleet import Fleet
from mlms.server.in_flight import InFlight
from mlms.server.model_changes import ModelChanges
from mlms.server.models import DEFAULT_MAX_UPLOAD_BYTES, receive_model
from mlms.server.shared_reads import SharedRead
from mlms.server.sweeps import FleetCells, SweepRun
from mlms.store.base import ObjectStore
from mlms.tracer.archive import archive_key

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
#: Models one ListModels may name: a sweep's worth (``SweepSpec.models``).
MAX_NAMED_MODELS = 128


class EvaluatorService(evaluator_pb2_grpc.EvaluatorServicer):
    def __init__(
        self,
        *,
        dispatcher: Dispatcher,
        fleet: Fleet,
        registry: Registry,
        store: ObjectStore,
        index: EvaluationIndex,
        provider: TracerProvider,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        model_changes: ModelChanges | None = None,
        cache: Lru[str, Message] | None = None,
        listings: ListingCache | None = None,
        model_listings: ListingCache | None = None,
        in_flight: InFlight | None = None,
    ) -> None:
        """``cache``, ``listings``, ``model_listings``: the answers kept for GetEvaluation,
        ListEvaluations and ListModels (``mlms.server.caches``); ``in_flight``: the jobs of
        every server that ListEvaluations names (``mlms.server.in_flight``)."""
        self.max_upload_bytes = max_upload_bytes
        self.dispatcher = dispatcher
        self.fleet = fleet
        self.registry = registry  # in-flight jobs of every server, for GetEvaluation's id
        self.store = store
        self.index = index  # shared by every server of the fleet
        self.records = cache if cache is not None else record_cache()
        self.listings = listings if listings is not None else ListingCache()
        self.model_changes = model_changes or ModelChanges(registry, None)
        self.model_listings = (
            model_listings
            if model_listings is not None
            else ListingCache(DEFAULT_MODEL_LISTINGS, MODELS_MAX_AGE_S)
        )
        # The fleet's view changes only with a watch's call: no age limit.
        self.agent_listing = ListingCache(1, math.inf)
        # Every ListEvaluations reads the index's generation; the calls waiting meanwhile
        # share one read.
        self.generation = SharedRead(index.generation)
        self.in_flight = in_flight if in_flight is not None else InFlight(registry)
        # The jobs in flight whose records are not indexed, while neither changes.
        self.unstored_listing = ListingCache(1)
        self.provider = provider
        self.tracer = provider.get_tracer("mlms.server")
        self.cells = FleetCells(dispatcher, fleet, registry, store)

    def Evaluate(self, request, context):
        evaluation = evaluation_request(request.spec)
        # A client's own id: asked again (through another server), it is stored once.
        chosen = request.evaluation_id or None
        if chosen is not None and not FULL_ID.fullmatch(chosen):
            raise InvalidArgument(
                f"evaluation id {chosen!r}: expected 32 lowercase hex digits, or none"
            )
        yield from self._dispatched(
            "server.evaluate",
            "mlms.evaluation_id",
            evaluation,
            lambda work, parent: self.dispatcher.evaluate(work, parent, chosen),
            context,
        )

    def Bound(self, request, context):
        bound = bound_request(request.spec)
        yield from self._dispatched(
            "server.bound", "mlms.bound_id", bound, self.dispatcher.bound, context
        )

    def _dispatched(
        self,
        span_name: str,
        id_attribute: str,
        request: EvaluationRequest | BoundRequest,
        dispatch: Callable[..., Iterator[calls_pb2.EvaluateEvent]],
        context,
    ) -> Iterator[calls_pb2.EvaluateEvent]:
        # Not a "current" span: the generator is resumed once per event, so the span is
        # passed down explicitly instead of being attached to the thread's context.
        span = self.tracer.start_span(
            span_name,
            context=incoming_context(context),
            attributes={"mlms.model": request.model, "mlms.hw": request.hw},
        )
        try:
            for event in dispatch(request, set_span_in_context(span)):
                which = event.WhichOneof("event")
                if which == "assigned":
                    span.set_attribute(id_attribute, event.assigned.evaluation_id)
                    span.set_attribute("mlms.agent_id", event.assigned.agent_id)
                elif which == "evaluation":
                    self._index(event.evaluation)
                yield event
        finally:
            span.end()
            self.provider.force_flush()

    def Advise(self, request, context):
        advice = from_proto(request.spec, AdviceRequest, "advice request")
        steps: queue.Queue[str | AdviceRecord | BaseException] = queue.Queue()

        def work() -> None:
            try:
                steps.put(
                    advise(
                        advice,
                        store=self.store,
                        hardware=self._hardware(advice.hw),
                        run=self._run_in_parallel,
                        stored=stored_from_index(self.store, self.index),
                        bounds=list_bounds(self.store),
                        step=steps.put,
                        served=True,
                    )
                )
            except BaseException as exc:  # handed to the stream, raised there
                steps.put(exc)

        threading.Thread(target=work, name="advise", daemon=True).start()
        while True:
            item = steps.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, AdviceRecord):
                yield advice_pb2.AdviseEvent(advice=to_proto(item, advice_pb2.AdviceRecord))
                return
            yield advice_pb2.AdviseEvent(step=item)

    def ListAdvice(self, request, context):
        return advice_pb2.ListAdviceResponse(
            advice=[to_proto(a, advice_pb2.AdviceRecord) for a in list_advice(self.store)]
        )

    def _hardware(self, hw: str) -> HardwareInfo:
        """The hardware of a live agent that has ``hw``."""
        for agent in self.fleet.agents():
            if agent.serves_hw(hw):
                return agent.hardware
        raise HardwareNotFound(f"hardware {hw!r}: no live agent has it")

    def _run_in_parallel(self, requests: Sequence[EvaluationRequest]) -> list[Ran]:
        """Through the dispatcher, as many at once as live agents have the hardware."""
        hw = requests[0].hw.lower() if requests else "cpu"
        width = sum(a.serves_hw(hw) for a in self.fleet.agents())

        def evaluate(request: EvaluationRequest) -> EvaluationRecord:
            for event in self.dispatcher.evaluate(request):
                if event.WhichOneof("event") == "evaluation":
                    self._index(event.evaluation)
                    return from_proto(event.evaluation, EvaluationRecord, "record")
            raise Unavailable(f"the evaluation of {request.model} ended without a record")

        with ThreadPoolExecutor(max_workers=max(1, width)) as pool:
            return list(pool.map(lambda request: Ran.timing(evaluate, request), requests))

    def Predict(self, request, context):
        with self.tracer.start_as_current_span(
            "server.predict", context=incoming_context(context)
        ) as span:
            return self.dispatcher.predict(request, set_span_in_context(span))

    def ListAgents(self, request, context):
        return self.agent_listing.answer(b"", self.fleet.version(), self._agents)

    def _agents(self) -> evaluator_pb2.ListAgentsResponse:
        agents = sorted(self.fleet.agents(), key=lambda a: a.address)
        return evaluator_pb2.ListAgentsResponse(
            agents=[to_proto(a, fleet_pb2.AgentRecord) for a in agents]
        )

    def ListModels(self, request, context):
        if len(request.names) > MAX_NAMED_MODELS:
            raise InvalidArgument(
                f"ListModels names {len(request.names)} models: expected at most "
                f"{MAX_NAMED_MODELS}; list them all without names"
            )
        return self.model_listings.answer(
            request.SerializeToString(deterministic=True),
            self.model_changes.generation(),
            lambda: self._models(request),
        )

    def _models(self, request) -> evaluator_pb2.ListModelsResponse:
        if request.names:
            manifests = [resolve_served(name, self.store) for name in request.names]
        else:
            manifests = all_models(self.store, libraries=request.libraries)
        return evaluator_pb2.ListModelsResponse(
            manifests=[to_proto(m, manifest_pb2.ModelManifest) for m in manifests]
        )

    def AddModel(self, request_iterator, context):
        manifest = receive_model(request_iterator, self.store, self.max_upload_bytes)
        self.model_changes.changed()
        return evaluator_pb2.AddModelResponse(
            manifest=to_proto(manifest, manifest_pb2.ModelManifest)
        )

    def RemoveModel(self, request, context):
        version = request.version if request.HasField("version") else None
        removed = remove_model(self.store, request.name, version)
        self.model_changes.changed()
        return evaluator_pb2.RemoveModelResponse(versions=removed)

    def _index(self, message: evaluation_pb2.EvaluationRecord) -> None:
        """Index a record an agent answered with (agents without the database leave that to
        the servers); a record indexed already stays as it is."""
        self._index_record(from_proto(message, EvaluationRecord, "evaluation record from an agent"))

    def _index_record(self, record: EvaluationRecord) -> None:
        try:
            self.index.add([record])
        except MlmsError as exc:  # down: the keeper catches up from the store later
            log.warning("evaluation %s: not indexed now: %s", record.id, exc)

    def GetEvaluation(self, request, context):
        wanted = request.evaluation_id.lower()
        cached = self.records.get(wanted)
        if cached is not None:
            return cached
        if wanted and not FULL_ID.fullmatch(wanted):
            with contextlib.suppress(MlmsError):  # the index down: the store resolves it
                found = self.index.resolve(wanted)
                wanted = found[0] if len(found) == 1 else wanted
            cached = self.records.get(wanted)
            if cached is not None:
                return cached
        try:
            record = load_record(self.store, wanted)
        except UnknownEvaluation:
            # Not stored yet: it may be in flight on this or any other server.
            job = self._job(request.evaluation_id)
            if job is None:
                raise
            return evaluator_pb2.GetEvaluationResponse(job=to_proto(job, fleet_pb2.Job))
        # Read from the store, it may not be indexed yet (its server went away before it did):
        # listed from now on, not from the keeper's next catch-up.
        self._index_record(record)
        answer = evaluator_pb2.GetEvaluationResponse(
            record=to_proto(record, evaluation_pb2.EvaluationRecord)
        )
        self.records.put(record.id, answer)
        return answer

    def _job(self, evaluation_id: str) -> jobs.Job | None:
        """The evaluation in flight with this id (or unique prefix) as the registry has it
        now; while the registry is out of reach, as this server last saw it: a client that
        follows its evaluation goes on by what it is told (in flight, or not, and then by the
        agents' view) instead of failing while etcd restarts."""
        try:
            return jobs.find(self.registry, evaluation_id, "evaluation")
        except Unavailable:
            return jobs.matching(self.in_flight.jobs("evaluation"), evaluation_id)

    def ListEvaluations(self, request, context):
        # Read before the page: a write in between makes the next call read the page again.
        generation = self.generation.get()
        unstored = self._unstored(generation).jobs
        key = request.query.SerializeToString(deterministic=True)
        answer = self.listings.answer(key, generation, lambda: self._listing(request))
        if not unstored:
            return answer
        reply = evaluator_pb2.ListEvaluationsResponse()
        reply.CopyFrom(answer)  # the cached answer is shared by every call
        # A record indexed after the jobs were checked, and on this page: the record wins.
        paged = {summary.id for summary in answer.summaries}
        reply.jobs.extend(job for job in unstored if job.evaluation_id not in paged)
        return reply

    def _unstored(self, generation: str | None) -> evaluator_pb2.ListEvaluationsResponse:
        """The evaluations in flight whose records are not indexed: a server indexes a record
        before it removes the job, and the watch brings another server's removal later, so a
        job whose record is indexed is never listed as in flight."""
        version = self.in_flight.version()  # read before the jobs, as the generation is
        return self.unstored_listing.answer(
            b"", generation and f"{generation}/{version}", self._unstored_jobs
        )

    def _unstored_jobs(self) -> evaluator_pb2.ListEvaluationsResponse:
        in_flight = self.in_flight.jobs("evaluation")
        # The index is asked only while some are in flight.
        indexed = self.index.present([j.evaluation_id for j in in_flight]) if in_flight else set()
        return evaluator_pb2.ListEvaluationsResponse(
            jobs=[to_proto(j, fleet_pb2.Job) for j in in_flight if j.evaluation_id not in indexed]
        )

    def _listing(self, request) -> evaluator_pb2.ListEvaluationsResponse:
        query = (
            from_proto(request.query, EvaluationQuery, "evaluation query")
            if request.HasField("query")
            else EvaluationQuery()
        )
        page = self.index.page(query)
        return evaluator_pb2.ListEvaluationsResponse(
            summaries=[to_proto(s, evaluation_pb2.EvaluationSummary) for s in page.summaries],
            next_page_token=page.next_page_token,
            total=page.total,
        )

    def ViewEvaluations(self, request, context):
        query = from_proto(request.query, EvaluationQuery, "evaluation query")
        return evaluator_pb2.ViewEvaluationsResponse(
            rows=[to_proto(r, evaluation_pb2.P50Row) for r in self.index.view(request.view, query)]
        )

    def ListBounds(self, request, context):
        return evaluator_pb2.ListBoundsResponse(
            bounds=[to_proto(b, bound_pb2.BoundRecord) for b in list_bounds(self.store)]
        )

    def Sweep(self, request, context):
        if request.sweep_id:
            if request.HasField("spec"):
                raise InvalidArgument(
                    f"a sweep request with a spec and sweep id {request.sweep_id!r}: expected "
                    "a spec (a new sweep) or an id (to resume), not both"
                )
            sweep = load_sweep(self.store, request.sweep_id)
        else:
            sweep = new_sweep(from_proto(request.spec, SweepSpec, "sweep request"))
        run = SweepRun(sweep, self.store, self.cells.run, self.cells.lane, self.cells.width)
        index_sweep(self.index, run.sweep)  # before its cells run: the sweep filter finds them
        # When the caller goes away, the groups running finish (and are stored); no more start.
        context.add_callback(run.stop)
        for state in run.start().updates():
            yield to_proto(state, sweep_pb2.SweepState)

    def GetSpans(self, request, context):
        if not _TRACE_ID.fullmatch(request.trace_id):
            raise InvalidArgument(f"trace id {request.trace_id!r}: expected 32 hex digits")
        try:
            data = self.store.get_bytes(archive_key(request.trace_id))
        except StoreError as exc:
            raise UnknownEvaluation(
                f"no span archive for trace {request.trace_id!r} in {self.store.url}"
            ) from exc
        for start in range(0, len(data), CHUNK_BYTES):
            yield evaluator_pb2.SpansChunk(data=data[start : start + CHUNK_BYTES])

    def Analyze(self, request, context):
        with self.tracer.start_as_current_span(
            "server.analyze",
            context=incoming_context(context),
            attributes={"mlms.analyses": list(request.analyses)},
        ):
            tables = analyze_stored(
                self.store,
                list(request.evaluation_ids),
                list(request.analyses),
                request.top or None,
            )
        for name, table in tables.items():
            data = to_ipc(table)
            for start in range(0, len(data), CHUNK_BYTES):
                yield evaluator_pb2.AnalysisChunk(
                    analysis=name, data=data[start : start + CHUNK_BYTES]
                )
