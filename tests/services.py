"""Real servers for tests, on loopback, free ports and fresh data each start:

- ``EtcdServer``: the ``etcd`` binary (Debian ``etcd-server``; ``$MLMS_ETCD_BIN`` overrides)
  with its data in a tmp folder; ``restart()`` keeps the data folder and port, the way an
  operator restarts etcd; ``kill()`` is ``kill -9``. With ``tls`` it serves its clients TLS
  (and with ``tls.client_cert_auth`` demands their certificates); ``enable_auth`` turns on
  etcd's users and roles.
- ``S3Server``: moto's ``ThreadedMotoServer`` (an S3 API over HTTP, in this process); with
  ``tls``, moto's same WSGI app behind werkzeug's TLS server.

``ServingTls.issue`` makes a server's files from a test CA (``mlms.security.ca``).

Readiness is a condition polled with a timeout, never a sleep.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import requests

from mlms.registry.base import ROOT
from mlms.security.ca import Pem, issue
from tests.processes import PortTaken, free_port, start_on_free_ports, wait_for

READY_TIMEOUT = 30.0


def etcd_binary() -> str | None:
    return os.environ.get("MLMS_ETCD_BIN") or shutil.which("etcd")


@dataclass(frozen=True)
class ServingTls:
    """A TLS server's files: the CA (of its clients' certificates, when it demands them), its
    certificate and key; ``client_cert_auth`` makes it demand a client certificate."""

    ca: Path
    cert: Path
    key: Path
    client_cert_auth: bool = False

    @classmethod
    def issue(cls, folder: Path, ca: Pem, *, client_cert_auth: bool = False) -> ServingTls:
        """A server certificate from ``ca`` for 127.0.0.1 and localhost, written to ``folder``
        with the CA. Its usages cover both ends, which etcd needs: its HTTP gateway dials the
        member's gRPC port with the member's own certificate."""
        folder.mkdir(parents=True, exist_ok=True)
        pem = issue(ca, "server", ["127.0.0.1", "localhost"])
        files = {"ca.pem": ca.cert, "server.pem": pem.cert, "server-key.pem": pem.key}
        for name, data in files.items():
            (folder / name).write_bytes(data)
        return cls(
            folder / "ca.pem", folder / "server.pem", folder / "server-key.pem", client_cert_auth
        )

    def requests_options(self) -> dict:
        """``verify`` (and ``cert``, when clients need one) for a ``requests`` call to it."""
        options: dict = {"verify": str(self.ca)}
        if self.client_cert_auth:
            options["cert"] = (str(self.cert), str(self.key))
        return options


@dataclass(frozen=True)
class EtcdUser:
    """A user ``enable_auth`` creates, with a role granting ``permission`` (READ, WRITE or
    READWRITE) on mlms's prefix, or no role at all."""

    name: str
    password: str
    permission: str | None = "READWRITE"


