"""Agent records in the registry: ``agents/<agent_id>``, each bound to its agent's lease."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from mlms.errors import InvalidArgument
from mlms.registry.base import AgentRecord, Registry

log = logging.getLogger(__name__)

PREFIX = "agents/"


def agent_key(agent_id: str) -> str:
    return f"{PREFIX}{agent_id}"


class AgentRegistration:
    """An agent's record under its own lease; kept (and re-put after a lost lease) until
    ``close()``, which removes it from the registry at once."""

    def __init__(self, registry: Registry, record: AgentRecord, ttl: float) -> None:
        self.key = agent_key(record.agent_id)
        self.lease = registry.lease(ttl)
        self.ttl = self.lease.ttl
        try:
            self.update(record)
        except BaseException:
            self.lease.close()
            raise

    def update(self, record: AgentRecord) -> None:
        """Publish ``record`` again (e.g. a new in-flight count). Raises ``Unavailable`` when the
        registry is down; the record is put once it answers again."""
        if agent_key(record.agent_id) != self.key:
            raise InvalidArgument(
                f"record of agent {record.agent_id!r} given to the registration {self.key!r}; "
                "expected the same agent id"
            )
        self.lease.put(self.key, record.model_dump_json().encode())

    def close(self) -> None:
        self.lease.close()


def register_agent(registry: Registry, record: AgentRecord, ttl: float) -> AgentRegistration:
    """Put ``record`` at ``agents/<agent_id>`` under a new lease of ``ttl`` seconds."""
    return AgentRegistration(registry, record, ttl)


def list_agents(registry: Registry) -> list[AgentRecord]:
    """The live agents, sorted by id; a malformed record is logged and skipped."""
    agents = []
    for key, value in registry.get_prefix(PREFIX).items():
        try:
            agents.append(AgentRecord.model_validate_json(value))
        except ValidationError:
            log.warning("ignoring a malformed agent record at %s", key)
    return sorted(agents, key=lambda record: record.agent_id)
