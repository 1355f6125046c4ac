"""A fleet for sweeps (tests/test_sweep.py, benchmarks/sweep_parallelism.py): one ``mlms
server`` and agents of several frameworks as real processes over a real etcd and S3 store.

Each agent gets an MLMS_HOME of its own, as if on a machine of its own: the device lock lives
there, so agents sharing one would take turns on "cpu" and no sweep could run in parallel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.store.base import ObjectStore
from mlms.store.factory import store_from_url
from mlms.zoo.assets import AssetManager
from mlms.zoo.catalog import get_model
from tests.processes import MlmsProcess, free_port, wait_for
from tests.shared_assets import copy_asset


@dataclass
class SweepFleet:
    env: dict[str, str]
    root: Path
    registry_url: str
    server: MlmsProcess | None = None
    address: str = ""
    agents: dict[str, MlmsProcess] = field(default_factory=dict)  # by address

    def start_agent(self, framework: str) -> str:
        address = f"127.0.0.1:{free_port()}"
        home = self.root / f"agent-{len(self.agents)}"
        home.mkdir()
        self.agents[address] = MlmsProcess(
            ["agent", "--framework", framework, "--listen", address, "--grace", "2"],
            self.root / f"agent-{address.replace(':', '_')}.log",
            {**self.env, "MLMS_HOME": str(home)},
        )
        return address

    def start_server(self) -> None:
        """A server on a new port (the one before may have been killed)."""
        self.address = f"127.0.0.1:{free_port()}"
        self.server = MlmsProcess(
            ["server", "--listen", self.address, "--grace", "2"],
            self.root / f"server-{self.address.replace(':', '_')}.log",
            self.env,
        )

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
        return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in self.root.glob("*.log"))

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
) -> SweepFleet:
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
    fleet = SweepFleet(env, root, registry_url)
    for framework in frameworks:
        fleet.start_agent(framework)
    fleet.start_server()
    with fleet.client() as client:
        wait_for(
            lambda: len(listed_agents(client)) == len(frameworks),
            120,
            f"{len(frameworks)} agents at the server",
            every=0.5,
        )
    return fleet


def listed_agents(client: RemoteClient) -> list:
    from mlms.errors import Unavailable

    try:
        return client.list_agents()
    except Unavailable:
        return []
