"""The mlms fleet on network-namespace hosts (``tests/netns.py``), as an operator would run it
on separate machines: etcd and an S3 server (moto's, as a process) on host ``store``, one
``mlms server`` on host ``server`` (and with ``servers=2``, one more on host ``server2``: clients
are given both addresses), one ``mlms agent`` (torch) on each host ``agentN``.

Every process talks over the bridge with its host's own address. The server and the agents
serve TLS from ``mlms certs`` (mutual between them), the server demands a bearer token from
``mlms token create``; etcd and S3 are plaintext, which their clients allow without
credentials to send. The bucket is versioned, so that a record written twice for one
evaluation id can be counted afterwards (``record_versions``).

Processes run through the ``mlms`` CLI (``python -m mlms server|agent``), never through
mlms's modules, so that they start the way a deployment starts them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import requests

from mlms import errors
from mlms.evaluation.record import EvaluationRequest
from mlms.registry.base import AgentRecord, Registry
from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.security.tls import TlsFiles
from mlms.store.base import ObjectStore
from mlms.store.s3 import S3Store
from tests.netns import Host, HostProcess, Network
from tests.shared_assets import copy_asset

T = TypeVar("T")

ETCD_PORT, S3_PORT, SERVER_PORT, AGENT_PORT = 2379, 9000, 50051, 50052
BUCKET = "mlms-multihost"
MODEL = "digits_cnn"
#: Credentials moto takes (any); what the processes sign their S3 calls with.
S3_ENV = {"AWS_ACCESS_KEY_ID": "mlms-test", "AWS_SECRET_ACCESS_KEY": "mlms-test-secret"}
READY_S = 120.0  # torch's import on a loaded 2-core machine takes most of it


def wait_until(condition: Callable[[], T], timeout: float, what: str, every: float = 0.1) -> T:
    """The first truthy value of ``condition`` within ``timeout`` seconds, else fail naming
    ``what``; an ``MlmsError`` raised by the condition counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except errors.MlmsError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def request(**changes) -> EvaluationRequest:
    """A short evaluation of the small zoo model."""
    values = {
        "model": MODEL,
        "framework": "torch",
        "batch_sizes": [1],
        "iterations": 4,
        "warmup": 1,
        "min_seconds": 0.0,
    }
    return EvaluationRequest(**(values | changes))


