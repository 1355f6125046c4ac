"""The fleet registry: agent records and in-flight jobs under leases (docs/DESIGN.md, "etcd keys").

Keys are relative to the root ``/mlms/v1/``: ``agents/<agent_id>``, ``jobs/<evaluation_id>``.
Values are bytes (JSON of a pydantic model). Every key that describes something alive is bound
to a ``Lease``; when its holder dies the lease expires and the key vanishes with it.

Implementations: ``MemoryRegistry`` (one process: the embedded mode and unit tests) and
``EtcdRegistry`` (etcd's v3 HTTP gateway, plaintext or TLS, with etcd's users and roles).
``registry_from_url`` picks one from a URL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import AliasChoices, BaseModel, Field

import mlms
from mlms.errors import InvalidArgument, MlmsError
from mlms.hardware import GpuInfo, HardwareInfo, parse_hw

#: The prefix every mlms key lives under in etcd.
ROOT = "/mlms/v1/"


class AgentRecord(BaseModel):
    """What an agent publishes at ``agents/<agent_id>`` (and updates as its load changes)."""

    # ``id`` is accepted too (and readable as ``record.id``): the short name the server uses.
    agent_id: str = Field(validation_alias=AliasChoices("agent_id", "id"))
    address: str  # host:port that servers dial
    framework: str
    framework_version: str
    hardware: HardwareInfo
    models: list[str] = []
    in_flight: int = 0  # evaluations queued or running on the agent
    #: Their ids (and bounds'): found here after the server that dispatched one died.
    running: list[str] = []
    started_at: datetime
    mlms_version: str = mlms.__version__
    #: The NVML indices of the GPUs it evaluates on (those CUDA shows it: one for a worker of
    #: ``mlms agent --gpus``); their UUIDs and names are in ``hardware.gpus``. None from an
    #: agent before this field, which may run on any GPU of its hardware.
    gpus: list[int] | None = None

    @property
    def id(self) -> str:
        return self.agent_id

    def usable_gpus(self) -> list[GpuInfo]:
        """The GPUs of its hardware it evaluates on."""
        if self.gpus is None:
            return list(self.hardware.gpus)
        return [gpu for gpu in self.hardware.gpus if gpu.index in self.gpus]

    def serves_hw(self, hw: str, devices: int = 1) -> bool:
        """Whether a ``--hw`` value can run here on ``devices`` GPUs (a model split over them):
        ``cpu`` anywhere; ``h100`` where that many of its GPUs are H100s; ``h100:1`` (``gpu:1``)
        where GPU 1 is one of its GPUs (and an H100). A value of a bad form serves nowhere."""
        try:
            alias, indices = parse_hw(hw)
        except MlmsError:
            return False
        if alias == "cpu":
            return True
        gpus = [g for g in self.usable_gpus() if alias in ("gpu", g.alias)]
        if indices is None:
            return len(gpus) >= devices
        return len(indices) >= devices and set(indices) <= {g.index for g in gpus}


@runtime_checkable
class Lease(Protocol):
    """A lease of ``ttl`` seconds, kept alive by a background thread while its holder lives.

    Keys put through a lease vanish when it is closed (at once) or expires (its holder died or
    lost the registry for longer than the ttl). When the lease is lost while the holder still
    runs (etcd restarted without its data, keepalive failed past the ttl), the lease grants a
    new one by itself and puts every key it holds again, so a live holder is back within about
    2×ttl of the registry answering again.
    """

    ttl: float

    def put(self, key: str, value: bytes) -> None:
        """Bind ``key`` (relative to the root) to this lease with ``value``, overwriting it.
        Raises ``Unavailable`` when the registry cannot be reached now; the key is remembered
        all the same and put again as soon as the registry answers."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` and stop re-putting it. Absent keys are fine."""
        ...

    def refresh(self) -> None:
        """Keep the lease alive now rather than at the next beat, granting it again (with its
        keys) if the registry lost it. Raises ``Unavailable`` when the registry is away."""
        ...

    def close(self) -> None:
        """Revoke the lease: every key it holds is gone at once. Idempotent; best effort
        when the registry is down (the ttl removes the keys then)."""
        ...


class WatchHandle(Protocol):
    def close(self) -> None:
        """Stop calling the callback."""
        ...


#: Called with the full current ``{key: value}`` under the watched prefix after every change.
WatchCallback = Callable[[dict[str, bytes]], None]


@runtime_checkable
class Registry(Protocol):
    """A small key-value view of the registry; keys are relative to ``ROOT``."""

    @property
    def url(self) -> str:
        """Where the registry lives (``memory://``, ``etcd://host:port``,
        ``etcd+https://host:port``), for messages."""
        ...

    def lease(self, ttl: float) -> Lease:
        """A new lease of ``ttl`` seconds (> 0), already kept alive. Raises ``Unavailable``
        when the registry cannot be reached."""
        ...

    def get(self, key: str) -> bytes | None:
        """The value at ``key``, or None. Raises ``Unavailable`` when unreachable."""
        ...

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Every key starting with ``prefix`` (e.g. ``agents/``) and its value, keys relative
        to the root. Raises ``Unavailable`` when the registry cannot be reached."""
        ...

    def watch_prefix(self, prefix: str, callback: WatchCallback) -> WatchHandle:
        """Call ``callback(current)`` with the whole current dict under ``prefix`` once at the
        start and after every change, from a background thread. Changes close together may
        arrive as one call with the latest state (etcd: pushed by etcd's watch as each commits,
        ``mlms.registry.etcd_watch``; memory: at once). Keeps going across registry outages
        (no calls while it is down; one call with the new state when it is back). Exceptions
        from the callback are logged, never propagated."""
        ...

    def close(self) -> None:
        """Stop this registry's watches and revoke the leases it granted. Idempotent."""
        ...


def validate_key(key: str, *, prefix: bool = False) -> str:
    """A key (or with ``prefix``, a key prefix such as ``agents/``) relative to the root."""
    parts = key.split("/")
    inner = parts[:-1] if prefix else parts
    if (not key and not prefix) or key.startswith("/") or any(p in ("", ".", "..") for p in inner):
        what = "prefix like 'agents/'" if prefix else "key like 'agents/<id>'"
        raise InvalidArgument(f"invalid registry key {key!r}: expected a relative {what}")
    return key


def validate_ttl(ttl: float) -> float:
    if not ttl > 0:
        raise InvalidArgument(f"invalid lease ttl {ttl!r}: expected seconds > 0")
    return float(ttl)
