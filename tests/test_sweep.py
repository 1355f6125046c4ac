"""Sweeps: the cross product as evaluations, lanes run in parallel, resumable; over a real
fleet (etcd, S3, server and agent processes), a ``kill -9`` of the client and of an agent
loses no evaluation and runs none twice to completion."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlms.cli.main import cli
from mlms.errors import InvalidArgument, MlmsError, Unavailable
from mlms.evaluation.record import BatchResult, EvaluationRecord, EvaluationRequest, LatencyStats
from mlms.evaluation.sweep import SweepCell, SweepSpec, load_sweep, new_sweep
from mlms.server.sweeps import SweepRun
from mlms.store.factory import store_from_url
from mlms.store.local import LocalStore
from tests.loopback_fleet import LoopbackFleet, listed_agents, running_fleet
from tests.processes import MlmsProcess, wait_for
from tests.shared_assets import copy_asset

SPEC = SweepSpec(
    models=["digits_cnn", "resnet18"],
    frameworks=["torch", "onnxruntime"],
    batch_sizes=[1, 8, 32],
    hw=["cpu"],
)


def test_the_cells_are_the_cross_product_with_ids_of_their_own() -> None:
    sweep = new_sweep(SPEC)
    assert len(sweep.cells) == 12
    assert (sweep.cells[0].model, sweep.cells[0].framework, sweep.cells[0].batch_size) == (
        "digits_cnn",
        "torch",
        1,
    )
    assert len({c.evaluation_id for c in sweep.cells}) == 12
    assert all(len(c.evaluation_id) == 32 for c in sweep.cells)
    assert new_sweep(SPEC).cells[0].evaluation_id != sweep.cells[0].evaluation_id


def test_every_cell_of_a_split_sweep_asks_for_the_split() -> None:
    spec = SPEC.model_copy(update={"tensor_parallel": 2})
    requests = [cell.request(spec) for cell in new_sweep(spec).cells]
    assert {request.tensor_parallel for request in requests} == {2}
    assert {cell.request(SPEC).tensor_parallel for cell in new_sweep(SPEC).cells} == {1}


class FakeCells:
    """Evaluations that take ``seconds``, counted, with the most running at once per lane."""

    def __init__(self, seconds: float = 0.05, fail: set[int] | None = None) -> None:
        self.seconds = seconds
        self.fail = fail or set()
        self.runs: list[str] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.lock = threading.Lock()

    def run(self, cell: SweepCell, request: EvaluationRequest, assigned) -> EvaluationRecord:
        with self.lock:
            self.runs.append(cell.evaluation_id)
            self.running[cell.framework] = self.running.get(cell.framework, 0) + 1
            self.most[cell.framework] = max(
                self.most.get(cell.framework, 0), self.running[cell.framework]
            )
        assigned(f"agent-{cell.framework}")
        time.sleep(self.seconds)
        with self.lock:
            self.running[cell.framework] -= 1
        if cell.batch_size in self.fail:
            raise Unavailable(f"batch {cell.batch_size} refused")
        return _record(cell)


def _record(cell: SweepCell) -> EvaluationRecord:
    """As much of a record as a sweep reads (unvalidated)."""
    stats = LatencyStats.model_construct(p50=1.5)
    result = BatchResult.model_construct(latency_ms=stats, throughput=cell.batch_size / 1.5e-3)
    return EvaluationRecord.model_construct(id=cell.evaluation_id, results=[result], agent={})


@pytest.fixture
def own_store(tmp_path: Path) -> LocalStore:
    """A store of the test's own (the suite's ``store`` fixture is the session's)."""
    return LocalStore(tmp_path / "store")


def _run(sweep, store, cells: FakeCells, widths: dict[str, int]):
    run = SweepRun(sweep, store, cells.run, lambda c: c.framework, lambda lane: widths[lane])
    *_, final = run.start().updates()
    return final


def test_lanes_run_as_wide_as_they_have_agents_and_no_wider(own_store) -> None:
    cells = FakeCells()
    final = _run(new_sweep(SPEC), own_store, cells, {"torch": 2, "onnxruntime": 3})
    assert final.count("completed") == 12 and sorted(cells.runs) == sorted(
        c.evaluation_id for c in final.cells
    )
    assert cells.most == {"torch": 2, "onnxruntime": 3}
    assert load_sweep(own_store, final.id[:8]) == final


