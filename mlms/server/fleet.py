"""The server's view of the live agents: the registry's ``agents/`` prefix, kept current.

A watch replaces the snapshot on every change. ``Pending`` counts what this server has sent to
each agent, since an agent's published load lags behind a burst of dispatches.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

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
        self._version = 0
        self._lock = threading.Lock()
        # The watch calls back at once with the current agents, then after every change; it
        # keeps going across registry outages (the last snapshot stands meanwhile).
        self._watch = registry.watch_prefix(PREFIX, self._apply)

    def agents(self) -> list[AgentRecord]:
        with self._lock:
            return list(self._agents.values())

    def version(self) -> str:
        """Moves with every change of the live agents (what answers built from them are kept
        under)."""
        with self._lock:
            return str(self._version)

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
            self._version += 1

    def close(self) -> None:
        self._watch.close()


class Pending:
    """Evaluations this server has in flight per agent."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def reserve(self, pick: Callable[[Mapping[str, int]], AgentRecord]) -> Iterator[AgentRecord]:
        """The agent ``pick`` chooses from this server's counts, counted in the same step and
        until the block ends: dispatches at the same moment see each other's choice (counted
        only once the call began, a sweep's burst of cells all went to one agent)."""
        with self._lock:
            agent = pick(dict(self._counts))
            self._counts[agent.id] += 1
        try:
            yield agent
        finally:
            with self._lock:
                self._counts[agent.id] -= 1
                if not self._counts[agent.id]:
                    del self._counts[agent.id]
