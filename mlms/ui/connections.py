"""Each browser session's client, and whether the server wants a token.

Embedded, or with a server that takes calls without a token, every visitor shares one client.
When the server answers UNAUTHENTICATED, the UI asks for a token; the token is checked with one
call, kept here with its own client, and the browser gets only a random session id in an
HttpOnly, SameSite=Strict cookie. Nothing is shown before a call made with the visitor's token
succeeded, and a session whose token the server stops accepting is dropped.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from mlms.client import Client, EmbeddedClient
from mlms.errors import MlmsError
from mlms.registry.base import AgentRecord
from mlms.security.tls import TlsFiles
from mlms.server.jobs import Job
from mlms.ui.config import UiConfig
from mlms.ui.fleet import Machine
from mlms.ui.reports import Reports
from mlms.ui.runs import Runs

COOKIE = "mlms_ui_session"
#: Sessions kept; past it the least recently used is forgotten (its user logs in again).
MAX_SESSIONS = 1000


class LoginRequired(MlmsError):
    """The server wants a token and this visitor has not given one that works."""


@dataclass
class Connection:
    """One client with what the UI keeps about it."""

    client: Client
    embedded: bool
    runs: Runs = field(init=False)
    reports: Reports = field(init=False)

    def __post_init__(self) -> None:
        # A finished run is in the index already (stored through it, or indexed by the server
        # that relayed it), so nothing is done with its record here.
        self.runs = Runs(self.client.evaluate, lambda _record: None, workers=self._workers())
        self.reports = Reports(self.client)

    def _workers(self) -> int:
        return 1 if self.embedded else 4

    def in_flight(self) -> list[Job]:
        """The evaluations the fleet dispatches now (embedded: none, they are this UI's runs)."""
        if self.embedded:
            return []
        from mlms.evaluation.query import EvaluationQuery

        return self.client.list_evaluations(EvaluationQuery(page_size=1)).in_flight

    def machines(self) -> list[Machine]:
        if self.embedded:
            return [Machine.embedded(load=len(self.runs.active()))]
        agents: list[AgentRecord] = self.client.list_agents()  # type: ignore[attr-defined]
        return [Machine.of_agent(a) for a in agents]

    def close(self) -> None:
        self.runs.close()
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def _open_index(client: Client) -> None:
    with contextlib.suppress(MlmsError):  # the first page's own call reports the error
        client.index  # type: ignore[attr-defined]  # noqa: B018 (opening it is the point)


class Connections:
    def __init__(
        self, config: UiConfig, remote: Callable[[str | None], Client] | None = None
    ) -> None:
        """``remote(token)``: a client of the configured server (tests pass their own)."""
        self.config = config
        self._remote = remote or self._dial
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Connection] = OrderedDict()
        self._shared: Connection | None = None
        self.needs_token = False  # learned from the server's first UNAUTHENTICATED

    def for_session(self, session: str | None) -> Connection:
        with self._lock:
            if session and session in self._sessions:
                self._sessions.move_to_end(session)
                return self._sessions[session]
            if self.needs_token:
                raise LoginRequired("the server needs a token: log in with one")
            if self._shared is None:
                self._shared = (
                    Connection(EmbeddedClient(), embedded=True)
                    if self.config.server is None
                    else Connection(self._remote(None), embedded=False)
                )
            return self._shared

    def warm(self) -> None:
        """Embedded, every visitor shares one store: open its index (and bring it up to date
        with the store) before the first page asks. (A server's waits for the first visitor:
        it may want their token.)"""
        if self.config.server is None:
            client = self.for_session(None).client
            opening = threading.Thread(target=_open_index, args=(client,), daemon=True)
            opening.start()

    def login(self, token: str) -> str:
        """A new session for ``token`` once the server accepted it; its id for the cookie."""
        token = token.strip()
        if not token:
            raise LoginRequired("no token given: paste the token 'mlms token create' printed")
        client = self._remote(token)
        try:
            client.list_models()  # the cheapest call that needs the read role
        except MlmsError:
            getattr(client, "close", lambda: None)()
            raise
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[session] = Connection(client, embedded=False)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)[1].close()
        return session

    def logout(self, session: str | None) -> None:
        with self._lock:
            connection = self._sessions.pop(session, None) if session else None
        if connection is not None:
            connection.close()

    def refused(self, connection: Connection) -> None:
        """The server said UNAUTHENTICATED to ``connection``: ask for a token from now on."""
        with self._lock:
            if connection is self._shared:
                self.needs_token = True
                self._shared = None
            else:
                for session, kept in list(self._sessions.items()):
                    if kept is connection:
                        del self._sessions[session]
        connection.close()

    def close(self) -> None:
        with self._lock:
            every = [*self._sessions.values(), *([self._shared] if self._shared else [])]
            self._sessions.clear()
            self._shared = None
        for connection in every:
            connection.close()

    def _dial(self, token: str | None) -> Client:
        from mlms.remote_client import RemoteClient

        server = self.config.server
        if server is None:  # the embedded UI never dials; a caller that does is wrong
            raise RuntimeError("the embedded UI has no server to dial")
        tls = self.config.tls
        # Without --tls-ca the certificate only serves HTTPS: the server is dialled as the CLI
        # dials it with no TLS options (plaintext on loopback, else the system's CAs).
        dial = tls if tls.ca is not None else TlsFiles()
        return RemoteClient(server, tls=dial, insecure=self.config.insecure, token=token)
