"""TLS, mutual TLS between server and agents, bearer tokens, and the plaintext policy.

Everything is real: certificates from a CA made here with ``cryptography``, gRPC's TLS, a
server and torch agents in this process sharing an in-memory registry, tokens in a folder
store. Only the network is loopback (the certificates name 127.0.0.1).
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlms import errors
from mlms.agent.process import Agent, AgentConfig
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.protos.mlms.v2 import calls_pb2, predictor_pb2, predictor_pb2_grpc, types_pb2
from mlms.registry.factory import registry_from_url
from mlms.remote_client import RemoteClient
from mlms.rpc import tensors
from mlms.security.auth import EVALUATOR_ROLES
from mlms.security.ca import Pem, issue, make_ca
from mlms.security.tls import TlsFiles
from mlms.security.tokens import Tokens
from mlms.server.process import Server, ServerConfig
from mlms.store.local import LocalStore
from tests.processes import wait_for

HOSTS = ["127.0.0.1", "localhost"]
SPEC = types_pb2.ModelSpec(model="digits_cnn", framework="torch", hw="cpu")
STREAMING = {"Evaluate", "Bound", "GetSpans", "Analyze"}
#: What an HTTP/2 header value may hold; gRPC fails anything else before it is sent.
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)


def _files(folder: Path, ca: Pem, pem: Pem | None, name: str) -> TlsFiles:
    (folder / "ca.pem").write_bytes(ca.cert)
    if pem is None:
        return TlsFiles.load(str(folder / "ca.pem"))
    (folder / f"{name}.pem").write_bytes(pem.cert)
    (folder / f"{name}-key.pem").write_bytes(pem.key)
    return TlsFiles.load(
        str(folder / "ca.pem"), str(folder / f"{name}.pem"), str(folder / f"{name}-key.pem")
    )


@dataclass
class SecureFleet:
    folder: Path
    ca: Pem
    server: Server
    agent: Agent
    store: LocalStore
    registry: object

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def tls(self, role: str | None = None, ca: Pem | None = None) -> TlsFiles:
        """Client files trusting the fleet's CA, with a certificate of ``role`` when given."""
        ca = ca or self.ca
        sub = self.folder / f"client-{role}-{id(ca)}"
        sub.mkdir(exist_ok=True)
        return _files(sub, ca, issue(ca, role, HOSTS) if role else None, role or "none")

    def client(self, token: str | None, **kwargs: object) -> RemoteClient:
        return RemoteClient(self.address, tls=kwargs.pop("tls", self.tls()), token=token, **kwargs)  # type: ignore[arg-type]

    @functools.cached_property
    def channel(self) -> grpc.Channel:
        """One TLS channel for raw calls (no token)."""
        return grpc.secure_channel(self.address, self.tls().channel_credentials())

    def token(self, *roles: str) -> str:
        return Tokens(self.store).create("tester", list(roles))[1]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def digits_asset(store: object) -> None:
    """The agents' model built before they start: a first predict would otherwise train it
    inside the call's deadline."""
    AssetManager(store, mlms_home() / "cache").ensure(get_model("digits_cnn"), "torch")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, digits_asset: None) -> Iterator[SecureFleet]:
    folder = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    registry = registry_from_url("memory://")
    store = LocalStore(folder / "store")
    (folder / "agent").mkdir()
    (folder / "server").mkdir()
    agent_tls = _files(folder / "agent", ca, issue(ca, "agent", HOSTS), "agent")
    server_tls = _files(folder / "server", ca, issue(ca, "server", HOSTS), "server")
    agent = Agent(AgentConfig(framework="torch", tls=agent_tls), registry=registry).start()
    server = Server(
        ServerConfig(store=str(store.root), tls=server_tls, auth=True), registry=registry
    ).start()
    fleet = SecureFleet(folder, ca, server, agent, store, registry)
    try:
        wait_for(lambda: server.fleet.agents(), 30, "the TLS agent admitted into the fleet")
        yield fleet
    finally:
        server.stop(0)
        agent.stop(0)
        registry.close()