def test_a_resumed_sweep_runs_only_what_is_not_completed(own_store) -> None:
    sweep = new_sweep(SPEC)
    first = _run(sweep, own_store, FakeCells(fail={8}), {"torch": 1, "onnxruntime": 1})
    assert first.count("failed") == 4 and all(
        "batch 8 refused" in c.error for c in first.cells if c.error
    )
    again = FakeCells()
    final = _run(load_sweep(own_store, sweep.id), own_store, again, {"torch": 1, "onnxruntime": 1})
    assert final.count("completed") == 12
    assert sorted(again.runs) == sorted(c.evaluation_id for c in first.cells if c.state == "failed")


def test_a_stopped_sweep_finishes_the_running_cells_and_starts_no_more(own_store) -> None:
    cells = FakeCells(seconds=0.3)
    run = SweepRun(new_sweep(SPEC), own_store, cells.run, lambda c: c.framework, lambda _lane: 1)
    updates = run.start().updates()
    wait_for(lambda: next(updates).count("running") == 2, 10, "two cells running")
    run.stop()
    *_, final = updates
    assert final.count("completed") == 2 and final.count("pending") == 10
    assert load_sweep(own_store, final.id).count("completed") == 2


def test_a_stopped_run_does_not_undo_the_resumed_one(own_store) -> None:
    """The caller of a sweep went away (its run stopped, a cell still running) and resumed
    it: when the old run's cell ends, it stores that cell only, not its stale view."""
    slow = FakeCells(seconds=0.5)
    old = SweepRun(new_sweep(SPEC), own_store, slow.run, lambda c: c.framework, lambda _lane: 1)
    updates = old.start().updates()
    wait_for(lambda: next(updates).count("running") == 2, 10, "two cells running")
    old.stop()
    resumed = _run(load_sweep(own_store, old.sweep.id), own_store, FakeCells(seconds=0), {
        "torch": 1, "onnxruntime": 1})  # fmt: skip
    assert resumed.count("completed") == 12
    *_, last = updates  # the old run's two cells end after the resumed run
    assert last.count("completed") == 2
    assert load_sweep(own_store, resumed.id).count("completed") == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--models", "digits_cnn"], "mlms sweep needs --models and --frameworks, or --resume ID"),
        (["--models", "nope", "--frameworks", "torch"], "unknown model 'nope'"),
        (
            ["--models", "digits_cnn", "--frameworks", "caffe"],
            "unknown framework 'caffe' in 'caffe'",
        ),
        (["--models", "digits_cnn", "--frameworks", "torch", "-b", "1,x"], "bad batch size 'x'"),
        (
            ["--models", "digits_cnn", "--frameworks", "torch", "--hw", "cpu,tpu"],
            "bad value for hw: unknown hardware 'tpu': expected cpu or a GPU alias",
        ),
        (
            ["--models", "digits_cnn", "--frameworks", "torch", "--tensor-parallel", "0"],
            "tensor_parallel",
        ),
        (["--resume", "xyz"], "sweep id 'xyz': expected hex digits"),
        (["--resume", "abc"], "no sweep with id 'abc'"),
        (["--resume", "abc", "--models", "x"], "expected no --models or --frameworks with it"),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["sweep", *args])
    # mlms.cli.main prints an MlmsError as one line ("mlms: error: ...").
    assert isinstance(result.exception, MlmsError), result.output
    assert message in str(result.exception) and "\n" not in str(result.exception)


def test_an_embedded_sweep_reports_and_resumes_with_nothing_to_do(
    tmp_path: Path, monkeypatch, store
):
    own = LocalStore(tmp_path / "store")
    for framework in ("torch", "onnxruntime"):  # the session's assets, not trained again
        copy_asset(store, own, "digits_cnn", framework)
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    args = ["sweep", "-m", "digits_cnn", "-f", "torch,onnxruntime", "-n", "2", "--warmup", "0",
            "--min-seconds", "0", "--report", str(tmp_path / "sweep.html")]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (key,) = own.list("sweeps/")
    sweep = load_sweep(own, key.removeprefix("sweeps/").removesuffix(".json"))
    assert sweep.count("completed") == 2 and f"sweep {sweep.id}" in result.output
    page = (tmp_path / "sweep.html").read_text()
    assert all(cell.evaluation_id[:8] in page for cell in sweep.cells)
    stored = {k: own.get_bytes(k) for k in own.list("evaluations/")}
    again = CliRunner().invoke(cli, ["sweep", "--resume", sweep.id[:10]])
    assert again.exit_code == 0, again.output
    assert {k: own.get_bytes(k) for k in own.list("evaluations/")} == stored


