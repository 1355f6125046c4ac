"""Sweeps: the cross product as cells, the cells of one model, framework, precision and
hardware as one evaluation (a group), lanes run in parallel, resumable; a group whose evaluation
fails runs its cells one by one; over a real fleet (etcd, S3, server and agent processes), a
``kill -9`` of the client and of an agent loses no evaluation and runs none twice to
completion."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlms.cli.main import cli
from mlms.errors import InvalidArgument, MlmsError, Unavailable
from mlms.evaluation.record import BatchResult, EvaluationRecord, EvaluationRequest, LatencyStats
from mlms.evaluation.record_store import load_record
from mlms.evaluation.sweep import (
    CellGroup,
    SweepCell,
    SweepSpec,
    load_sweep,
    new_sweep,
    save_sweep,
)
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


def test_the_cells_are_the_cross_product_one_evaluation_a_group() -> None:
    sweep = new_sweep(SPEC)
    assert len(sweep.cells) == 12
    first = sweep.cells[0]
    assert (first.model, first.framework, first.precision, first.batch_size) == (
        "digits_cnn", "torch", "fp32", 1)  # fmt: skip
    # One evaluation for a model on a framework: its three batch sizes share the model load.
    assert len({c.evaluation_id for c in sweep.cells}) == 4
    assert all(len(c.evaluation_id) == 32 for c in sweep.cells)
    (group, *_) = [sweep.group(indices) for indices in sweep.groups()]
    assert group.indices == (0, 1, 2) and group.request.batch_sizes == [1, 8, 32]
    assert group.evaluation_id == first.evaluation_id
    assert new_sweep(SPEC).cells[0].evaluation_id != sweep.cells[0].evaluation_id


def test_precisions_are_an_axis_of_their_own() -> None:
    sweep = new_sweep(SPEC.model_copy(update={"precisions": ["fp32", "bf16"]}))
    assert len(sweep.cells) == 24 and len({c.evaluation_id for c in sweep.cells}) == 8
    requests = [sweep.group(indices).request for indices in sweep.groups()]
    assert [(r.model, r.framework, r.precision) for r in requests[:4]] == [
        ("digits_cnn", "torch", "fp32"), ("digits_cnn", "torch", "bf16"),
        ("digits_cnn", "onnxruntime", "fp32"), ("digits_cnn", "onnxruntime", "bf16"),
    ]  # fmt: skip
    assert SPEC.precisions == ["fp32"]  # the evaluation's default


def test_every_cell_of_a_split_sweep_asks_for_the_split() -> None:
    def requests(spec: SweepSpec) -> list[EvaluationRequest]:
        sweep = new_sweep(spec)
        return [sweep.group(indices).request for indices in sweep.groups()]

    spec = SPEC.model_copy(update={"tensor_parallel": 2})
    assert {request.tensor_parallel for request in requests(spec)} == {2}
    assert {request.tensor_parallel for request in requests(SPEC)} == {1}


class FakeCells:
    """Evaluations of groups that take ``seconds``, counted, with the most running at once per
    lane; one that covers a batch size of ``fail`` fails whole, as a real one does."""

    def __init__(self, seconds: float = 0.05, fail: set[int] | None = None) -> None:
        self.seconds = seconds
        self.fail = fail or set()
        self.runs: list[str] = []
        self.requests: list[EvaluationRequest] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.lock = threading.Lock()

    def run(self, group: CellGroup, assigned) -> EvaluationRecord:
        framework = group.request.framework
        with self.lock:
            self.runs.append(group.evaluation_id)
            self.requests.append(group.request)
            self.running[framework] = self.running.get(framework, 0) + 1
            self.most[framework] = max(self.most.get(framework, 0), self.running[framework])
        assigned(f"agent-{framework}")
        time.sleep(self.seconds)
        with self.lock:
            self.running[framework] -= 1
        failing = sorted(self.fail & set(group.request.batch_sizes))
        if failing:
            raise Unavailable(f"batch {failing[0]} refused")
        return _record(group)


def _record(group: CellGroup) -> EvaluationRecord:
    """As much of a record as a sweep reads (unvalidated): a result a batch size."""
    stats = LatencyStats.model_construct(p50=1.5)
    results = [
        BatchResult.model_construct(batch_size=size, latency_ms=stats, throughput=size / 1.5e-3)
        for size in group.request.batch_sizes
    ]
    return EvaluationRecord.model_construct(id=group.evaluation_id, results=results, agent={})


@pytest.fixture
def own_store(tmp_path: Path) -> LocalStore:
    """A store of the test's own (the suite's ``store`` fixture is the session's)."""
    return LocalStore(tmp_path / "store")


