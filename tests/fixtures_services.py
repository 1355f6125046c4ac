"""pytest fixtures for the real servers of ``tests/services.py``.

``etcd`` and ``s3`` are module-scoped: each test module gets a fresh etcd (its own data folder
and port) and a fresh bucket. A test may ``etcd.restart()`` (same data, same port) or
``etcd.stop()``/``etcd.start()``; the fixture leaves it running for the next test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres import PostgresServer
from tests.postgres import unavailable as postgres_unavailable
from tests.services import EtcdServer, S3Server, etcd_binary


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    if etcd_binary() is None:
        pytest.skip("no etcd binary: run scripts/setup.sh as root (apt-get install etcd-server)")
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data").start()
    yield server
    server.kill()


@pytest.fixture
def running_etcd(etcd: EtcdServer) -> Iterator[EtcdServer]:
    """``etcd``, started again after the test if the test stopped it."""
    yield etcd
    if not etcd.running:
        etcd.start()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """A fresh bucket on a moto S3 server; its credentials are also set in ``os.environ``
    (restored afterwards) so that ``store_from_url(s3.url)`` signs with them in this process."""
    server = S3Server().start()
    previous = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    yield server
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session; ``postgres.database()`` gives each test an
    empty database of its own."""
    reason = postgres_unavailable()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer().start()
    yield server
    server.remove()
