"""A model split over ranks by tensor parallelism (``--tensor-parallel``), on this CPU with gloo:
the same launcher, rank program, split and merge that a GPU host runs with NCCL. Real processes
and real torch.distributed; nothing is faked. What needs GPUs (NCCL, CUPTI's kernels, the
speed against a bare loop) is benchmarks/tensor_parallel_gpu.py's."""

from __future__ import annotations

import signal
import threading
import uuid
from pathlib import Path

import duckdb
import numpy as np
import psutil
import pytest

from mlms.client import EmbeddedClient
from mlms.errors import RankFailed, UnknownEvaluation
from mlms.evaluation.progress import Progress
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.record_store import load_record
from mlms.protos.mlms.v2 import evaluation_pb2
from mlms.rpc.convert import from_proto, to_proto
from mlms.tracer.archive import local_archive
from tests.test_datasets import one_line_error, run_cli

RANK_PROGRAM = "mlms.evaluation.tensor_parallel_rank"


def _request(**changes: object) -> EvaluationRequest:
    values: dict[str, object] = {
        "model": "llama_mini",
        "batch_sizes": [1, 2],
        "iterations": 3,
        "warmup": 1,
        "min_seconds": 0,
        "seq_len": 16,
        "intra_op_threads": 1,
        "tensor_parallel": 2,
    }
    return EvaluationRequest(**values | changes)


@pytest.fixture(scope="module")
def split(store) -> EvaluationRecord:
    return EmbeddedClient(store).evaluate(_request(trace_level="framework"))


@pytest.fixture(scope="module")
def whole(store) -> EvaluationRecord:
    return EmbeddedClient(store).evaluate(_request(tensor_parallel=1))


def test_a_split_model_runs_one_process_a_rank_and_records_each(split: EvaluationRecord) -> None:
    assert split.request.tensor_parallel == 2
    assert [(r.rank, r.device) for r in split.ranks] == [(0, "cpu"), (1, "cpu")]
    assert all(r.peak_memory_bytes and r.peak_memory_bytes > 0 for r in split.ranks)
    assert all(len(r.energy) == len(split.results) for r in split.ranks)
    assert split.settings["tensor_parallel"] == 2 and split.settings["backend"] == "gloo"
    assert split.settings["devices"] == ["cpu", "cpu"]
    assert [r.batch_size for r in split.results] == [1, 2]
    assert "tensor parallel 2" in split.request.options()


def test_the_split_model_predicts_what_the_whole_one_does(
    split: EvaluationRecord, whole: EvaluationRecord
) -> None:
    assert split.predictions is not None and whole.predictions is not None
    assert split.predictions.inputs == whole.predictions.inputs
    assert split.predictions.top5 == whole.predictions.top5
    np.testing.assert_allclose(
        split.predictions.probabilities, whole.predictions.probabilities, atol=1e-4
    )


def test_every_ranks_spans_are_in_the_one_trace(store, split: EvaluationRecord) -> None:
    archive = local_archive(store, split.trace_id)
    ranks = duckdb.sql(
        f"select rank, count(*) from '{archive}' where level = 2 group by all order by all"
    ).fetchall()
    # One model span a predict on each rank, the same predicts: 2 runs x (3 + 3) per rank.
    assert ranks == [(0, 12), (1, 12)]
    roots = duckdb.sql(
        f"""select child.name, child.rank from '{archive}' child
            join '{archive}' root on child.parent_id = root.span_id
            where root.name = 'evaluation' and root.rank is null order by all"""
    ).fetchall()
    assert roots == [("rank 0", 0), ("rank 1", 1)]
    layers = duckdb.sql(
        f"select rank, count(*) from '{archive}' where level = 3 and kind = 'communication' "
        "group by all order by all"
    ).fetchall()
    assert [rank for rank, count in layers if count > 0] == [0, 1]


def test_a_predicts_latency_is_the_slowest_ranks(store, split: EvaluationRecord) -> None:
    """Each predict's latency is the larger of the two ranks' (the record's median against the
    median of the per-predict maximum of the ranks' model spans, which hold the timed call)."""
    archive = local_archive(store, split.trace_id)
    for result in split.results:
        rows = duckdb.sql(
            f"""select rank, (end_ns - start_ns) / 1e6 from '{archive}'
                where level = 2 and run = 1 and batch_size = {result.batch_size}
                order by rank, start_ns"""
        ).fetchall()
        per_rank = [[ms for rank, ms in rows if rank == r] for r in (0, 1)]
        slowest = np.maximum(*map(np.array, per_rank))
        assert result.latency_ms.p50 <= float(np.median(slowest)) * 1.001
        # A span also holds its own bookkeeping around the timed call (tens of microseconds):
        # the faster rank's spans bound the slowest rank's timed calls from below, nearly.
        faster = float(np.median(np.minimum(*map(np.array, per_rank))))
        assert result.latency_ms.p50 >= faster * 0.995


