"""The server process: stateless; everything it knows is in the registry and the store.

It serves ``Evaluator`` (plus health and reflection), watches the registry's agents and every
server's jobs, records its in-flight jobs under its own lease and reads records and span
archives from the store, so any number of servers can run side by side and a second one
answers for the first's work.
"""

from __future__ import annotations

import gc
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlms.client_tls import is_loopback
from mlms.database.connect import url_for
from mlms.database.index import EvaluationIndex
from mlms.database.keeper import IndexKeeper
from mlms.protos.mlms.v2 import evaluator_pb2, evaluator_pb2_grpc
from mlms.registry.base import Registry
from mlms.registry.factory import registry_from_url
from mlms.rpc.otlp import process_provider
from mlms.rpc.serving import (
    RunningServer,
    Service,
    StopSignal,
    advertised,
    start_server,
    write_address_file,
)
from mlms.security.auth import EVALUATOR_ROLES, TokenInterceptor
from mlms.security.tls import TlsFiles, check_plaintext_allowed
from mlms.security.tokens import Tokens
from mlms.server.admission import Admission
from mlms.server.agents import AgentChannels
from mlms.server.backpressure import Backpressure, Limits
from mlms.server.caches import DEFAULT_LISTINGS, DEFAULT_SIZE, ListingCache, record_cache
from mlms.server.dispatch import Dispatcher
from mlms.server.fleet import Fleet
from mlms.server.in_flight import InFlight
from mlms.server.jobs import Jobs
from mlms.server.model_changes import ModelChanges
from mlms.server.models import DEFAULT_MAX_UPLOAD_BYTES
from mlms.server.service import EvaluatorService
from mlms.store.factory import store_from_url

log = logging.getLogger(__name__)

SERVICE_NAME = evaluator_pb2.DESCRIPTOR.services_by_name["Evaluator"].full_name


@dataclass(frozen=True)
class ServerConfig:
    listen: str = "127.0.0.1:0"
    registry: str = "memory://"
    store: str | None = None
    ttl: float = 5.0  # of the lease that holds this server's jobs
    otlp_endpoint: str | None = None
    grace: float = 10.0
    tls: TlsFiles = field(default_factory=TlsFiles)
    insecure: bool = False  # plaintext allowed off loopback
    #: Bearer tokens on every call; ``None``: required unless the server listens on loopback.
    auth: bool | None = None
    #: The name every agent certificate carries, checked instead of each advertised address.
    agent_tls_name: str | None = None
    #: The largest model artifact AddModel takes.
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    #: The evaluation index (``mlms.database``): every server of a fleet names the same one;
    #: None: ``MLMS_DATABASE``, else SQLite beside a local store or under ``$MLMS_HOME``.
    database: str | None = None
    #: Records GetEvaluation keeps in memory (records never change); 0: read the store each time.
    record_cache: int = DEFAULT_SIZE
    #: ListEvaluations answers kept in memory while the index is unchanged; 0: none.
    listing_cache: int = DEFAULT_LISTINGS
    #: Where to write the address this server serves on, once it does (``--listen HOST:0``).
    address_file: Path | None = None
    #: Calls at once and callers' quotas, beyond which calls are refused for load.
    limits: Limits = field(default_factory=Limits)

    @property
    def requires_tokens(self) -> bool:
        if self.auth is not None:
            return self.auth
        return not is_loopback(self.listen.rpartition(":")[0])


def serve(
    config: ServerConfig,
    signalled: StopSignal,
    *,
    reuse_port: bool = False,
    started: Callable[[], None] | None = None,
) -> None:
    """The server as a process of its own runs it: started (then ``started()``), serving until
    ``signalled``, stopped gracefully. What start-up made (modules, the zoo, the index's
    engine) is frozen out of the cyclic collector's reach: collections then walk only what calls
    make, instead of pausing every call in flight for a walk of everything."""
    server = Server(config, reuse_port=reuse_port).start()
    gc.freeze()
    if started is not None:
        started()
    signalled.wait_then(server.stop)


