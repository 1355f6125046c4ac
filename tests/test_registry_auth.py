"""The registry on an etcd that serves TLS and has its users and roles turned on, as a fleet
runs it: an authenticated client registers, holds leases and watches; the token is renewed
when etcd forgets it; no credentials, a wrong password, a user without the role and a CA the
client does not trust are each refused in one line; client certificates work with
``--client-cert-auth``. The settings come from ``MLMS_ETCD_*`` variables, checked before any
call. Nothing is faked: a real etcd, certificates from a test CA (``mlms.security.ca``)."""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from mlms.errors import AccessRefused, InvalidArgument, Unavailable
from mlms.hardware import HardwareInfo
from mlms.registry.agents import list_agents, register_agent
from mlms.registry.base import AgentRecord
from mlms.registry.factory import EtcdEndpoint, parse_registry_url, registry_from_url
from mlms.security.ca import Pem, issue, make_ca
from tests.processes import free_port, wait_for
from tests.services import EtcdServer, EtcdUser, ServingTls, etcd_binary

TTL = 2.0  # etcd's smallest lease, about
MLMS = EtcdUser("mlms", "mlms pass-1 with spaces")
READER = EtcdUser("reader", "reader-pass-2", "READ")
NO_ROLE = EtcdUser("norole", "norole-pass-3", None)
VARIABLES = (
    "MLMS_ETCD_CA",
    "MLMS_TLS_CA",
    "MLMS_ETCD_CERT",
    "MLMS_ETCD_KEY",
    "MLMS_ETCD_USER",
    "MLMS_ETCD_PASSWORD",
    "MLMS_ETCD_PASSWORD_FILE",
)


def _need_etcd() -> None:
    if etcd_binary() is None:
        pytest.skip("no etcd binary: run scripts/setup.sh as root (apt-get install etcd-server)")


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def ca() -> Pem:
    return make_ca("mlms registry test CA")


@pytest.fixture(scope="module")
def secured_etcd(tmp_path_factory: pytest.TempPathFactory, ca: Pem) -> Iterator[EtcdServer]:
    """etcd serving TLS with auth on: ``mlms`` may read and write mlms's prefix, ``reader``
    only read it, ``norole`` nothing."""
    _need_etcd()
    folder = tmp_path_factory.mktemp("etcd-auth")
    server = EtcdServer(folder / "data", tls=ServingTls.issue(folder / "tls", ca)).start()
    server.enable_auth("root-pass", [MLMS, READER, NO_ROLE])
    yield server
    server.kill()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set ``MLMS_ETCD_*`` variables for this test, starting from none of them set."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


@pytest.fixture
def as_user(env: Callable[..., None], secured_etcd: EtcdServer) -> Callable[..., None]:
    """The variables of a client that trusts the test CA and logs in as ``user``."""
    assert secured_etcd.tls is not None

    def login(user: EtcdUser, password: str | None = None) -> None:
        env(
            MLMS_ETCD_CA=str(secured_etcd.tls.ca),
            MLMS_ETCD_USER=user.name,
            MLMS_ETCD_PASSWORD=user.password if password is None else password,
        )

    return login


def _record() -> AgentRecord:
    return AgentRecord(
        agent_id=uuid.uuid4().hex[:12],
        address=f"127.0.0.1:{free_port()}",
        framework="torch",
        framework_version="2.14.1",
        hardware=HardwareInfo(
            host="test-host",
            cpu_brand="Test CPU",
            cpu_cores_logical=2,
            cpu_cores_physical=1,
            memory_bytes=1 << 30,
            machine="x86_64",
        ),
        started_at=datetime.now(UTC),
    )


def _token(server: EtcdServer, user: EtcdUser) -> str:
    """A token of ``user``, fetched by hand from the gateway."""
    assert server.tls is not None
    answer = requests.post(
        f"https://{server.address}/v3/auth/authenticate",
        json={"name": user.name, "password": user.password},
        timeout=5,
        **server.tls.requests_options(),
    )
    return answer.json()["token"]


def _token_works(server: EtcdServer, token: str) -> bool:
    assert server.tls is not None
    answer = requests.post(
        f"https://{server.address}/v3/kv/range",
        json={"key": "L21sbXMvdjEv"},  # /mlms/v1/
        headers={"Authorization": token},
        timeout=5,
        **server.tls.requests_options(),
    )
    return answer.status_code == 200


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


