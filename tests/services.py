"""Real servers for tests, on loopback, free ports and fresh data each start:

- ``EtcdServer``: the ``etcd`` binary (Debian ``etcd-server``; ``$MLMS_ETCD_BIN`` overrides)
  with its data in a tmp folder; ``restart()`` keeps the data folder and port, the way an
  operator restarts etcd; ``kill()`` is ``kill -9``.
- ``S3Server``: moto's ``ThreadedMotoServer`` (an S3 API over HTTP, in this process).

Readiness is a condition polled with a timeout, never a sleep.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import requests

from tests.processes import free_port, wait_for

READY_TIMEOUT = 30.0


def etcd_binary() -> str | None:
    return os.environ.get("MLMS_ETCD_BIN") or shutil.which("etcd")


class EtcdServer:
    """One etcd member on 127.0.0.1; ``url`` is what ``registry_from_url`` takes."""

    def __init__(self, data_dir: Path, binary: str | None = None) -> None:
        found = binary or etcd_binary()
        if found is None:
            raise FileNotFoundError(
                "no etcd binary: install it with scripts/setup.sh (apt-get install etcd-server) "
                "or point MLMS_ETCD_BIN at one"
            )
        self.binary = found
        self.data_dir = Path(data_dir)
        self.log = self.data_dir.with_suffix(".log")
        self.port = free_port()
        self.peer_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"etcd://{self.address}"
        self._process: subprocess.Popen | None = None

    def start(self) -> EtcdServer:
        client = f"http://{self.address}"
        peer = f"http://127.0.0.1:{self.peer_port}"
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
            raise RuntimeError(f"etcd exited; its log:\n{self.log.read_text()[-3000:]}")
        try:
            return requests.get(f"http://{self.address}/health", timeout=1).json().get(
                "health"
            ) in ("true", True)
        except (requests.RequestException, ValueError):
            return False

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


class S3Server:
    """moto's S3 server on 127.0.0.1 (any free port); ``url`` is an ``s3://`` store URL for
    a bucket of its own and ``env`` the credentials that go with it.

    moto keeps its buckets in process-wide state, so each server gets a fresh bucket name
    rather than a reset that would wipe another server's data.
    """

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.bucket = f"mlms-test-{uuid.uuid4().hex[:12]}"
        self.endpoint = ""
        self.url = ""
        # moto accepts any credentials; these are what S3Store will sign with.
        self.env = {"AWS_ACCESS_KEY_ID": "mlms-test", "AWS_SECRET_ACCESS_KEY": "mlms-test-secret"}

    def start(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"{host}:{port}"
        self.url = f"s3://{self.endpoint}/{self.bucket}"
        wait_for(self.healthy, READY_TIMEOUT, f"moto S3 at {self.endpoint}")
        return self

    def healthy(self) -> bool:
        try:
            return requests.get(f"http://{self.endpoint}/", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self._server.stop()