def _run(sweep, store, cells: FakeCells, widths: dict[str, int]):
    run = SweepRun(sweep, store, cells.run, lambda c: c.framework, lambda lane: widths[lane])
    *_, final = run.start().updates()
    return final


def test_lanes_run_as_wide_as_they_have_agents_and_no_wider(own_store) -> None:
    spec = SPEC.model_copy(update={"models": ["digits_cnn", "resnet18", "squeezenet1_1"]})
    cells = FakeCells()
    final = _run(new_sweep(spec), own_store, cells, {"torch": 2, "onnxruntime": 3})
    assert final.count("completed") == 18
    assert sorted(cells.runs) == sorted({c.evaluation_id for c in final.cells})  # each once
    assert cells.most == {"torch": 2, "onnxruntime": 3}
    assert load_sweep(own_store, final.id[:8]) == final


def test_a_group_is_one_evaluation_its_cells_take_their_results(own_store) -> None:
    spec = SPEC.model_copy(update={"models": ["digits_cnn"], "frameworks": ["torch"]})
    cells = FakeCells()
    final = _run(new_sweep(spec), own_store, cells, {"torch": 1})
    assert [r.batch_sizes for r in cells.requests] == [[1, 8, 32]]
    assert final.count("completed") == 3 and len({c.evaluation_id for c in final.cells}) == 1
    assert [c.throughput for c in final.cells] == [size / 1.5e-3 for size in (1, 8, 32)]


def test_a_failing_batch_size_loses_no_other(own_store) -> None:
    """The group's evaluation fails whole (batch 8 refused): its cells run one by one, and
    only batch 8's fails."""
    spec = SPEC.model_copy(update={"models": ["digits_cnn"], "frameworks": ["torch"]})
    cells = FakeCells(fail={8})
    run = SweepRun(new_sweep(spec), own_store, cells.run)
    indexed = run.sweep.evaluation_ids()  # what the caller indexes before the run
    *_, final = run.start().updates()
    assert [r.batch_sizes for r in cells.requests] == [[1, 8, 32], [1], [8], [32]]
    assert [c.state for c in final.cells] == ["completed", "failed", "completed"]
    assert final.cells[1].error == "batch 8 refused"
    # Each cell names the evaluation that holds its result (or failed), its own now.
    assert len({c.evaluation_id for c in final.cells}) == 3
    assert set(cells.runs) <= set(indexed)


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
    assert [r.batch_sizes for r in again.requests] == [[8]] * 4


def test_a_resumed_partial_group_runs_its_batch_sizes_left_as_one(own_store) -> None:
    spec = SPEC.model_copy(update={"models": ["digits_cnn"], "frameworks": ["torch"],
                                   "batch_sizes": [1, 2, 4, 8]})  # fmt: skip
    sweep = new_sweep(spec)
    done = sweep.cells[1].model_copy(update={"state": "completed", "p50_ms": 2.0})
    save_sweep(own_store, sweep.model_copy(update={"cells": [sweep.cells[0], done,
                                                             *sweep.cells[2:]]}))  # fmt: skip
    cells = FakeCells()
    final = _run(load_sweep(own_store, sweep.id), own_store, cells, {"torch": 1})
    assert [r.batch_sizes for r in cells.requests] == [[1, 4, 8]]
    assert final.count("completed") == 4 and final.cells[1] == done
    (left,) = {final.cells[i].evaluation_id for i in (0, 2, 3)}
    assert left not in (done.evaluation_id, sweep.cells[0].evaluation_id)
    # Asked for again with the same cells left, the group is the same evaluation.
    assert load_sweep(own_store, sweep.id).group((0, 2, 3)).evaluation_id == left


#: A sweep as stored before cells had a precision or shared evaluations: each cell's id was
#: uuid5(namespace, "<sweep>/<model>/<framework>/<batch>/<hw>").
_NAMESPACE = uuid.UUID("6f1b7f5e-3c55-4b55-9d1e-6d6c6d730001")
_OLD_ID = "0c1f4bd8a5e34c6f9d3b2a7e8f6c5d4b"


def _old_cell(size: int, state: str) -> dict:
    key = f"{_OLD_ID}/digits_cnn/torch/{size}/cpu"
    return {"model": "digits_cnn", "framework": "torch", "batch_size": size, "hw": "cpu",
            "evaluation_id": uuid.uuid5(_NAMESPACE, key).hex, "state": state, "agent_id": None,
            "started_at": None, "finished_at": None, "error": None,
            "p50_ms": 1.0 if state == "completed" else None,
            "throughput": 1000.0 if state == "completed" else None,
            "joules_per_inference": None}  # fmt: skip


