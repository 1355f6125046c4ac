"""The registry in etcd, over etcd's v3 HTTP gateway (``/v3/...``) with the ``etcd3gw`` client.

The HTTP gateway keeps etcd's own gRPC/protobuf stack out of this process (ours is newer than
what the gRPC etcd clients build against). Watches follow etcd's watch stream through the
same gateway: changes are pushed as they commit, in revision order (``etcd_watch``).

Where etcd is and how to reach it: the URL gives the transport, environment variables give the
files and credentials (so that the CLI, servers, agents and deployments need no flags):

    etcd://HOST:PORT          plaintext HTTP
    etcd+https://HOST:PORT    TLS (named like the store's ``s3+https://``: the protocol spoken,
                              etcd's HTTP gateway, then the transport under it)
    MLMS_ETCD_CA              the CA that etcd's certificate must chain to; else MLMS_TLS_CA
                              (the fleet's CA); else the system's CAs
    MLMS_ETCD_CERT, MLMS_ETCD_KEY
                              a client certificate, for etcd's ``--client-cert-auth``
    MLMS_ETCD_USER            a user of etcd's auth (``etcdctl user add``) with a role that
                              may read and write the prefix ``/mlms/v1/``
    MLMS_ETCD_PASSWORD or MLMS_ETCD_PASSWORD_FILE
                              its password, or a file holding it (a mounted secret; one
                              trailing newline is ignored; read again at each authentication,
                              so a rotated secret is picked up without a restart)

With a user, the client trades the name and password for a token at ``/v3/auth/authenticate``
and sends it in the ``Authorization`` header of every call (etcd 3.4's gateway takes the bare
token there). etcd drops a user's tokens when the password changes and after
``--auth-token-ttl`` idle seconds, so a call refused for its token authenticates again and is
retried once. Credentials
never go in plaintext to an address that is not loopback, and the password is never logged.

At start the client checks that it may read and write under ``/mlms/v1/`` (one transaction
whose condition never holds, so nothing is written): a missing role fails at start, not at the
first registration. etcd3gw exceptions become ``AccessRefused`` when etcd refused who we are
(no credentials, a wrong password, no permission) and ``Unavailable`` otherwise, naming the
address; both are one line.

etcd 3.4 refuses every gateway call that comes with a client certificate carrying a Common
Name while auth is on (CVE-2018-16886: the name cannot be carried across the gateway): with
both, the client certificate must have no Common Name.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import etcd3gw
import requests
from etcd3gw import exceptions as etcd_errors

from mlms.client_tls import handshake_failure, is_loopback, pem_file, pem_from_env
from mlms.errors import AccessRefused, InvalidArgument, MlmsError, Unavailable
from mlms.reasons import short_reason
from mlms.registry.base import ROOT, WatchCallback, validate_key
from mlms.registry.etcd_watch import IDLE_S, Snapshot, StreamWatch
from mlms.registry.keeper import Holdings, KeptLease

log = logging.getLogger(__name__)

#: Seconds one HTTP call to etcd may take; short, so that a hung etcd reads as down.
TIMEOUT = 3.0

CA_VARIABLES = ("MLMS_ETCD_CA", "MLMS_TLS_CA")
CERT, KEY = "MLMS_ETCD_CERT", "MLMS_ETCD_KEY"
USER, PASSWORD, PASSWORD_FILE = "MLMS_ETCD_USER", "MLMS_ETCD_PASSWORD", "MLMS_ETCD_PASSWORD_FILE"
_CREDENTIALS = f"{USER} with {PASSWORD} or {PASSWORD_FILE}"
#: Read by the access check's condition and written by its (never taken) branch.
_PROBE_KEY = ROOT + "access-check"

# etcd's answers (the gateway's JSON "message", or its plain-text body) that decide an error.
_NO_USER = "user name is empty"
_BAD_PASSWORD = "authentication failed"
_DENIED = "permission denied"
_AUTH_OFF = "authentication is not enabled"
_COMMON_NAME = "CommonName of client sending a request against gateway"
#: A token etcd no longer takes (the user's password changed, idle past --auth-token-ttl, or
#: none yet because auth was turned on after this client started).
_STALE_TOKEN = ("invalid auth token", "revision of auth store is old", _NO_USER)

T = TypeVar("T")


@dataclass(frozen=True)
class EtcdAccess:
    """How this process reaches etcd: TLS files (paths) and the user it authenticates as."""

    tls: bool = False
    ca: str | None = None  # None: the system's CAs
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: Read again at every authentication, so that a rotated secret is picked up.
    password_file: str | None = None

    @classmethod
    def from_env(
        cls, url: str, *, tls: bool, environ: Mapping[str, str] = os.environ
    ) -> EtcdAccess:
        """From the ``MLMS_ETCD_*`` variables (the module's docstring), checked: files that
        exist and are PEM, a certificate with its key, a user with one password."""

        def get(name: str) -> str | None:
            return environ.get(name, "").strip() or None

        if not tls:
            given = [name for name in ("MLMS_ETCD_CA", CERT, KEY) if get(name)]
            if given:
                https = url.replace("etcd://", "etcd+https://", 1)
                raise InvalidArgument(
                    f"{', '.join(given)} set, but registry {url} is plaintext: expected "
                    f"{https} to use TLS"
                )
        ca = pem_from_env(CA_VARIABLES, environ) if tls else None
        cert, key = get(CERT), get(KEY)
        if bool(cert) != bool(key):
            given, missing = (CERT, KEY) if cert else (KEY, CERT)
            raise InvalidArgument(f"{given} is set but {missing} is not: expected both or neither")
        user = get(USER)
        password, password_file = _password(user, environ)
        return cls(
            tls=tls,
            ca=ca[1] if ca else None,
            cert=pem_file(CERT, cert) if cert else None,
            key=pem_file(KEY, key) if key else None,
            user=user,
            password=password,
            password_file=password_file,
        )

    def current_password(self) -> str | None:
        return _read_password(self.password_file) if self.password_file else self.password


def _password(user: str | None, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``(password, password_file)``, checked: one of them with a user, neither without."""
    direct, path = environ.get(PASSWORD) or None, environ.get(PASSWORD_FILE, "").strip() or None
    if direct is not None and path is not None:
        raise InvalidArgument(f"both {PASSWORD} and {PASSWORD_FILE} are set: expected one")
    given = _read_password(path) if path is not None else direct
    if user is None and given:
        raise InvalidArgument(f"{PASSWORD} or {PASSWORD_FILE} is set but {USER} is not")
    if user is not None and not given:
        if path is not None:
            raise InvalidArgument(
                f"{PASSWORD_FILE} {path!r} is empty: expected the password of {USER} {user!r}"
            )
        raise InvalidArgument(
            f"{USER} {user!r} is set without a password: expected {PASSWORD} or {PASSWORD_FILE}"
        )
    return (None, path) if path is not None else (direct, None)


def _read_password(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InvalidArgument(f"cannot read {PASSWORD_FILE} {path!r}: {reason}") from None
    return text.removesuffix("\n").removesuffix("\r")  # what `echo` and editors leave


class _Token(requests.auth.AuthBase):
    """etcd's auth token in the ``Authorization`` header of every call of a requests session,
    renewed by ``renew`` (one authentication for however many threads saw it refused)."""

    def __init__(self, fetch: Callable[[], str | None]) -> None:
        self.value: str | None = None
        self._fetch = fetch
        self._lock = threading.Lock()

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        value = self.value
        if value:
            request.headers["Authorization"] = value
        return request

    def renew(self, refused: str | None) -> None:
        """A new token, unless another thread already replaced the ``refused`` one."""
        with self._lock:
            if self.value == refused:
                self.value = self._fetch()


def _no_token(request: requests.PreparedRequest) -> requests.PreparedRequest:
    # etcd refuses to authenticate a request that carries a stale token.
    return request


class EtcdRegistry:
    """A ``Registry`` on etcd at ``host:port``; fails at once with ``Unavailable`` when etcd
    does not answer and with ``AccessRefused`` when it refuses ``access``."""

    def __init__(self, host: str, port: int, access: EtcdAccess | None = None) -> None:
        self._access = access = access or EtcdAccess()
        self.address = f"{host}:{port}"
        self.url = f"{'etcd+https' if access.tls else 'etcd'}://{self.address}"
        if access.user and not access.tls and not is_loopback(host):
            raise InvalidArgument(
                f"refusing to send the etcd password of {access.user!r} in plaintext to "
                f"{self.url}: expected etcd+https://{self.address}, or etcd on loopback"
            )
        session = requests.Session()
        if access.ca:
            session.verify = access.ca
            # requests reads REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE at every call and lets them win
            # over the session's CA; without the environment, the CA given is the one used.
            session.trust_env = False
        if access.cert and access.key:
            session.cert = (access.cert, access.key)
        self._token = _Token(self._authenticate) if access.user else None
        session.auth = self._token
        self._client = etcd3gw.Etcd3Client(
            host,
            port,
            protocol="https" if access.tls else "http",
            timeout=TIMEOUT,
            api_path="/v3/",
            session=session,
        )
        self._held: Holdings[StreamWatch] = Holdings()
        try:
            self._call("status", self._client.status)
            if self._token is not None:
                self._token.renew(None)
            self._check_access()
        except BaseException:
            session.close()
            raise

    @classmethod
    def from_env(cls, host: str, port: int, *, tls: bool) -> EtcdRegistry:
        url = f"{'etcd+https' if tls else 'etcd'}://{host}:{port}"
        return cls(host, port, EtcdAccess.from_env(url, tls=tls))

    # -- Registry -----------------------------------------------------------------------
    def lease(self, ttl: float) -> KeptLease:
        return self._held.lease(self, ttl)

    def get(self, key: str) -> bytes | None:
        values = self._call("get", self._client.get, ROOT + validate_key(key))
        return bytes(values[0]) if values else None

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        return self._snapshot(prefix)[0]

    def watch_prefix(self, prefix: str, callback: WatchCallback) -> StreamWatch:
        return self._held.watch(
            StreamWatch(
                read=lambda: self._snapshot(prefix),
                open_stream=lambda revision: self._watch_stream(prefix, revision),
                root=ROOT,
                prefix=prefix,
                callback=callback,
            )
        )

    def close(self) -> None:
        self._held.close()
        self._client.session.close()

    # -- LeaseBackend (for KeptLease) ---------------------------------------------------
    def grant(self, ttl: float) -> int:
        # etcd counts whole seconds (and raises anything below its minimum, ~2 s by default).
        return self._call("lease grant", self._client.lease, math.ceil(ttl)).id

    def keep_alive(self, lease_id: int) -> bool:
        return self._call("lease keepalive", self._lease(lease_id).refresh) > 0

    def put(self, key: str, value: bytes, lease_id: int) -> None:
        self._call("put", self._client.put, ROOT + key, value, lease=self._lease(lease_id))

    def delete(self, key: str) -> None:
        self._call("delete", self._client.delete, ROOT + key)

    def revoke(self, lease_id: int) -> None:
        with self._missing_lease_is_fine():
            self._call("lease revoke", self._lease(lease_id).revoke)

    # -- the adapter ----------------------------------------------------------------------
    def _range(self, prefix: str) -> dict[str, str]:
        full = ROOT + validate_key(prefix, prefix=True)
        return {"key": _base64(full.encode()), "range_end": _base64(_prefix_end(full.encode()))}

    def _snapshot(self, prefix: str) -> Snapshot:
        """The keys under ``prefix`` (relative to the root, in key order) and the revision
        etcd read them at (etcd3gw's ``get_prefix`` drops it)."""
        url = self._client.get_url("/kv/range")
        answer = self._call("get_prefix", self._client.post, url, json=self._range(prefix))
        keys = {
            base64.b64decode(kv["key"]).decode()[len(ROOT) :]: base64.b64decode(kv.get("value", ""))
            for kv in answer.get("kvs", ())
        }
        return keys, int(answer["header"]["revision"])

    def _watch_stream(self, prefix: str, revision: int) -> requests.Response:
        """etcd's watch stream of ``prefix`` from ``revision``, quiet at most ``IDLE_S``."""
        create = {"create_request": {**self._range(prefix), "start_revision": revision}}
        try:
            response = self._client.session.post(
                self._client.get_url("/watch"), json=create, stream=True, timeout=(TIMEOUT, IDLE_S)
            )
            response.raise_for_status()
        except requests.RequestException as exc:
            raise self._error("watch", exc) from exc
        return response

    def _lease(self, lease_id: int) -> etcd3gw.Lease:
        return etcd3gw.Lease(lease_id, self._client)

    def _check_access(self) -> None:
        """Read and write permission on the root, proven without writing: etcd checks the
        permissions of both branches of a transaction before it evaluates the condition, and
        no key's version is ever below 0."""
        key = base64.b64encode(_PROBE_KEY.encode()).decode()
        txn = {
            "compare": [{"key": key, "target": "VERSION", "result": "LESS", "version": 0}],
            "success": [{"request_put": {"key": key, "value": ""}}],
            "failure": [],
        }
        self._call(f"reading and writing {ROOT}", self._client.transaction, txn)

    def _authenticate(self) -> str | None:
        """A fresh token for the configured user; None when etcd has auth turned off."""
        access = self._access
        try:
            password = access.current_password()
        except InvalidArgument as exc:  # a secret gone since the start: refused, like etcd would
            raise AccessRefused(f"etcd at {self.address}: {exc}") from None
        try:
            answer = self._client.post(
                self._client.get_url("/auth/authenticate"),
                json={"name": access.user, "password": password},
                auth=_no_token,
            )
        except (etcd_errors.Etcd3Exception, requests.RequestException) as exc:
            if _AUTH_OFF in _answer(exc):
                log.warning(
                    "etcd at %s has authentication turned off; %s=%r is not used",
                    self.address,
                    USER,
                    access.user,
                )
                return None
            raise self._error("authentication", exc) from exc
        log.debug("etcd at %s: authenticated as %r", self.address, access.user)
        return answer["token"]

    def _call(self, what: str, call: Callable[..., T], *args, **kwargs) -> T:
        token = self._token.value if self._token is not None else None
        try:
            return call(*args, **kwargs)
        except (etcd_errors.Etcd3Exception, requests.RequestException) as exc:
            if self._token is None or not any(s in _answer(exc) for s in _STALE_TOKEN):
                raise self._error(what, exc) from exc
        log.info("etcd at %s refused the auth token (%s); authenticating again", self.address, what)
        self._token.renew(token)
        try:
            return call(*args, **kwargs)
        except (etcd_errors.Etcd3Exception, requests.RequestException) as exc:
            raise self._error(what, exc) from exc

    def _error(self, what: str, exc: Exception) -> MlmsError:
        answer = _answer(exc)
        where = f"etcd at {self.address}"
        user = self._access.user
        if _COMMON_NAME in answer:
            return AccessRefused(
                f"{where} refused {what}: its HTTP gateway refuses client certificates with a "
                f"Common Name while auth is on; give {CERT} one without a Common Name"
            )
        if _BAD_PASSWORD in answer:
            return AccessRefused(
                f"{where} refused user {user!r}: wrong user name or password; check {_CREDENTIALS}"
            )
        if _NO_USER in answer:
            return AccessRefused(
                f"{where} refused {what}: it requires authentication; set {_CREDENTIALS}"
            )
        if _DENIED in answer:
            who = f"user {user!r}" if user else "this client"
            return AccessRefused(
                f"{where} refused {what} to {who}: permission denied; expected a role with "
                f"readwrite on the prefix {ROOT}"
            )
        if any(stale in answer for stale in _STALE_TOKEN):
            return AccessRefused(f"{where} refused {what}: {_reason(exc)}")
        tls = handshake_failure(answer)
        if tls is not None:
            trusted = self._access.ca or "the system's CAs"
            return Unavailable(
                f"{where} is unavailable ({what}): {tls} (trusting {trusted}; "
                f"{', '.join(CA_VARIABLES)})"
            )
        return Unavailable(f"{where} is unavailable ({what}): {_reason(exc)}")

    @contextlib.contextmanager
    def _missing_lease_is_fine(self) -> Iterator[None]:
        try:
            yield
        except Unavailable as exc:
            if "lease not found" not in str(exc):
                raise


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _prefix_end(prefix: bytes) -> bytes:
    """The end of the range of keys that start with ``prefix`` (its last byte plus one)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _answer(exc: Exception) -> str:
    """What etcd (or the connection) said: the body of an HTTP error, else the exception."""
    return getattr(exc, "detail_text", None) or str(exc)


def _reason(exc: Exception) -> str:
    """etcd's own message when it answered (a JSON body), else the connection failure."""
    text = _answer(exc)
    try:
        body = json.loads(text)
        text = body.get("message") or body.get("error") or text
    except (ValueError, AttributeError):
        pass
    return short_reason(exc, str(text), limit=300)
