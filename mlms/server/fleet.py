"""The server's view of the live agents: the registry's ``agents/`` prefix, kept current.

A watch replaces the snapshot on every change. ``Pending`` counts what this server has sent to
each agent, since an agent's published load lags behind a burst of dispatches.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from pydantic import ValidationError

from mlms.registry.agents import PREFIX
from mlms.registry.base import AgentRecord, Registry

log = logging.getLogger(__name__)


class Fleet:
    def __init__(
        self, registry: Registry, admit: Callable[[AgentRecord], bool] | None = None
    ) -> None:
        """``admit`` decides which registered agents count (their certificates, under TLS)."""
        self.registry = registry
        self._admit = admit
        self._agents: dict[str, AgentRecord] = {}
        self._lock = threading.Lock()
        # The watch calls back at once with the current agents, then after every change; it
        # keeps going across registry outages (the last snapshot stands meanwhile).
        self._watch = registry.watch_prefix(PREFIX, self._apply)

    def agents(self) -> list[AgentRecord]:
        with self._lock:
            return list(self._agents.values())

    def _apply(self, current: dict[str, bytes]) -> None:
        agents = {}
        for key, value in current.items():
            try:
                record = AgentRecord.model_validate_json(value)
            except ValidationError:
                log.warning("ignoring a malformed agent record at %s", key)
                continue
            if self._admit is None or self._admit(record):
                agents[record.id] = record
        with self._lock:
            self._agents = agents

    def close(self) -> None:
        self._watch.close()


class Pending:
    """Evaluations this server has in flight per agent."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @contextlib.contextmanager
    def hold(self, agent_id: str) -> Iterator[None]:
        with self._lock:
            self._counts[agent_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._counts[agent_id] -= 1
                if not self._counts[agent_id]:
                    del self._counts[agent_id]
