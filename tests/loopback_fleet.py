"""A fleet on loopback for the tests and benchmarks that go through one: one ``mlms server`` and
agents of several frameworks as real processes over a real etcd and S3 store.

Each agent gets an MLMS_HOME of its own, as if on a machine of its own: the device lock lives
there, so agents sharing one would take turns on "cpu" and no sweep could run in parallel.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.store.base import ObjectStore
from mlms.store.factory import store_from_url
from tests.processes import MlmsProcess, wait_for
from tests.shared_assets import copy_asset


@dataclass
class LoopbackFleet:
    env: dict[str, str]
    root: Path
    registry_url: str
    store_url: str
    server: MlmsProcess | None = None
    address: str = ""
    agents: dict[str, MlmsProcess] = field(default_factory=dict)  # by address
    _started: int = 0  # agents started so far: each has a home and a log of its own
    _servers: int = 0  # servers started so far: each logs to a file of its own

    def start_agent(self, framework: str) -> str:
        """An agent of ``framework``, serving; its address."""
        return self.start_agents([framework])[0]

    def start_agents(self, frameworks: list[str]) -> list[str]:
        """One agent per entry of ``frameworks``, started together; their addresses once all
        serve."""
        return self.serving(self.launch_agents(frameworks))

    def launch_agents(self, frameworks: list[str]) -> list[MlmsProcess]:
        """One agent process per entry of ``frameworks``, each with a home of its own; not
        waited for (``serving``)."""
        started = []
        for framework in frameworks:
            home = self.root / f"agent-{self._started}"
            home.mkdir()
            self._started += 1
            started.append(
                MlmsProcess.serving(
                    ["agent", "--framework", framework, "--grace", "2"],
                    home.with_suffix(".log"),
                    {**self.env, "MLMS_HOME": str(home)},
                )
            )
        return started

    def serving(self, started: list[MlmsProcess]) -> list[str]:
        """The addresses of agents from ``launch_agents``, once all serve; they join ``agents``."""
        try:
            addresses = [process.address() for process in started]
        except AssertionError:
            for process in started:
                process.stop()
            raise
        self.agents.update(zip(addresses, started, strict=True))
        return addresses

    def start_server(self) -> None:
        """A server on a new port (the one before may have been killed)."""
        self.server = MlmsProcess.serving(
            ["server", "--grace", "2"], self.root / f"server-{self._servers}.log", self.env
        )
        self._servers += 1
        self.address = self.server.address()

    def agent_ids(self) -> dict[str, str]:
        """Agent id -> address, from the registry."""
        registry = registry_from_url(self.registry_url)
        try:
            records = [json.loads(v) for v in registry.get_prefix("agents/").values()]
        finally:
            registry.close()
        return {r["agent_id"]: r["address"] for r in records}

    def live(self) -> set[str]:
        return {address for address, process in self.agents.items() if process.alive()}

    def client(self) -> RemoteClient:
        return RemoteClient(self.address)

    def logs(self) -> str:
        return _logs(self.root)

    def stop(self) -> None:
        for process in [self.server, *self.agents.values()]:
            if process is not None:
                process.stop()


def start_fleet(
    registry_url: str,
    store_url: str,
    env: dict[str, str],
    frameworks: list[str],
    models: list[str],
    root: Path,
    assets_from: ObjectStore | None = None,
    timeout: float = 120,
) -> LoopbackFleet:
    """A server and one agent per entry of ``frameworks``, the models' assets in the store
    beforehand (agents would otherwise race to build them), all registered. The assets are
    copied from ``assets_from`` (the tests' session store) where given, else built."""
    home = root / "home"
    env = {**env, "MLMS_HOME": str(home), "MLMS_REGISTRY": registry_url,
           "MLMS_STORE": store_url, "MLMS_TTL": "2"}  # fmt: skip
    store = store_from_url(store_url)
    assets = AssetManager(store, home / "cache")
    for model in models:
        for framework in set(frameworks):
            if assets_from is None:
                assets.ensure(get_model(model), framework)
            else:
                copy_asset(assets_from, store, model, framework)
    fleet = LoopbackFleet(env, root, registry_url, store_url)
    try:
        agents = fleet.launch_agents(frameworks)  # the server starts while they do
        fleet.start_server()
        fleet.serving(agents)
        with fleet.client() as client:
            wait_for(
                lambda: len(listed_agents(client)) == len(frameworks),
                timeout,
                f"{len(frameworks)} agents at the server",
                every=0.5,
            )
    except AssertionError as exc:
        fleet.stop()
        raise AssertionError(f"{exc}\n{fleet.logs()}") from None
    return fleet


@contextlib.contextmanager
def running_fleet(
    etcd, s3, root: Path, frameworks: list[str], models: list[str] = (), **options
) -> Iterator[LoopbackFleet]:
    """``start_fleet`` on the tests' etcd and S3 servers, stopped on leaving; an assertion that
    fails inside carries the processes' logs."""
    fleet = start_fleet(etcd.url, s3.url, s3.env, frameworks, list(models), root, **options)
    try:
        yield fleet
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs()}") from None
    finally:
        fleet.stop()


def _logs(root: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in root.glob("*.log"))


def listed_agents(client: RemoteClient) -> list:
    from mlms.errors import Unavailable

    try:
        return client.list_agents()
    except Unavailable:
        return []