def test_a_sweep_stored_before_precisions_loads_and_resumes(own_store) -> None:
    old = {"id": _OLD_ID, "created_at": "2026-11-01T10:00:00Z",
           "spec": {"models": ["digits_cnn"], "frameworks": ["torch"], "batch_sizes": [1, 2],
                    "hw": ["cpu"], "iterations": 20, "warmup": 3, "min_seconds": 1.0,
                    "tensor_parallel": 1},
           "cells": [_old_cell(1, "completed"), _old_cell(2, "failed")]}  # fmt: skip
    own_store.put_bytes(f"sweeps/{_OLD_ID}.json", json.dumps(old).encode())
    sweep = load_sweep(own_store, _OLD_ID)
    assert sweep.spec.precisions == ["fp32"] and {c.precision for c in sweep.cells} == {"fp32"}
    cells = FakeCells()
    final = _run(sweep, own_store, cells, {"torch": 1})
    # The cell left keeps its id: the evaluation an older run stored or still runs is found.
    assert cells.runs == [old["cells"][1]["evaluation_id"]]
    assert final.count("completed") == 2 and final.cells[0] == sweep.cells[0]


def test_a_stopped_sweep_finishes_the_running_cells_and_starts_no_more(own_store) -> None:
    cells = FakeCells(seconds=0.3)
    run = SweepRun(new_sweep(SPEC), own_store, cells.run, lambda c: c.framework, lambda _lane: 1)
    updates = run.start().updates()
    # A group a lane: 3 cells each.
    wait_for(lambda: next(updates).count("running") == 6, 10, "two groups running")
    run.stop()
    *_, final = updates
    assert final.count("completed") == 6 and final.count("pending") == 6
    assert load_sweep(own_store, final.id).count("completed") == 6


def test_a_stopped_run_does_not_undo_the_resumed_one(own_store) -> None:
    """The caller of a sweep went away (its run stopped, a group still running) and resumed
    it: when the old run's group ends, it stores its cells only, not its stale view."""
    slow = FakeCells(seconds=0.5)
    old = SweepRun(new_sweep(SPEC), own_store, slow.run, lambda c: c.framework, lambda _lane: 1)
    updates = old.start().updates()
    wait_for(lambda: next(updates).count("running") == 6, 10, "two groups running")
    old.stop()
    resumed = _run(load_sweep(own_store, old.sweep.id), own_store, FakeCells(seconds=0), {
        "torch": 1, "onnxruntime": 1})  # fmt: skip
    assert resumed.count("completed") == 12
    *_, last = updates  # the old run's two groups end after the resumed run
    assert last.count("completed") == 6
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
        (
            ["--models", "digits_cnn", "--frameworks", "torch", "--precisions", "fp32,fp8"],
            "bad value for precisions: precision fp8: expected some of fp32, tf32, fp16, bf16",
        ),
        (
            ["--models", "digits_cnn", "--frameworks", "torch", "--precisions", "bf16,bf16"],
            "bad precision list 'bf16,bf16'",
        ),
        (["--resume", "abc", "--precisions", "bf16"], "expected no --models, --frameworks or"),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["sweep", *args])
    # mlms.cli.main prints an MlmsError as one line ("mlms: error: ...") and exits 1.
    assert isinstance(result.exception, MlmsError), result.output
    assert result.exit_code == 1
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


def test_ctrl_c_stops_an_embedded_sweep_mid_evaluation(tmp_path: Path, store) -> None:
    """SIGINT while an evaluation runs: the command ends at once (not when the evaluation
    does), exit status 130, and the stored sweep leaves the cell to a resume."""
    own = LocalStore(tmp_path / "store")
    copy_asset(store, own, "digits_cnn", "torch")
    args = ["sweep", "-m", "digits_cnn", "-f", "torch", "-n", "2", "--warmup", "0",
            "--min-seconds", "300"]  # fmt: skip
    # Should it not end, SIGABRT makes faulthandler print every thread's stack: where it hung.
    env = {"MLMS_HOME": str(tmp_path), "PYTHONFAULTHANDLER": "1"}
    process = MlmsProcess(args, tmp_path / "sweep.log", env=env, ctrl_c=True)
    try:

        def running() -> bool:
            keys = own.list("sweeps/")
            return (
                bool(keys)
                and load_sweep(own, keys[0].removeprefix("sweeps/").removesuffix(".json")).count(
                    "running"
                )
                == 1
            )

        wait_for(running, 120, "the sweep's evaluation to run")
        process.popen.send_signal(signal.SIGINT)
        try:
            status = process.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.popen.send_signal(signal.SIGABRT)
            process.popen.wait(timeout=30)
            pytest.fail(f"mlms sweep still ran 30 s after SIGINT:\n{process.output()}")
        assert status == 130, process.output()
        assert "mlms: aborted" in process.output()
        (key,) = own.list("sweeps/")
        assert load_sweep(own, key.removeprefix("sweeps/").removesuffix(".json")).count(
            "completed"
        ) == 0  # fmt: skip
    finally:
        process.stop()