def _raw(fleet: SecureFleet, method: str, metadata: tuple = ()) -> grpc.StatusCode:
    """The status of calling ``method`` with an empty request over TLS."""
    channel = grpc.secure_channel(fleet.address, fleet.tls().channel_credentials())
    path = f"/mlms.v2.Evaluator/{method}"
    try:
        if method in STREAMING:
            list(channel.unary_stream(path)(b"", metadata=metadata, timeout=30))
        else:
            channel.unary_unary(path)(b"", metadata=metadata, timeout=30)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined]
    finally:
        channel.close()


def _batch() -> calls_pb2.PredictRequest:
    batch = np.zeros((2, 1, 8, 8), np.float32)
    return calls_pb2.PredictRequest(spec=SPEC, tensor=tensors.to_proto(batch), top_k=1)


def test_every_method_needs_a_token(fleet: SecureFleet) -> None:
    """No token, a malformed one, an unknown one: UNAUTHENTICATED on every Evaluator method,
    before the request is decoded (the empty bytes are never parsed). Health stays open."""
    unknown = "mlms_000000000000_" + "A" * 43
    for method in EVALUATOR_ROLES:
        assert _raw(fleet, method) == grpc.StatusCode.UNAUTHENTICATED, method
        for header in ("Bearer nonsense", f"Bearer {unknown}", "Basic abc"):
            code = _raw(fleet, method, (("authorization", header),))
            assert code == grpc.StatusCode.UNAUTHENTICATED, (method, header)
    with fleet.client(None) as client, pytest.raises(errors.Unauthenticated, match="needs a token"):
        client.list_models()


def test_roles_decide_what_a_token_may_call(fleet: SecureFleet) -> None:
    reader, runner = fleet.token("read"), fleet.token("run")
    for method, role in EVALUATOR_ROLES.items():
        code = _raw(fleet, method, (("authorization", f"Bearer {reader}"),))
        if role == "read":
            # Past authentication: the empty request is then answered on its merits.
            assert code not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
        else:
            assert code == grpc.StatusCode.PERMISSION_DENIED, method
    with fleet.client(reader) as client:
        assert client.list_models()
        with pytest.raises(errors.PermissionDenied, match="needs the role 'run'"):
            client.predict(_batch())
    with fleet.client(runner) as client:
        reply = client.predict(_batch())  # through the server to the agent: TLS both ways
        assert tensors.from_proto(reply.logits).shape == (2, 10)
        with pytest.raises(errors.PermissionDenied, match="needs the role 'read'"):
            client.list_evaluations()


def test_a_revoked_token_stops_working(fleet: SecureFleet) -> None:
    tokens = Tokens(fleet.store)
    entry, secret = tokens.create("leaving", ["read"])
    with fleet.client(secret) as client:
        assert client.list_models()
        tokens.revoke(entry.id)

        def refused() -> bool:
            try:
                client.list_models()
            except errors.Unauthenticated as exc:
                return "was revoked" in str(exc)
            return False

        wait_for(refused, 10, "the revoked token refused (the server caches for 2 s)")
    assert all(t.revoked_at is not None for t in tokens.list() if t.id == entry.id)
    stored = (fleet.store.root / f"auth/tokens/{entry.id}.json").read_text()
    assert secret.split("_", 2)[2] not in stored  # the secret part may hold "_" itself


def test_tls_is_required_and_checked(fleet: SecureFleet) -> None:
    token = fleet.token("read")
    with RemoteClient(fleet.address, insecure=True) as plain, pytest.raises(errors.Unavailable):
        plain.list_models()
    stranger = make_ca("another CA")
    with fleet.client(token, tls=fleet.tls(ca=stranger)) as client:
        with pytest.raises(errors.Unavailable):
            client.list_models()
    with pytest.raises(errors.InvalidArgument, match="TLS only"):
        RemoteClient("10.255.255.1:1", insecure=True, token=token)