@dataclass
class MultiHostFleet:
    network: Network
    root: Path
    ttl: float
    store_host: Host
    server_hosts: dict[str, Host]  # by host name; the first is "server"
    agent_hosts: dict[str, Host]
    etcd: HostProcess | None = None
    s3: HostProcess | None = None
    servers: dict[str, HostProcess] = field(default_factory=dict)  # by host name
    agents: dict[str, HostProcess] = field(default_factory=dict)  # by host name
    token: str = ""
    _registry: Registry | None = None

    # -- where things are -------------------------------------------------------------------
    @property
    def registry_url(self) -> str:
        return f"etcd://{self.store_host.address}:{ETCD_PORT}"

    @property
    def store_url(self) -> str:
        return f"s3://{self.s3_endpoint}/{BUCKET}"

    @property
    def s3_endpoint(self) -> str:
        return f"{self.store_host.address}:{S3_PORT}"

    @property
    def server_host(self) -> Host:
        return self.server_hosts["server"]

    @property
    def server(self) -> HostProcess | None:
        return self.servers.get("server")

    @property
    def server_address(self) -> str:
        return self.address_of_server("server")

    def address_of_server(self, name: str) -> str:
        return f"{self.server_hosts[name].address}:{SERVER_PORT}"

    def agent_address(self, name: str) -> str:
        return f"{self.agent_hosts[name].address}:{AGENT_PORT}"

    @property
    def certs(self) -> Path:
        return self.root / "certs"

    def env(self, host: Host, role: str) -> dict[str, str]:
        home = self.root / "homes" / host.name  # each host its own disk
        home.mkdir(parents=True, exist_ok=True)
        return {
            **S3_ENV,
            "MLMS_HOME": str(home),
            "MLMS_REGISTRY": self.registry_url,
            "MLMS_STORE": self.store_url,
            "MLMS_TTL": str(self.ttl),
            "MLMS_GRACE": "1",
            "MLMS_TLS_CA": str(self.certs / "ca.pem"),
            "MLMS_TLS_CERT": str(self.certs / f"{role}.pem"),
            "MLMS_TLS_KEY": str(self.certs / f"{role}-key.pem"),
        }

    def log(self, name: str) -> Path:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        return self.root / "logs" / f"{name}.log"

    # -- processes --------------------------------------------------------------------------
    def start_etcd(self) -> None:
        address = self.store_host.address
        peer = "http://127.0.0.1:2380"  # one member: its peers stay on the host's loopback
        self.etcd = self.store_host.start(
            [
                "etcd",
                "--name=mlms",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls=http://{address}:{ETCD_PORT}",
                f"--advertise-client-urls=http://{address}:{ETCD_PORT}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=mlms={peer}",
                "--logger=zap",
                "--log-level=warn",
            ],
            self.log("etcd"),
        )
        wait_until(self.etcd_healthy, 30, f"etcd at {address}:{ETCD_PORT}")

    def etcd_healthy(self) -> bool:
        assert self.etcd is not None
        if not self.etcd.alive():
            raise AssertionError(f"etcd exited:\n{self.etcd.output()[-2000:]}")
        try:
            url = f"http://{self.store_host.address}:{ETCD_PORT}/health"
            return requests.get(url, timeout=1).json().get("health") in ("true", True)
        except (requests.RequestException, ValueError):
            return False

    def start_s3(self) -> None:
        port = ["-p", str(S3_PORT)]
        self.s3 = self.store_host.start(
            [sys.executable, "-m", "moto.server", f"--host={self.store_host.address}", *port],
            self.log("s3"),
        )
        wait_until(self._s3_up, 30, f"moto S3 at {self.s3_endpoint}")
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://{self.s3_endpoint}",
            region_name="us-east-1",
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        self._s3 = s3

    def _s3_up(self) -> bool:
        try:
            return requests.get(f"http://{self.s3_endpoint}/", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def record_versions(self) -> dict[str, int]:
        """How many times each evaluation's record was written (its object's versions)."""
        counts: dict[str, int] = {}
        pages = self._s3.get_paginator("list_object_versions")
        for page in pages.paginate(Bucket=BUCKET, Prefix="evaluations/"):
            for version in page.get("Versions", []):
                name = version["Key"].rsplit("/", 1)[-1].removesuffix(".json")
                counts[name] = counts.get(name, 0) + 1
        return counts

    def start_server(self, name: str = "server", *, wait: bool = True) -> None:
        host = self.server_hosts[name]
        self.servers[name] = host.start(
            [sys.executable, "-m", "mlms", "server", "--listen", self.address_of_server(name)],
            self.log(name),
            self.env(host, "server"),
        )
        if wait:
            with self.client(only=name) as client:
                wait_until(lambda: _listing(client) is not None, READY_S, f"the server {name}")

    def start_agent(self, name: str) -> None:
        host = self.agent_hosts[name]
        self.agents[name] = host.start(
            [
                sys.executable,
                "-m",
                "mlms",
                "agent",
                "--framework",
                "torch",
                "--listen",
                self.agent_address(name),
            ],
            self.log(name),
            self.env(host, "agent"),
        )

    def wait_agents(self, names: list[str] | None = None, timeout: float = READY_S) -> None:
        """Until the named agents (default: all) are in etcd and in every server's view."""
        wanted = {self.agent_address(n) for n in (names or self.agent_hosts)}
        wait_until(lambda: wanted <= set(self.registered()), timeout, f"agents {sorted(wanted)}")
        for name in self.servers:
            with self.client(only=name) as client:
                wait_until(
                    lambda c=client: wanted <= {a.address for a in _listing(c) or []},
                    timeout,
                    f"the server {name} to see the agents",
                )

    # -- views ------------------------------------------------------------------------------
    def client(self, only: str | None = None, **options) -> RemoteClient:
        """A client of every server (the next when one is down), or of the one named."""
        names = [only] if only else list(self.server_hosts)
        return RemoteClient(
            ",".join(self.address_of_server(name) for name in names),
            tls=TlsFiles.load(str(self.certs / "ca.pem")),
            token=self.token,
            **options,
        )

    def registered(self) -> dict[str, str]:
        """Agent address -> agent id, read from etcd by this (the root namespace's) process;
        raises ``Unavailable`` when etcd does not answer."""
        if self._registry is None:
            self._registry = registry_from_url(self.registry_url)
        values = self._registry.get_prefix("agents/").values()
        records = [AgentRecord.model_validate_json(value) for value in values]
        return {record.address: record.id for record in records}

    def logs_text(self, tail: int = 3000) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-tail:]}"
            for p in sorted((self.root / "logs").glob("*.log"))
        )

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
        for process in [*self.servers.values(), *self.agents.values()]:
            if process.alive():
                process.terminate(5)
        self.network.close()