def test_a_bert_encoder_splits_by_mlms_plan_and_predicts_as_the_whole_one(store) -> None:
    client = EmbeddedClient(store)
    request = _request(model="bert_base", batch_sizes=[2], iterations=2)
    split = client.evaluate(request)
    whole = client.evaluate(request.model_copy(update={"tensor_parallel": 1}))
    assert split.predictions is not None and whole.predictions is not None
    assert split.predictions.top5 == whole.predictions.top5
    np.testing.assert_allclose(
        split.predictions.probabilities, whole.predictions.probabilities, atol=1e-4
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--model", "digits_cnn", "--tensor-parallel", "2"],
            "model 'digits_cnn' has no tensor-parallel split",
        ),
        (
            ["--model", "llama_mini", "--tensor-parallel", "3"],
            "--tensor-parallel 3: 'llama_mini' has 8 attention heads",
        ),
        (
            ["--model", "bert_base", "--framework", "onnxruntime", "--tensor-parallel", "2"],
            "--tensor-parallel 2: framework 'onnxruntime' does not split models here",
        ),
        (
            ["--model", "llama_mini", "--tensor-parallel", "2", "--compile", "max-autotune"],
            "--tensor-parallel 2 with --compile max-autotune: a split model compiles in",
        ),
        (
            ["--model", "llama_mini", "--hw", "gpu", "--tensor-parallel", "2"],
            "--tensor-parallel 2 needs 2 gpu GPUs",
        ),
        (["--model", "llama_mini", "--tensor-parallel", "0"], "tensor_parallel"),
    ],
)
def test_what_cannot_split_is_one_line(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    args = ["eval", "--seq-len", "8", "-n", "1", *arguments]
    one_line_error(run_cli(args, capsys, monkeypatch), message)


def test_a_rank_that_dies_fails_the_evaluation_and_leaves_nothing_behind(
    store, mlms_home: Path
) -> None:
    evaluation_id = uuid.uuid4().hex
    measuring = threading.Event()

    def progress(event: Progress) -> None:
        if event.run == "model":
            measuring.set()

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            EmbeddedClient(store).evaluate(
                _request(batch_sizes=[1], min_seconds=120), progress, evaluation_id
            )
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    archives = set(store.list("traces/"))
    worker = threading.Thread(target=run)
    worker.start()
    assert measuring.wait(timeout=240), "the ranks never started measuring"
    ranks = _rank_processes()
    assert sorted(rank for rank, _ in ranks) == ["0", "1"]
    next(process for rank, process in ranks if rank == "1").send_signal(signal.SIGKILL)
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RankFailed), outcome
    message = str(outcome[0])
    assert "llama_mini with --tensor-parallel 2: rank 1 (cpu) died (signal SIGKILL)" in message
    kept = mlms_home / "logs" / "ranks" / f"{evaluation_id}-rank1.log"
    assert f"its log: {kept}" in message and kept.is_file()
    with pytest.raises(UnknownEvaluation):
        load_record(store, evaluation_id)
    assert set(store.list("traces/")) == archives
    assert _rank_processes() == []


def test_the_wire_carries_the_split_and_the_ranks(split: EvaluationRecord) -> None:
    spec = to_proto(split.request, evaluation_pb2.EvaluationSpec)
    assert spec.tensor_parallel == 2
    assert from_proto(spec, EvaluationRequest, "evaluation request").tensor_parallel == 2
    message = to_proto(split, evaluation_pb2.EvaluationRecord)
    assert [(r.rank, r.device) for r in message.ranks] == [(0, "cpu"), (1, "cpu")]
    back = from_proto(message, EvaluationRecord, "evaluation record")
    assert back.ranks == split.ranks


def _rank_processes() -> list[tuple[str, psutil.Process]]:
    """This test process's rank processes and their ranks."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if RANK_PROGRAM in command:
            found.append((command[command.index(RANK_PROGRAM) + 2], child))
    return found


def test_a_rank_stuck_leaving_its_group_is_stopped_and_its_results_kept(
    monkeypatch, caplog
) -> None:
    """Both ranks leave their results; rank 1 then never exits (``tests/stuck_rank.py``): the
    launcher keeps both results, names the rank in a warning and leaves no process behind."""
    from mlms.catalog.zoo import get_model
    from mlms.evaluation import tensor_parallel
    from tests.stuck_rank import StuckRankSpec

    monkeypatch.setattr(tensor_parallel, "TEARDOWN_SECONDS", 1.0)
    spec = StuckRankSpec(
        request=_request(),
        manifest=get_model("llama_mini"),
        asset={},
        devices=["cpu", "cpu"],
        port=0,
        evaluation_id=uuid.uuid4().hex,
        context=[],
        stuck=[1],
    )
    with tensor_parallel.running_ranks(spec, lambda _event: None) as outputs:
        assert [output.results for output in outputs] == [{"rank": 0}, {"rank": 1}]
    assert "llama_mini with --tensor-parallel 2: rank 1 (cpu) left its results" in caplog.text
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "tests.stuck_rank" in (p.info["cmdline"] or [])
    ]
    assert not left
