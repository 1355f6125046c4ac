"""The S3 object store over TLS against a real S3 server (moto's, behind werkzeug's TLS server
with a certificate from a test CA): objects round-trip when the CA bundle is trusted
(AWS_CA_BUNDLE, else MLMS_TLS_CA); an untrusted CA, or a plaintext server, is refused in one
line naming the endpoint; a bad bundle variable fails before any call."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import urllib3
from minio import Minio

from mlms.errors import InvalidArgument, Unavailable
from mlms.security.ca import Pem, make_ca
from mlms.store.factory import store_from_url
from mlms.store.s3 import S3Store
from tests.services import S3Server, ServingTls

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "mlms-tls-test", "AWS_SECRET_ACCESS_KEY": "mlms-tls-secret"}


@pytest.fixture(scope="module")
def ca() -> Pem:
    return make_ca("mlms store test CA")


@pytest.fixture(scope="module")
def s3_tls(tmp_path_factory: pytest.TempPathFactory, ca: Pem) -> Iterator[S3Server]:
    tls = ServingTls.issue(tmp_path_factory.mktemp("s3-tls"), ca)
    server = S3Server(tls=tls).start()
    yield server
    server.stop()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Credentials set and no CA variable, for this test; then what the test gives."""
    for name in ("AWS_CA_BUNDLE", "MLMS_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


def _ca_file(server: S3Server) -> str:
    assert server.tls is not None
    return str(server.tls.ca)


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("variable", ["AWS_CA_BUNDLE", "MLMS_TLS_CA"])
def test_objects_round_trip_over_tls(
    s3_tls: S3Server, env: Callable[..., None], tmp_path: Path, variable: str
) -> None:
    env(**{variable: _ca_file(s3_tls)})
    store = store_from_url(s3_tls.url)
    assert isinstance(store, S3Store)
    assert store.url == s3_tls.url and s3_tls.url.startswith("s3+https://")

    prefix = f"tls-{uuid.uuid4().hex[:8]}"
    store.put_bytes(f"{prefix}/a.json", b'{"a": 1}')
    source = tmp_path / "b.bin"
    source.write_bytes(os.urandom(3 << 20))
    store.put_file(f"{prefix}/b.bin", source)
    assert store.list(f"{prefix}/") == [f"{prefix}/a.json", f"{prefix}/b.bin"]
    assert store.get_bytes(f"{prefix}/a.json") == b'{"a": 1}'
    store.get_file(f"{prefix}/b.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()

    # On that server, as another S3 client over TLS sees it.
    observer = Minio(
        s3_tls.endpoint,
        access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        secure=True,
        region="us-east-1",
        http_client=urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=_ca_file(s3_tls)),
    )
    assert observer.stat_object(s3_tls.bucket, f"{prefix}/b.bin").size == 3 << 20
    store.delete(f"{prefix}/a.json")
    assert not store.exists(f"{prefix}/a.json") and store.exists(f"{prefix}/b.bin")


@pytest.mark.parametrize("trust", ["another CA", "the system's CAs"])
def test_an_untrusted_certificate_is_refused(
    s3_tls: S3Server, env: Callable[..., None], tmp_path: Path, trust: str
) -> None:
    if trust == "another CA":
        other = tmp_path / "other-ca.pem"
        other.write_bytes(make_ca("another CA").cert)
        env(AWS_CA_BUNDLE=str(other))
    store = store_from_url(s3_tls.url)
    start = time.monotonic()
    with pytest.raises(Unavailable) as refused:
        store.put_bytes("never/stored.json", b"{}")
    message = _one_line(refused.value)
    assert message.startswith(f"TLS to S3 endpoint {s3_tls.endpoint} failed (bucket check of ")
    assert "certificate verify failed: unable to get local issuer certificate" in message
    trusted = str(other) if trust == "another CA" else "the system's CAs"
    assert message.endswith(f"(trusting {trusted}; AWS_CA_BUNDLE, MLMS_TLS_CA)")
    assert time.monotonic() - start < 5


def test_tls_to_a_plaintext_server_is_refused(s3: S3Server, env: Callable[..., None]) -> None:
    plain_endpoint = s3.url.removeprefix("s3://").split("/")[0]
    store = store_from_url(f"s3+https://{plain_endpoint}/{s3.bucket}")
    with pytest.raises(Unavailable) as refused:
        store.list("anything/")
    message = _one_line(refused.value)
    assert message.startswith(f"TLS to S3 endpoint {plain_endpoint} failed (list of ")
    assert "or not serve TLS" in message


def test_a_bad_ca_bundle_fails_before_any_call(env: Callable[..., None], tmp_path: Path) -> None:
    url = "s3+https://127.0.0.1:1/models"  # nothing listens there: no call is made
    env(AWS_CA_BUNDLE="/no/such/bundle.pem")
    with pytest.raises(InvalidArgument) as bad:
        store_from_url(url)
    assert _one_line(bad.value) == (
        "cannot read AWS_CA_BUNDLE '/no/such/bundle.pem': No such file or directory"
    )
    not_pem = tmp_path / "bundle.txt"
    not_pem.write_text("not a certificate")
    env(AWS_CA_BUNDLE="", MLMS_TLS_CA=str(not_pem))  # empty counts as unset
    with pytest.raises(InvalidArgument) as bad:
        store_from_url(url)
    assert _one_line(bad.value) == (
        f"MLMS_TLS_CA {str(not_pem)!r} is not a PEM file (no '-----BEGIN' line)"
    )
    # Plaintext URLs read no CA variable at all.
    assert store_from_url("s3://127.0.0.1:1/models").url == "s3://127.0.0.1:1/models"
    with pytest.raises(InvalidArgument, match="without TLS: expected secure=True"):
        S3Store("127.0.0.1:1", "models", ca_file=str(not_pem))