def _listing(client: RemoteClient) -> list | None:
    try:
        return client.list_agents()
    except errors.MlmsError:
        return None


def _mlms(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mlms", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    if done.returncode != 0:
        raise AssertionError(f"mlms {' '.join(args)}: {done.stderr[-2000:]}")
    return done.stdout


@contextlib.contextmanager
def multihost_fleet(
    root: Path,
    *,
    agents: int = 2,
    servers: int = 1,
    ttl: float = 2.0,
    assets_from: ObjectStore | None = None,
) -> Iterator[MultiHostFleet]:
    """The fleet, started and waited for; everything removed on the way out, also on failure.
    The model's torch asset is copied from ``assets_from`` where given, else built by ``mlms
    assets`` into the fleet's store."""
    network = Network()
    fleet: MultiHostFleet | None = None
    try:
        store_host = network.add_host("store")
        names = ["server", *(f"server{i}" for i in range(2, servers + 1))]
        server_hosts = {name: network.add_host(name) for name in names}
        agent_hosts = {f"agent{i}": network.add_host(f"agent{i}") for i in range(1, agents + 1)}
        fleet = MultiHostFleet(network, root, ttl, store_host, server_hosts, agent_hosts)
        hosts = [network.address, *(h.address for h in network.hosts.values())]
        _mlms(["certs", str(fleet.certs), *(f"--host={h}" for h in hosts)], {})
        fleet.start_etcd()
        fleet.start_s3()
        here = {**S3_ENV, "MLMS_HOME": str(root / "homes" / "tests")}
        # In the store beforehand, so that the agents do not race to build it on first use.
        if assets_from is None:
            _mlms(["assets", "-f", "torch", "-m", MODEL, "--store", fleet.store_url], here)
        else:
            store = S3Store(
                fleet.s3_endpoint,
                BUCKET,
                access_key=S3_ENV["AWS_ACCESS_KEY_ID"],
                secret_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            )
            copy_asset(assets_from, store, MODEL, "torch")
        created = _mlms(
            ["token", "create", "--name=multihost", "--role=read,run", "--store", fleet.store_url],
            here,
        )
        fleet.token = created.split()[-1]
        for name in agent_hosts:
            fleet.start_agent(name)
        for name in server_hosts:
            fleet.start_server(name)
        fleet.wait_agents()
        yield fleet
    except AssertionError as exc:
        logs = fleet.logs_text() if fleet is not None else ""
        raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        if fleet is not None:
            fleet.close()
        network.close()
