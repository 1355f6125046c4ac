"""Several servers of one fleet: a client given their addresses moves to the next when one is
down, and an evaluation whose server is killed mid-stream completes on its agent, is stored
once and is found through the other server. Real servers (in-process on a shared registry and
store, and as processes on etcd and S3 with a torch agent)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from mlms import errors
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.protos.mlms.v2 import evaluator_pb2_grpc
from mlms.registry.memory import MemoryRegistry
from mlms.remote_client import RemoteClient, server_addresses
from mlms.rpc.payloads import evaluate_message
from mlms.server.process import Server, ServerConfig
from mlms.store.factory import store_from_url
from tests.loopback_fleet import LoopbackFleet, running_fleet
from tests.processes import MlmsProcess, free_port, run_mlms, wait_for


def test_addresses_are_checked_one_by_one() -> None:
    assert server_addresses("a:1, b:2") == ["a:1", "b:2"]
    with pytest.raises(errors.InvalidArgument) as caught:
        server_addresses("a:1,b")
    assert str(caught.value) == (
        "bad server address 'b' in 'a:1,b': expected HOST:PORT, or several separated by commas "
        "like 10.0.0.1:50051,10.0.0.2:50051"
    )
    with pytest.raises(errors.InvalidArgument, match="an address is named twice"):
        server_addresses("a:1,a:1")


def test_the_cli_names_a_bad_server_address(tmp_path: Path) -> None:
    done = run_mlms(tmp_path, "agents", "--server", "127.0.0.1:1,nowhere")
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "mlms: error: bad server address 'nowhere' in '127.0.0.1:1,nowhere': expected HOST:PORT"
        )
    )


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[list[Server]]:
    registry = MemoryRegistry()
    config = ServerConfig(store=str(tmp_path / "store"))
    servers = [Server(config, registry=registry).start() for _ in range(2)]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop(0)
        registry.close()


def test_calls_move_to_the_next_server_when_one_is_down(two_servers) -> None:
    first, second = two_servers
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    addresses = [down, f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
    with RemoteClient(",".join(addresses)) as client:
        assert client.list_agents() == []
        assert client.address == addresses[1]  # and stays there
        first.stop(0)
        assert client.list_models()  # the first server is gone: the second answers
        assert client.address == addresses[2]
        second.stop(0)
        with pytest.raises(errors.Unavailable) as caught:
            client.list_agents()
    message = str(caught.value)
    assert message.startswith(f"cannot reach mlms server at {addresses[1]}: ")
    assert f"(and before it: {addresses[2]}: " in message and f"; {addresses[0]}: " in message


@pytest.fixture(scope="module")
def fleet(etcd, s3, tmp_path_factory, store) -> Iterator[LoopbackFleet]:
    root = tmp_path_factory.mktemp("fleet")
    with running_fleet(etcd, s3, root, ["torch"], ["digits_cnn"], assets_from=store) as fleet:
        yield fleet


def _measuring(
    fleet: LoopbackFleet, client: RemoteClient, min_seconds: float
) -> Callable[[], EvaluationRecord]:
    """digits_cnn evaluated through ``client`` in a thread, returned once its agent measures;
    calling the result waits for the evaluation's record."""
    measuring = threading.Event()
    outcome: list[EvaluationRecord | BaseException] = []

    def run() -> None:
        request = EvaluationRequest(
            model="digits_cnn", framework="torch", batch_sizes=[1], iterations=10, warmup=1,
            min_seconds=min_seconds,
        )  # fmt: skip
        try:
            outcome.append(
                client.evaluate(request, lambda e: e.run != "warmup" and measuring.set())
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert measuring.wait(120), fleet.logs()

    def record() -> EvaluationRecord:
        thread.join(120)
        [found] = outcome
        assert isinstance(found, EvaluationRecord), found
        return found

    return record


def _stored_once(fleet: LoopbackFleet, record: EvaluationRecord) -> None:
    store = store_from_url(fleet.store_url)
    assert [k for k in store.list("evaluations/") if record.id in k] == [
        f"evaluations/{record.id}.json"
    ]


def test_an_evaluation_outlives_its_server(fleet: LoopbackFleet) -> None:
    """The server the client streams from is killed (-9) while the agent measures: the
    client finds the record through the other server, stored once, indexed once."""
    other = MlmsProcess.serving(["server", "--grace", "2"], fleet.root / "other.log", fleet.env)
    try:
        addresses = f"{fleet.address},{other.address()}"
        with RemoteClient(addresses) as client:
            evaluated = _measuring(fleet, client, min_seconds=4.0)
            fleet.server.popen.send_signal(signal.SIGKILL)
            record = evaluated()
        with RemoteClient(addresses) as client:
            assert client.get_evaluation(record.id) == record
            assert client.address == other.address()  # the killed server is passed over
            listed = client.list_evaluations(EvaluationQuery(model="digits_cnn"))
            assert [s.id for s in listed.summaries].count(record.id) == 1
        _stored_once(fleet, record)
    finally:
        other.stop()
        fleet.start_server()  # for any test after this one


def test_an_evaluation_outlives_both_servers_going_away_in_turn(fleet: LoopbackFleet) -> None:
    """The client's server is killed (-9) while the agent measures, then the server it follows
    the evaluation through; the first comes back on its address a moment later: the client,
    still following, finds the record there, stored once."""
    first = fleet.address
    other = MlmsProcess.serving(["server", "--grace", "2"], fleet.root / "other2.log", fleet.env)
    back: MlmsProcess | None = None
    try:
        with RemoteClient(f"{first},{other.address()}") as client:
            evaluated = _measuring(fleet, client, min_seconds=2.0)
            fleet.server.popen.send_signal(signal.SIGKILL)
            wait_for(lambda: client.address == other.address() or None, 60, "the move on")
            other.popen.send_signal(signal.SIGKILL)
            other.popen.wait(30)
            address_file = fleet.root / "back.address"
            back = MlmsProcess(
                ["server", "--grace", "2", "--listen", first, "--address-file", str(address_file)],
                fleet.root / "back.log",
                fleet.env,
            )
            back.served = address_file
            back.address()
            record = evaluated()
        _stored_once(fleet, record)
    finally:
        other.stop()
        if back is not None:
            back.stop()
        fleet.start_server()  # for any test after this one


def test_a_client_chosen_evaluation_id_is_checked(two_servers) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{two_servers[0].port}") as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        message = evaluate_message(EvaluationRequest(model="digits_cnn"), "not-an-id")
        with pytest.raises(grpc.RpcError) as caught:
            next(stub.Evaluate(message, timeout=30))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "evaluation id 'not-an-id': expected 32 lowercase hex digits, or none"
    )