def test_a_bad_spec_over_grpc_is_invalid_argument() -> None:
    from mlms.protos.mlms.v2 import sweep_pb2
    from mlms.rpc.convert import from_proto

    with pytest.raises(InvalidArgument, match="bad sweep request: batch_sizes: "):
        spec = sweep_pb2.SweepSpec(models=["digits_cnn"], frameworks=["torch"], hw=["cpu"])
        from_proto(spec, SweepSpec, "sweep request")


# -- a real fleet ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(etcd, s3, mlms_home, tmp_path_factory) -> Iterator[LoopbackFleet]:
    root = tmp_path_factory.mktemp("sweep_fleet")
    frameworks = ["torch", "torch", "onnxruntime", "onnxruntime"]
    assets = LocalStore(mlms_home / "store")
    with running_fleet(etcd, s3, root, frameworks, ["digits_cnn"], assets_from=assets) as fleet:
        yield fleet


def _archives(store) -> set[str]:
    """Span archives: one for each evaluation that ran to completion (a killed run has none)."""
    return {k for k in store.list("traces/") if k.endswith("spans.parquet")}


def _start_sweep(
    fleet: LoopbackFleet, store, name: str, seconds: float = 2, batch_sizes: str = "1,2,3,4"
) -> tuple[MlmsProcess, str]:
    """``mlms sweep`` of 2 cells a batch size, each >= ``seconds``, as a process; the new
    sweep's id."""
    before = set(store.list("sweeps/"))
    client = MlmsProcess(
        ["sweep", "--models", "digits_cnn", "--frameworks", "torch,onnxruntime",
         "-b", batch_sizes, "-n", "5", "--warmup", "0", "--min-seconds", str(seconds)],
        fleet.root / f"{name}.log",
        {**fleet.env, "MLMS_SERVER": fleet.address},
    )  # fmt: skip
    key = wait_for(lambda: set(store.list("sweeps/")) - before, 60, "the sweep stored").pop()
    return client, key.removeprefix("sweeps/").removesuffix(".json")


def _running_on_agent(store, sweep_id: str) -> SweepCell | None:
    running = [c for c in load_sweep(store, sweep_id).cells if c.state == "running"]
    return next((c for c in running if c.agent_id), None)


def test_kill_the_client_and_an_agent_then_resume(fleet: LoopbackFleet, s3) -> None:
    """Every cell ends with one record, and as many evaluations ran to completion as there
    are cells."""
    store = store_from_url(s3.url)
    archives = _archives(store)
    client, sweep_id = _start_sweep(fleet, store, "client")
    victim = wait_for(lambda: _running_on_agent(store, sweep_id), 60, "a cell on an agent")
    fleet.agents[fleet.agent_ids()[victim.agent_id]].kill()
    wait_for(lambda: load_sweep(store, sweep_id).count("completed") >= 1, 120, "a cell completed")
    client.kill()
    with fleet.client() as remote:
        final = remote.sweep(None, sweep_id, lambda _state: None)
    assert final.count("completed") == 8, final
    retried = next(c for c in final.cells if c.evaluation_id == victim.evaluation_id)
    assert retried.agent_id != victim.agent_id  # the killed agent's evaluation ran elsewhere
    assert all(store.exists(f"evaluations/{c.evaluation_id}.json") for c in final.cells)
    assert len(_archives(store) - archives) == 8


def test_kill_the_server_then_resume_on_another(fleet: LoopbackFleet, s3) -> None:
    """The cells running when the server died finish on their agents, which list them in
    their records: the resumed sweep waits for them instead of running them again."""
    store = store_from_url(s3.url)
    archives = _archives(store)
    # Cells long enough to outlive the dead server's jobs (their lease) and the new server's
    # start: then only the agents' records say that they are still running. Six cells on four
    # agents: some run when the server dies, the others are left for the resumed sweep.
    client, sweep_id = _start_sweep(
        fleet, store, "client-of-a-dying-server", seconds=10, batch_sizes="1,2,3"
    )
    wait_for(lambda: _running_on_agent(store, sweep_id), 60, "a cell on an agent")
    fleet.server.kill()
    client.kill()
    fleet.start_server()
    with fleet.client() as remote:
        wait_for(lambda: len(listed_agents(remote)) == len(fleet.live()), 60, "the agents")
        final = remote.sweep(None, sweep_id, lambda _state: None)
    assert final.count("completed") == 6, final
    assert len(_archives(store) - archives) == 6
