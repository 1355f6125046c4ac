"""The agent process: one framework on one machine (or on one GPU of it: a worker of
``mlms agent --gpus``, ``mlms.agent.per_gpu``), registered in etcd while it is alive.

Start: serve ``Predictor`` and the Open Inference Protocol (plus health and reflection) on
one port, then register the agent's record under a lease of ``ttl`` seconds that the registry
keeps alive (and grants again after an etcd restart). The record's in-flight count follows
the evaluations queued or running here; its ``gpus`` the GPUs CUDA shows the process.
Stop (SIGTERM or SIGINT): health NOT_SERVING, leave the registry, let calls in flight finish
within the grace period, close loaded models, flush spans.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mlms import hardware
from mlms.agent import open_inference
from mlms.agent.service import Load, PredictorService
from mlms.catalog.zoo import all_models
from mlms.errors import MlmsError, UnsupportedFramework
from mlms.frameworks import installed_version
from mlms.protos.mlms.v2 import predictor_pb2, predictor_pb2_grpc
from mlms.registry.agents import AgentRegistration, register_agent
from mlms.registry.base import AgentRecord, Registry
from mlms.registry.factory import registry_from_url
from mlms.rpc.otlp import process_provider
from mlms.rpc.serving import (
    RunningServer,
    Service,
    advertised,
    split_address,
    start_server,
    write_address_file,
)
from mlms.security.auth import PeerRoleInterceptor
from mlms.security.tls import TlsFiles, check_plaintext_allowed
from mlms.store.factory import store_from_url

log = logging.getLogger(__name__)

SERVICE_NAME = predictor_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name


@dataclass(frozen=True)
class AgentConfig:
    framework: str
    listen: str = "127.0.0.1:0"
    advertise: str | None = None  # default: the listen address, with the bound port
    registry: str = "memory://"
    store: str | None = None  # default: the local store under MLMS_HOME
    ttl: float = 5.0
    otlp_endpoint: str | None = None
    grace: float = 10.0
    #: Under TLS the agent demands a client certificate from the CA naming the server role.
    tls: TlsFiles = field(default_factory=TlsFiles)
    insecure: bool = False  # plaintext allowed off loopback
    #: The evaluation index where record ids are claimed; None: none (servers index them).
    database: str | None = None
    #: Where to write the address the agent serves on once it is registered: with port 0,
    #: how the process that started it learns the port, which no other process can take first.
    address_file: Path | None = None


def runnable_models(framework: str, version: str) -> list[str]:
    """Zoo models whose manifest admits this framework version."""
    names = []
    for manifest in all_models():
        constraint = manifest.constraint_for(framework)
        if constraint is not None and constraint.admits(version):
            names.append(manifest.name)
    return names


class Agent:
    def __init__(self, config: AgentConfig, *, registry: Registry | None = None) -> None:
        """``registry`` overrides ``config.registry`` (one in-memory registry shared in-process)."""
        version = installed_version(config.framework)
        if version is None:
            raise UnsupportedFramework(
                f"framework {config.framework!r} is not installed here; install the "
                f"mlms[{config.framework}] extra or start the agent with another --framework"
            )
        split_address(config.listen)
        check_plaintext_allowed("mlms agent", config.listen, config.tls, config.insecure)
        if config.tls.enabled:
            config.tls.require_server_files("mlms agent")
        self.config = config
        self.id = uuid.uuid4().hex[:16]
        self.framework_version = version
        self.registry = registry or registry_from_url(config.registry)
        self._owns_registry = registry is None  # a shared one is closed by whoever made it
        self.store = store_from_url(config.store)
        self.index = None
        if config.database:
            # Imported here: an agent without the database never loads SQLAlchemy.
            from mlms.database.index import EvaluationIndex

            self.index = EvaluationIndex(config.database)
        self.provider = process_provider("mlms-agent", config.otlp_endpoint)
        self.load = Load()
        self.service = PredictorService(
            framework=config.framework,
            store=self.store,
            index=self.index,
            describe=self.record,
            agent_labels=self.labels,
            load=self.load,
            provider=self.provider,
            otlp_endpoint=config.otlp_endpoint,
        )
        self.models = runnable_models(config.framework, version)
        self.open_inference = open_inference.OpenInferenceService(
            framework=config.framework,
            models=self.models,
            store=self.store,
            provider=self.provider,
            agent_labels=self.labels,
            device=open_inference.default_device(),
        )
        self.started_at = datetime.now(UTC)
        #: The GPUs CUDA shows this process (NVML indices): its only one under ``--gpus``.
        self.gpus = [gpu.index for gpu in hardware.visible_gpus(hardware.detect())]
        self.server: RunningServer | None = None
        self.registration: AgentRegistration | None = None
        self.address = ""
        self._stopped = threading.Event()
        self._publish_lock = threading.Lock()

    def start(self) -> Agent:
        self.server = start_server(
            self.config.listen,
            [
                Service(
                    SERVICE_NAME, self.service, predictor_pb2_grpc.add_PredictorServicer_to_server
                ),
                Service(
                    open_inference.SERVICE_NAME, self.open_inference, open_inference.add_to_server
                ),
            ],
            credentials=(
                self.config.tls.server_credentials(require_client_cert=True)
                if self.config.tls.cert is not None
                else None
            ),
            interceptors=(
                [PeerRoleInterceptor("server")] if self.config.tls.cert is not None else []
            ),
        )
        self.address = advertised(self.config.listen, self.config.advertise, self.server.port)
        self.registration = register_agent(self.registry, self.record(), self.config.ttl)
        self.load.on_change = lambda _count: self._publish()
        if self.config.address_file is not None:
            write_address_file(self.config.address_file, self.address)
        log.info(
            "agent %s: %s %s on %s, %s, %d models, registered in %s (ttl %ss)",
            self.id,
            self.config.framework,
            self.framework_version,
            self.address,
            _gpus_label(self.record()),
            len(self.models),
            self.registry.url,
            self.config.ttl,
        )
        return self

    def record(self) -> AgentRecord:
        return AgentRecord(
            id=self.id,
            address=self.address,
            framework=self.config.framework,
            framework_version=self.framework_version,
            hardware=hardware.detect(),
            models=self.models,
            in_flight=self.load.count,
            running=self.load.ids,
            started_at=self.started_at,
            gpus=self.gpus,
        )

    def labels(self) -> dict[str, str]:
        return {"agent_id": self.id, "address": self.address}

    def _publish(self) -> None:
        """Put the record again with the current load."""
        with self._publish_lock:
            if self.registration is not None and not self._stopped.is_set():
                try:
                    self.registration.update(self.record())
                except MlmsError as exc:  # the registry is down; it is put again once it answers
                    log.warning("agent %s: could not publish its load: %s", self.id, exc)

    def stop(self, grace: float | None = None) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace if grace is None else grace
        log.info("agent %s: stopping (grace %ss)", self.id, grace)
        if self.registration is not None:
            self.registration.close()  # leave the registry first: the server stops choosing us
        if self.server is not None:
            self.server.stop(grace)
        self.service.close_all()
        self.open_inference.close()
        self.provider.shutdown()
        if self.index is not None:
            self.index.close()
        if self._owns_registry:
            self.registry.close()

    def wait(self) -> None:
        self._stopped.wait()


def _gpus_label(record: AgentRecord) -> str:
    """``GPU 1 NVIDIA H100 80GB HBM3 (GPU-8932f937-...)``, or ``no GPU``."""
    gpus = record.usable_gpus()
    return ", ".join(f"GPU {g.label} ({g.uuid or 'no UUID'})" for g in gpus) or "no GPU"