# -- an authenticated client ------------------------------------------------------------------
def test_an_authenticated_client_registers_leases_and_watches(
    secured_etcd: EtcdServer, as_user: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    as_user(MLMS)
    agent, observer = registry_from_url(secured_etcd.url), registry_from_url(secured_etcd.url)
    assert agent.url == secured_etcd.url == f"etcd+https://{secured_etcd.address}"
    seen: queue.Queue[dict[str, bytes]] = queue.Queue()
    watch = observer.watch_prefix("agents/", seen.put)

    def next_state(condition: Callable[[dict[str, bytes]], bool], what: str) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if condition(seen.get(timeout=0.1)):
                    return
            except queue.Empty:
                continue
        raise AssertionError(f"no watch callback with {what} within 5s")

    record = _record()
    key = f"agents/{record.agent_id}"
    registration = register_agent(agent, record, TTL)
    next_state(lambda current: key in current, f"{key} registered")
    assert [a.agent_id for a in list_agents(observer)] == [record.agent_id]

    held_until = time.monotonic() + 2 * TTL  # keepalives carry the token too
    wait_for(lambda: time.monotonic() > held_until, 3 * TTL, "two lease ttls")
    assert observer.get(key) is not None

    registration.close()
    next_state(lambda current: current == {}, f"{key} gone")
    watch.close()
    agent.close()
    observer.close()
    assert MLMS.password not in caplog.text


def test_a_password_file_and_the_fleet_ca(
    secured_etcd: EtcdServer, env: Callable[..., None], tmp_path: Path
) -> None:
    """A mounted secret (with the newline ``echo`` leaves) and MLMS_TLS_CA, the fleet's CA,
    when etcd has no CA variable of its own."""
    assert secured_etcd.tls is not None
    secret = _write(tmp_path / "etcd-password", MLMS.password.encode() + b"\n")
    env(
        MLMS_TLS_CA=str(secured_etcd.tls.ca),
        MLMS_ETCD_USER=MLMS.name,
        MLMS_ETCD_PASSWORD_FILE=secret,
    )
    registry = registry_from_url(secured_etcd.url)
    lease = registry.lease(TTL)
    lease.put("jobs/from-a-file", b"x")
    assert registry.get("jobs/from-a-file") == b"x"
    registry.close()


def test_a_rotated_password_is_picked_up(
    secured_etcd: EtcdServer,
    env: Callable[..., None],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator changes the password in etcd and in the mounted secret: etcd drops the
    user's tokens at once, and the running client (its calls, its lease keeper, its watch)
    authenticates again with the file's new content, without a restart."""
    assert secured_etcd.tls is not None
    caplog.set_level(logging.DEBUG)
    rotated = EtcdUser("rotated", "first-password")
    secured_etcd.add_user(rotated)
    secret = tmp_path / "etcd-password"
    secret.write_text(rotated.password)
    env(
        MLMS_ETCD_CA=str(secured_etcd.tls.ca),
        MLMS_ETCD_USER=rotated.name,
        MLMS_ETCD_PASSWORD_FILE=str(secret),
    )
    registry = registry_from_url(secured_etcd.url)
    seen: list[dict[str, bytes]] = []
    watch = registry.watch_prefix("jobs/", seen.append)
    lease = registry.lease(TTL)
    lease.put("jobs/before", b"1")
    earlier = _token(secured_etcd, rotated)
    assert _token_works(secured_etcd, earlier)

    secret.write_text("second-password\n")
    secured_etcd.change_password(rotated.name, "second-password")
    assert not _token_works(secured_etcd, earlier), "etcd kept the tokens of a changed password"
    assert registry.get("jobs/before") == b"1"
    lease.put("jobs/after", b"2")
    wait_for(lambda: seen and set(seen[-1]) == {"jobs/before", "jobs/after"}, 5, "the watch")
    assert caplog.text.count("authenticating again") >= 1
    assert "first-password" not in caplog.text and "second-password" not in caplog.text
    watch.close()
    lease.close()
    registry.close()


# -- refusals -----------------------------------------------------------------------------------
def test_no_credentials_are_refused(secured_etcd: EtcdServer, env: Callable[..., None]) -> None:
    assert secured_etcd.tls is not None
    env(MLMS_ETCD_CA=str(secured_etcd.tls.ca))
    with pytest.raises(AccessRefused) as refused:
        registry_from_url(secured_etcd.url)
    message = _one_line(refused.value)
    assert f"etcd at {secured_etcd.address} refused" in message
    assert "requires authentication" in message and "MLMS_ETCD_USER" in message


@pytest.mark.parametrize("user", [MLMS, EtcdUser("nobody", "whatever")], ids=["mlms", "unknown"])
def test_a_wrong_password_is_refused(
    secured_etcd: EtcdServer,
    as_user: Callable[..., None],
    caplog: pytest.LogCaptureFixture,
    user: EtcdUser,
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "not-the-password-7"
    as_user(user, password=wrong)
    with pytest.raises(AccessRefused) as refused:
        registry_from_url(secured_etcd.url)
    message = _one_line(refused.value)
    assert message == (
        f"etcd at {secured_etcd.address} refused user {user.name!r}: wrong user name or "
        "password; check MLMS_ETCD_USER with MLMS_ETCD_PASSWORD or MLMS_ETCD_PASSWORD_FILE"
    )
    assert wrong not in caplog.text


@pytest.mark.parametrize("user", [NO_ROLE, READER], ids=["no-role", "read-only"])
def test_a_user_without_the_role_is_refused_at_start(
    secured_etcd: EtcdServer, as_user: Callable[..., None], user: EtcdUser
) -> None:
    """Refused when the registry is opened, not at the first registration: reading alone is
    not enough for agents and servers, which write their records and jobs."""
    as_user(user)
    with pytest.raises(AccessRefused) as refused:
        registry_from_url(secured_etcd.url)
    message = _one_line(refused.value)
    assert message.startswith(f"etcd at {secured_etcd.address} refused reading and writing")
    assert f"to user {user.name!r}: permission denied" in message
    assert "readwrite on the prefix /mlms/v1/" in message
    assert isinstance(refused.value, Unavailable)  # a backend problem to a gRPC caller


@pytest.mark.parametrize("trust", ["another CA", "the system's CAs"])
def test_a_client_that_does_not_trust_the_ca_is_refused(
    secured_etcd: EtcdServer, env: Callable[..., None], tmp_path: Path, trust: str
) -> None:
    if trust == "another CA":
        env(MLMS_ETCD_CA=_write(tmp_path / "other-ca.pem", make_ca("another CA").cert))
    env(MLMS_ETCD_USER=MLMS.name, MLMS_ETCD_PASSWORD=MLMS.password)
    with pytest.raises(Unavailable) as refused:
        registry_from_url(secured_etcd.url)
    assert not isinstance(refused.value, AccessRefused)
    message = _one_line(refused.value)
    assert message.startswith(f"etcd at {secured_etcd.address} is unavailable (status): ")
    assert "certificate verify failed: unable to get local issuer certificate" in message
    assert "MLMS_ETCD_CA, MLMS_TLS_CA" in message


def test_credentials_given_to_an_etcd_without_auth_are_not_needed(
    etcd: EtcdServer, env: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    """Plaintext with a password is fine on loopback; an etcd with auth off says so in the
    log, once, and works."""
    env(MLMS_ETCD_USER=MLMS.name, MLMS_ETCD_PASSWORD=MLMS.password)
    registry = registry_from_url(etcd.url)
    registry.lease(TTL).put("jobs/no-auth", b"1")
    assert registry.get("jobs/no-auth") == b"1"
    registry.close()
    assert caplog.text.count("has authentication turned off") == 1
    assert MLMS.password not in caplog.text


# -- client certificates (etcd --client-cert-auth) ----------------------------------------------
def test_client_certificates(tmp_path: Path, ca: Pem, env: Callable[..., None]) -> None:
    _need_etcd()
    tls = ServingTls.issue(tmp_path / "tls", ca, client_cert_auth=True)
    server = EtcdServer(tmp_path / "data", tls=tls).start()
    try:
        env(MLMS_ETCD_CA=str(tls.ca))
        with pytest.raises(Unavailable) as refused:
            registry_from_url(server.url)
        message = _one_line(refused.value)
        assert f"etcd at {server.address} is unavailable (status)" in message
        assert "TLS handshake" in message and "client certificate from a CA it trusts" in message

        client = issue(ca, "client", ["127.0.0.1"])
        env(
            MLMS_ETCD_CERT=_write(tmp_path / "client.pem", client.cert),
            MLMS_ETCD_KEY=_write(tmp_path / "client-key.pem", client.key),
        )
        registry = registry_from_url(server.url)
        registry.lease(TTL).put("jobs/with-a-certificate", b"1")
        assert registry.get("jobs/with-a-certificate") == b"1"
        registry.close()

        # etcd's gateway then refuses certificates with a Common Name, as all of ours have.
        server.enable_auth("root-pass", [MLMS])
        env(MLMS_ETCD_USER=MLMS.name, MLMS_ETCD_PASSWORD=MLMS.password)
        with pytest.raises(AccessRefused) as refused:
            registry_from_url(server.url)
        message = _one_line(refused.value)
        assert "refuses client certificates with a Common Name while auth is on" in message
        assert "MLMS_ETCD_CERT" in message
    finally:
        server.kill()


# -- settings, checked before any call ----------------------------------------------------------
def test_credentials_never_go_in_plaintext_off_loopback(env: Callable[..., None]) -> None:
    env(MLMS_ETCD_USER=MLMS.name, MLMS_ETCD_PASSWORD=MLMS.password)
    with pytest.raises(InvalidArgument) as refused:
        registry_from_url("etcd://192.0.2.10:2379")  # TEST-NET-1: never reached
    assert _one_line(refused.value) == (
        "refusing to send the etcd password of 'mlms' in plaintext to etcd://192.0.2.10:2379: "
        "expected etcd+https://192.0.2.10:2379, or etcd on loopback"
    )


@pytest.mark.parametrize(
    ("url", "settings", "expected"),
    [
        (
            "etcd+https",
            {"MLMS_ETCD_USER": "mlms"},
            "MLMS_ETCD_USER 'mlms' is set without a password: expected MLMS_ETCD_PASSWORD or "
            "MLMS_ETCD_PASSWORD_FILE",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_PASSWORD": "secret"},
            "MLMS_ETCD_PASSWORD or MLMS_ETCD_PASSWORD_FILE is set but MLMS_ETCD_USER is not",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_USER": "u", "MLMS_ETCD_PASSWORD": "a", "MLMS_ETCD_PASSWORD_FILE": "/f"},
            "both MLMS_ETCD_PASSWORD and MLMS_ETCD_PASSWORD_FILE are set: expected one",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_USER": "u", "MLMS_ETCD_PASSWORD_FILE": "/no/such/file"},
            "cannot read MLMS_ETCD_PASSWORD_FILE '/no/such/file': No such file or directory",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_USER": "u", "MLMS_ETCD_PASSWORD_FILE": "{empty}"},
            "MLMS_ETCD_PASSWORD_FILE '{empty}' is empty: expected the password of "
            "MLMS_ETCD_USER 'u'",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_CA": "/no/such/ca.pem"},
            "cannot read MLMS_ETCD_CA '/no/such/ca.pem': No such file or directory",
        ),
        (
            "etcd+https",
            {"MLMS_TLS_CA": "{empty}"},
            "MLMS_TLS_CA '{empty}' is not a PEM file (no '-----BEGIN' line)",
        ),
        (
            "etcd+https",
            {"MLMS_ETCD_CERT": "{empty}"},
            "MLMS_ETCD_CERT is set but MLMS_ETCD_KEY is not: expected both or neither",
        ),
        (
            "etcd",
            {"MLMS_ETCD_CA": "{empty}"},
            "MLMS_ETCD_CA set, but registry etcd://127.0.0.1:{port} is plaintext: expected "
            "etcd+https://127.0.0.1:{port} to use TLS",
        ),
    ],
)
def test_bad_settings_are_one_line_naming_the_variable(
    env: Callable[..., None], tmp_path: Path, url: str, settings: dict, expected: str
) -> None:
    empty = _write(tmp_path / "empty", b"")
    port = free_port()  # nothing listens: the settings fail before any call
    env(**{name: value.replace("{empty}", empty) for name, value in settings.items()})
    with pytest.raises(InvalidArgument) as refused:
        registry_from_url(f"{url}://127.0.0.1:{port}")
    assert _one_line(refused.value) == expected.format(empty=empty, port=port)


def test_registry_urls() -> None:
    assert parse_registry_url("etcd+https://etcd.example:2379") == EtcdEndpoint(
        "etcd.example", 2379, True
    )
    assert parse_registry_url("etcd://10.0.0.5:2379") == EtcdEndpoint("10.0.0.5", 2379, False)
    assert parse_registry_url("memory://") is None
    for url in ("etcds://h:2379", "etcd+http://h:2379", "etcd+https://h", "https://h:2379"):
        with pytest.raises(InvalidArgument) as bad:
            parse_registry_url(url)
        assert str(bad.value) == (
            f"invalid registry URL {url!r}: expected etcd://HOST:PORT, "
            "etcd+https://HOST:PORT or memory://"
        )
