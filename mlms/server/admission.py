"""Which registered agents the server sends work to, under mutual TLS: those whose
certificate, from the fleet's CA and for the address they advertise, names the agent role.

Anyone with write access to the registry could publish an agent record; the certificate is
what proves it is one. A refusal is final for that agent id and address (logged once); an
agent that does not answer yet is checked again on the registry's next change.
"""

from __future__ import annotations

import logging
import threading

from mlms.errors import PermissionDenied, Unavailable
from mlms.registry.base import AgentRecord
from mlms.security.peer import require_role
from mlms.security.tls import TlsFiles

log = logging.getLogger(__name__)


class Admission:
    def __init__(self, tls: TlsFiles, agent_name: str | None = None) -> None:
        """``agent_name``: the name agent certificates carry, when not their address's."""
        self.tls = tls
        self.agent_name = agent_name
        self._verdicts: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def admits(self, record: AgentRecord) -> bool:
        key = (record.id, record.address)
        with self._lock:
            if key in self._verdicts:
                return self._verdicts[key]
        try:
            require_role(record.address, self.tls, "agent", self.agent_name)
            verdict = True
        except PermissionDenied as exc:
            log.warning("agent %s at %s refused: %s", record.id, record.address, exc)
            verdict = False
        except Unavailable as exc:
            log.info("agent %s at %s not checked yet: %s", record.id, record.address, exc)
            return False
        with self._lock:
            self._verdicts[key] = verdict
        return verdict