class EtcdServer:
    """One etcd member on 127.0.0.1; ``url`` is what ``registry_from_url`` takes."""

    def __init__(
        self, data_dir: Path, binary: str | None = None, *, tls: ServingTls | None = None
    ) -> None:
        found = binary or etcd_binary()
        if found is None:
            raise FileNotFoundError(
                "no etcd binary: install it with scripts/setup.sh (apt-get install etcd-server) "
                "or point MLMS_ETCD_BIN at one"
            )
        self.binary = found
        self.data_dir = Path(data_dir)
        self.log = self.data_dir.with_suffix(".log")
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self._pick_ports()
        self._root_password: str | None = None
        self._process: subprocess.Popen | None = None
        self._log_from = 0  # where the lines of the latest start begin in the log

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.peer_port = free_port()
        while self.peer_port == self.port:
            self.peer_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"{'etcd+https' if self.tls else 'etcd'}://{self.address}"

    def start(self) -> EtcdServer:
        """A first start moves to new ports where one was taken meanwhile; a restart keeps its
        address, which its clients know."""
        if self._process is not None:
            return self._launch()
        return start_on_free_ports(self._launch, self._pick_ports)

    def _launch(self) -> EtcdServer:
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        client = f"{self.scheme}://{self.address}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls_flags = []
        if self.tls is not None:
            tls_flags = [f"--cert-file={self.tls.cert}", f"--key-file={self.tls.key}"]
            if self.tls.client_cert_auth:
                tls_flags += [f"--trusted-ca-file={self.tls.ca}", "--client-cert-auth"]
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [
                    self.binary,
                    "--name=mlms-test",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=mlms-test={peer}",
                    "--logger=zap",
                    "--log-level=warn",
                    *tls_flags,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for(self.healthy, READY_TIMEOUT, f"etcd at {self.address}")
        except AssertionError as exc:
            self.kill()
            raise AssertionError(f"{exc}; its log:\n{self.log.read_text()[-3000:]}") from None
        return self

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def healthy(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            with open(self.log, "rb") as log:
                log.seek(self._log_from)
                said = log.read().decode(errors="replace")
            taken = "address already in use" in said
            raise (PortTaken if taken else RuntimeError)(f"etcd exited; its log:\n{said[-3000:]}")
        options = self.tls.requests_options() if self.tls else {}
        try:
            answer = requests.get(f"{self.scheme}://{self.address}/health", timeout=1, **options)
            return answer.json().get("health") in ("true", True)
        except (requests.RequestException, ValueError):
            return False

    def enable_auth(self, root_password: str, users: list[EtcdUser]) -> None:
        """Create ``root`` and ``users`` (each with a role of its own, named after it) and turn
        auth on, through the gateway's ``/v3/auth`` endpoints as ``etcdctl`` would."""
        self._auth("user/add", name="root", password=root_password)
        self._auth("user/grant", user="root", role="root")
        for user in users:
            self._add_user(user)
        self._auth("enable")
        self._root_password = root_password

    def add_user(self, user: EtcdUser) -> None:
        """As root, after ``enable_auth``."""
        self._add_user(user, self._root_token())

    def change_password(self, user: str, password: str) -> None:
        """As root, after ``enable_auth``; etcd then forgets every token of ``user``."""
        self._auth("user/changepw", self._root_token(), name=user, password=password)

    def _add_user(self, user: EtcdUser, token: str | None = None) -> None:
        self._auth("user/add", token, name=user.name, password=user.password)
        if user.permission is not None:
            # A prefix is the range [ROOT, ROOT with its last byte + 1).
            end = ROOT[:-1] + chr(ord(ROOT[-1]) + 1)
            perm = {"key": _b64(ROOT), "range_end": _b64(end), "permType": user.permission}
            self._auth("role/add", token, name=user.name)
            self._auth("role/grant", token, name=user.name, perm=perm)
            self._auth("user/grant", token, user=user.name, role=user.name)

    def _root_token(self) -> str:
        assert self._root_password is not None, "enable_auth() first"
        return self._auth("authenticate", name="root", password=self._root_password)["token"]

    def _auth(self, call: str, token: str | None = None, **body) -> dict:
        options = self.tls.requests_options() if self.tls else {}
        answer = requests.post(
            f"{self.scheme}://{self.address}/v3/auth/{call}",
            json=body,
            headers={"Authorization": token} if token else {},
            timeout=5,
            **options,
        )
        assert answer.status_code == 200, f"etcd auth/{call}: {answer.text}"
        return answer.json()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, as an operator's restart does; kill -9 if it lingers."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._process = None

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        self._process = None

    def restart(self, *, wipe: bool = False) -> None:
        """Stop and start again on the same port, with the same data folder, or with
        ``wipe`` an empty one (every lease and key lost, as when etcd's volume is gone)."""
        self.stop()
        if wipe:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.start()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class S3Server:
    """moto's S3 server on 127.0.0.1 (any free port); ``url`` is an ``s3://`` store URL
    (``s3+https://`` with ``tls``) for a bucket of its own and ``env`` the credentials that go
    with it.

    moto keeps its buckets in process-wide state, so each server gets a fresh bucket name
    rather than a reset that would wipe another server's data.
    """

    def __init__(self, tls: ServingTls | None = None) -> None:
        from moto.server import ThreadedMotoServer

        self.tls = tls
        self._server: ThreadedMotoServer | _TlsMotoServer = (
            ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            if tls is None
            else _TlsMotoServer(tls)
        )
        self.bucket = f"mlms-test-{uuid.uuid4().hex[:12]}"
        self.endpoint = ""
        self.url = ""
        # moto accepts any credentials; these are what S3Store will sign with.
        self.env = {"AWS_ACCESS_KEY_ID": "mlms-test", "AWS_SECRET_ACCESS_KEY": "mlms-test-secret"}

    def start(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"{host}:{port}"
        self.url = f"{'s3+https' if self.tls else 's3'}://{self.endpoint}/{self.bucket}"
        wait_for(self.healthy, READY_TIMEOUT, f"moto S3 at {self.endpoint}")
        return self

    def healthy(self) -> bool:
        scheme, options = ("https", self.tls.requests_options()) if self.tls else ("http", {})
        try:
            answer = requests.get(f"{scheme}://{self.endpoint}/", timeout=1, **options)
            return answer.status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self._server.stop()


class _TlsMotoServer:
    """What ``ThreadedMotoServer`` does (moto's WSGI app in a werkzeug server on a thread),
    with the TLS context that it has no parameter for."""

    def __init__(self, tls: ServingTls) -> None:
        import ssl

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        if tls.client_cert_auth:
            context.load_verify_locations(tls.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            "127.0.0.1",
            0,
            app,
            threaded=True,
            request_handler=MotoRequestHandler,
            ssl_context=context,
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), port

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()