def test_an_embedded_sweep_of_two_precisions_loads_the_model_once_a_precision(
    tmp_path: Path, monkeypatch, store
):
    own = LocalStore(tmp_path / "store")
    copy_asset(store, own, "digits_cnn", "torch")
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    args = ["sweep", "-m", "digits_cnn", "-f", "torch", "-b", "1,2,3", "--precisions",
            "fp32,bf16", "-n", "2", "--warmup", "0", "--min-seconds", "0"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (key,) = own.list("sweeps/")
    sweep = load_sweep(own, key.removeprefix("sweeps/").removesuffix(".json"))
    assert sweep.count("completed") == 6
    assert [c.precision for c in sweep.cells] == ["fp32"] * 3 + ["bf16"] * 3
    records = {k: load_record(own, k.removeprefix("evaluations/").removesuffix(".json"))
               for k in own.list("evaluations/")}  # fmt: skip
    assert sorted((r.request.precision, [b.batch_size for b in r.results]) for r in
                  records.values()) == [("bf16", [1, 2, 3]), ("fp32", [1, 2, 3])]  # fmt: skip
    for cell in sweep.cells:
        record = load_record(own, cell.evaluation_id)
        (result,) = [b for b in record.results if b.batch_size == cell.batch_size]
        assert record.request.precision == cell.precision
        assert (cell.p50_ms, cell.throughput) == (result.latency_ms.p50, result.throughput)


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
    """``mlms sweep`` of 2 cells a batch size, each >= ``seconds``, as a process (one
    evaluation a framework: its batch sizes, one after another); the new sweep's id."""
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


def test_a_sweep_of_two_precisions_over_a_server(fleet: LoopbackFleet, s3) -> None:
    """One evaluation a precision, on the lane's agents at once; a bad precision is
    INVALID_ARGUMENT."""
    store = store_from_url(s3.url)
    spec = SweepSpec(models=["digits_cnn"], frameworks=["torch"], batch_sizes=[1, 2],
                     hw=["cpu"], precisions=["fp32", "bf16"], iterations=2, warmup=0,
                     min_seconds=1)  # fmt: skip
    with fleet.client() as remote:
        torch = [a for a in listed_agents(remote) if a.framework == "torch"]
        live = [a for a in torch if a.address in fleet.live()]
        final = remote.sweep(spec, None, lambda _state: None)
        bad = spec.model_copy(update={"precisions": ["fp8"]})  # unchecked here: the server's
        with pytest.raises(InvalidArgument, match="precisions: precision fp8: expected some of"):
            remote.sweep(bad, None, lambda _state: None)
    assert final.count("completed") == 4, final
    assert load_sweep(store, final.id) == final
    assert [c.precision for c in final.cells] == ["fp32", "fp32", "bf16", "bf16"]
    for cell in final.cells:
        record = load_record(store, cell.evaluation_id)
        assert record.request.precision == cell.precision
        assert [b.batch_size for b in record.results] == [1, 2]
    assert len({c.evaluation_id for c in final.cells}) == 2
    # Two groups on the lane's agents: one each, at once.
    assert len({c.agent_id for c in final.cells}) == min(2, len(live))


def test_kill_the_client_and_an_agent_then_resume(fleet: LoopbackFleet, s3) -> None:
    """Every cell ends with its group's record, and as many evaluations ran to completion as
    there are groups (one a framework)."""
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
    assert len(_archives(store) - archives) == 2


def test_kill_the_server_then_resume_on_another(fleet: LoopbackFleet, s3) -> None:
    """The evaluations running when the server died finish on their agents, which list them in
    their records: the resumed sweep waits for them instead of running them again."""
    store = store_from_url(s3.url)
    archives = _archives(store)
    # Evaluations long enough (three batch sizes of 4 s) to outlive the dead server's jobs
    # (their lease) and the new server's start: then only the agents' records say that they
    # are still running. Six cells in two evaluations, one a framework, on four agents.
    client, sweep_id = _start_sweep(
        fleet, store, "client-of-a-dying-server", seconds=4, batch_sizes="1,2,3"
    )
    wait_for(lambda: _running_on_agent(store, sweep_id), 60, "a cell on an agent")
    fleet.server.kill()
    client.kill()
    fleet.start_server()
    with fleet.client() as remote:
        wait_for(lambda: len(listed_agents(remote)) == len(fleet.live()), 60, "the agents")
        final = remote.sweep(None, sweep_id, lambda _state: None)
    assert final.count("completed") == 6, final
    assert len(_archives(store) - archives) == 2