class Server:
    def __init__(
        self, config: ServerConfig, *, registry: Registry | None = None, reuse_port: bool = False
    ) -> None:
        """``registry`` overrides ``config.registry`` (one in-memory registry shared in-process);
        ``reuse_port``: share the port with the other workers of ``mlms.server.workers``."""
        self.reuse_port = reuse_port
        check_plaintext_allowed("mlms server", config.listen, config.tls, config.insecure)
        if config.tls.enabled:
            config.tls.require_server_files("mlms server")
        self.config = config
        self.id = uuid.uuid4().hex[:16]
        self.registry = registry or registry_from_url(config.registry)
        self._owns_registry = registry is None  # a shared one is closed by whoever made it
        self.store = store_from_url(config.store)
        self.index = EvaluationIndex(url_for(self.store, config.database))
        self.keeper = IndexKeeper(self.store, self.index)
        self.provider = process_provider("mlms-server", config.otlp_endpoint)
        self.lease = self.registry.lease(config.ttl)
        # Under TLS, agents are admitted by their certificates and dialled with ours.
        admission = (
            Admission(config.tls, config.agent_tls_name) if config.tls.cert is not None else None
        )
        self.fleet = Fleet(self.registry, admission.admits if admission else None)
        self.channels = AgentChannels(
            config.tls, insecure=config.insecure, agent_name=config.agent_tls_name
        )
        self.tokens = Tokens(self.store) if config.requires_tokens else None
        self.in_flight = InFlight(self.registry, self.id)
        self.dispatcher = Dispatcher(
            self.fleet,
            Jobs(self.registry, self.lease, self.id, self.in_flight),
            self.channels,
            self.store,
        )
        self.model_changes = ModelChanges(self.registry, self.lease)
        self.service = EvaluatorService(
            dispatcher=self.dispatcher,
            fleet=self.fleet,
            registry=self.registry,
            store=self.store,
            index=self.index,
            provider=self.provider,
            max_upload_bytes=config.max_upload_bytes,
            cache=record_cache(config.record_cache),
            listings=ListingCache(config.listing_cache),
            model_changes=self.model_changes,
            in_flight=self.in_flight,
        )
        self.server: RunningServer | None = None
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        assert self.server is not None, "start() first"
        return self.server.port

    def start(self) -> Server:
        self.server = start_server(
            self.config.listen,
            [
                Service(
                    SERVICE_NAME, self.service, evaluator_pb2_grpc.add_EvaluatorServicer_to_server
                )
            ],
            credentials=(
                self.config.tls.server_credentials(require_client_cert=False)
                if self.config.tls.cert is not None
                else None
            ),
            interceptors=[
                *(
                    [TokenInterceptor(self.tokens, SERVICE_NAME, EVALUATOR_ROLES)]
                    if self.tokens is not None
                    else []
                ),
                Backpressure(self.config.limits, self.tokens),
            ],
            max_workers=self.config.limits.threads,
            reuse_port=self.reuse_port,
        )
        self.keeper.start()
        log.info(
            "server %s: listening on %s (port %d, %s, %s), registry %s, store %s, "
            "database %s, %d agents",
            self.id,
            self.config.listen,
            self.server.port,
            "TLS" if self.config.tls.cert is not None else "plaintext",
            "tokens required" if self.tokens is not None else "no tokens",
            self.registry.url,
            self.store.url,
            self.index.shown_url,
            len(self.fleet.agents()),
        )
        if self.config.address_file is not None:
            write_address_file(
                self.config.address_file, advertised(self.config.listen, None, self.port)
            )
        return self

    def stop(self, grace: float | None = None) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace if grace is None else grace
        log.info("server %s: stopping (grace %ss)", self.id, grace)
        if self.server is not None:
            self.server.stop(grace)
        self.fleet.close()
        self.model_changes.close()
        self.in_flight.close()
        self.channels.close()
        self.keeper.stop()
        self.index.close()
        self.lease.close()
        self.provider.shutdown()
        if self._owns_registry:
            self.registry.close()