def test_agents_answer_only_the_fleets_server(fleet: SecureFleet) -> None:
    """The agent's port demands a certificate from the fleet's CA that names the server
    role: none, a client's, or another CA's are all refused."""
    address = fleet.agent.address

    def info(tls: TlsFiles) -> grpc.StatusCode:
        channel = grpc.secure_channel(address, tls.channel_credentials())
        try:
            predictor_pb2_grpc.PredictorStub(channel).Info(predictor_pb2.InfoRequest(), timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined]
        finally:
            channel.close()

    assert info(fleet.tls()) == grpc.StatusCode.UNAVAILABLE  # no client certificate
    assert info(fleet.tls("client")) == grpc.StatusCode.PERMISSION_DENIED
    assert info(fleet.tls("agent")) == grpc.StatusCode.PERMISSION_DENIED
    assert info(fleet.tls("server", ca=make_ca("another CA"))) == grpc.StatusCode.UNAVAILABLE
    assert info(fleet.tls("server")) == grpc.StatusCode.OK


@pytest.mark.parametrize("case", ["another CA", "client role"])
def test_an_agent_without_an_agent_certificate_is_not_admitted(
    fleet: SecureFleet, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It registers (the registry is open to it here), but the server checks its certificate
    before counting it: it never appears in the fleet and gets no work."""
    ca = make_ca("another CA") if case == "another CA" else fleet.ca
    role = "agent" if case == "another CA" else "client"
    sub = fleet.folder / case.replace(" ", "-")
    sub.mkdir()
    tls = _files(sub, ca, issue(ca, role, HOSTS), "agent")
    caplog.set_level(logging.WARNING, logger="mlms.server.admission")
    intruder = Agent(AgentConfig(framework="torch", tls=tls), registry=fleet.registry).start()
    try:
        wait_for(
            lambda: any(intruder.id in r.getMessage() and "refused" in r.getMessage()
                        for r in caplog.records),
            30, "the server's refusal of the intruder",
        )  # fmt: skip
        assert intruder.id not in {a.id for a in fleet.server.fleet.agents()}
        assert fleet.agent.id in {a.id for a in fleet.server.fleet.agents()}
    finally:
        intruder.stop(0)


def test_plaintext_only_on_loopback_or_when_asked(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgument, match=r"would serve plaintext on 0\.0\.0\.0:0"):
        Server(ServerConfig(listen="0.0.0.0:0", store=str(tmp_path)))
    with pytest.raises(errors.InvalidArgument, match=r"would serve plaintext on 0\.0\.0\.0:0"):
        Agent(AgentConfig(framework="torch", listen="0.0.0.0:0", store=str(tmp_path)))
    server = Server(ServerConfig(listen="0.0.0.0:0", store=str(tmp_path), insecure=True))
    assert server.config.requires_tokens  # off loopback tokens stay on unless --no-auth
    server.stop(0)
    assert not ServerConfig(listen="127.0.0.1:0").requires_tokens
    result = subprocess.run(
        [sys.executable, "-m", "mlms", "server", "--listen", "0.0.0.0:0", "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "mlms: error: mlms server would serve plaintext on 0.0.0.0:0, which is not a loopback "
        "address: give --tls-cert and --tls-key (MLMS_TLS_CERT, MLMS_TLS_KEY), or --insecure "
        "to accept it"
    ]


def test_tls_files_are_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgument, match=r"cannot read --tls-ca '/nonexistent\.pem'"):
        TlsFiles.load("/nonexistent.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(errors.InvalidArgument, match="is not a PEM file"):
        TlsFiles.load(None, str(tmp_path / "junk.pem"), str(tmp_path / "junk.pem"))
    with pytest.raises(errors.InvalidArgument, match=r"--tls-cert '/a\.pem' needs --tls-key"):
        TlsFiles.load(None, "/a.pem", None)


def test_token_cli_and_the_token_file(fleet: SecureFleet, tmp_path: Path) -> None:
    """``mlms token create --save`` writes $MLMS_HOME/token (0600), which a later command
    sends; ``list`` never shows a secret; ``revoke`` by name."""
    env = {"MLMS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def mlms(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mlms", *args], capture_output=True,
                              text=True, timeout=120, env=env)  # fmt: skip

    store = str(fleet.store.root)
    created = mlms("token", "create", "--name", "cli-user", "--role", "read", "--save",
                   "--store", store)  # fmt: skip
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert (tmp_path / "token").read_text().strip() == secret
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600
    listed = mlms("token", "list", "--store", store)
    assert "cli-user" in listed.stdout and secret.split("_", 2)[2] not in listed.stdout
    ca = str(fleet.folder / "server" / "ca.pem")
    models = mlms("models", "--server", fleet.address, "--tls-ca", ca)
    assert models.returncode == 0, models.stderr
    assert "digits_cnn" in models.stdout
    assert mlms("token", "revoke", "cli-user", "--store", store).returncode == 0
    bad = mlms("token", "create", "--name", "x", "--role", "admin", "--store", store)
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "mlms: error: bad role 'admin': expected a comma-separated list of "
        "('read', 'run', 'models')"
    )


def test_agents_dialled_by_ip_share_one_named_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, digits_asset: None
) -> None:
    """Pods advertise their IPs; their one certificate names ``mlms-agent`` instead. A server
    told that name (--agent-tls-name) admits and reaches them; one that checks the address
    refuses them."""
    caplog.set_level(logging.WARNING, logger="mlms.server.admission")
    ca = make_ca()
    registry = registry_from_url("memory://")
    for name in ("agent", "server", "strict"):
        (tmp_path / name).mkdir()
    agent_tls = _files(tmp_path / "agent", ca, issue(ca, "agent", ["mlms-agent"]), "agent")
    server_tls = _files(tmp_path / "server", ca, issue(ca, "server", HOSTS), "server")
    agent = Agent(AgentConfig(framework="torch", tls=agent_tls), registry=registry).start()
    named = Server(
        ServerConfig(store=str(tmp_path), tls=server_tls, auth=False, agent_tls_name="mlms-agent"),
        registry=registry,
    ).start()
    strict = Server(ServerConfig(store=str(tmp_path), tls=server_tls), registry=registry).start()
    try:
        wait_for(lambda: named.fleet.agents(), 30, "the agent admitted by its certificate's name")
        with RemoteClient(
            f"127.0.0.1:{named.port}", tls=_files(tmp_path / "strict", ca, None, "none")
        ) as client:
            assert tensors.from_proto(client.predict(_batch()).logits).shape == (2, 10)
        wait_for(
            lambda: any(agent.id in r.getMessage() and "refused" in r.getMessage()
                        for r in caplog.records),
            30, "the refusal by the server that checks addresses",
        )  # fmt: skip
        assert not strict.fleet.agents()
    finally:
        named.stop(0)
        strict.stop(0)
        agent.stop(0)
        registry.close()


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    method=st.sampled_from(sorted(EVALUATOR_ROLES)),
    body=st.binary(max_size=256),
    header=st.one_of(
        st.none(),
        st.text(PRINTABLE, max_size=80),
        st.builds(lambda t: f"Bearer {t}", st.text(PRINTABLE, max_size=80)),
        st.builds(
            lambda t: f"Bearer mlms_{t}",
            st.from_regex(r"[0-9a-f]{12}_[A-Za-z0-9_-]{43}", fullmatch=True),
        ),
    ),
)
def test_forged_tokens_and_garbage_are_refused_not_crashed(
    fleet: SecureFleet, method: str, body: bytes, header: str | None
) -> None:
    """Any bytes with any authorization header: UNAUTHENTICATED, never INTERNAL, and the
    body is not parsed (a forged well-formed token is as unknown as garbage)."""
    metadata = () if header is None else (("authorization", header),)
    channel = fleet.channel
    path = f"/mlms.v2.Evaluator/{method}"
    try:
        call = channel.unary_stream(path) if method in STREAMING else channel.unary_unary(path)
        result = call(body, metadata=metadata, timeout=10)
        list(result) if method in STREAMING else None
        code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
    assert code == grpc.StatusCode.UNAUTHENTICATED, (method, header)
