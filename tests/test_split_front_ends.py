"""``mlms advise`` and ``mlms loadgen`` on a model split by tensor parallelism
(``--tensor-parallel 2``), on this CPU with gloo: every evaluation an advice runs is a split one,
and a LoadGen scenario runs in rank 0 with the batches broadcast to rank 1. Real rank processes,
kept short: llama_mini, one configuration, few iterations, sub-second LoadGen runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from mlms.advise.record import AdviceRecord, AdviceRequest
from mlms.advise.run import _config_of
from mlms.advise.space import build_space
from mlms.advise.tables import facts
from mlms.catalog.zoo import get_model
from mlms.loadgen.record import LoadRecord, record_key
from mlms.loadgen.targets import TargetInfo, synthetic_samples
from mlms.protos.mlms.v2 import advice_pb2, evaluator_pb2_grpc
from tests.test_datasets import one_line_error, run_cli

pytest.importorskip("torch")

#: torch at fp32 as shipped, one thread a rank, llama_mini split over two ranks: one
#: configuration, measured whole (one evaluation: probing it would take more).
SPLIT = AdviceRequest(
    model="llama_mini",
    frameworks=["torch"],
    precisions=["fp32"],
    compile_modes=["none"],
    threads=[1],
    iterations=3,
    min_seconds=0,
    probe_iterations=2,
    probe_min_seconds=0,
    budget_minutes=30,
    use_stored=False,
    tensor_parallel=2,
)


@pytest.fixture(scope="module")
def server(store) -> Iterator[str]:
    """An ``mlms server`` and a torch agent in this process, over a registry in memory."""
    from mlms.agent.process import Agent, AgentConfig
    from mlms.registry.factory import registry_from_url
    from mlms.server.process import Server, ServerConfig

    registry = registry_from_url("memory://")
    agent = Agent(AgentConfig(framework="torch"), registry=registry).start()
    running = Server(ServerConfig(), registry=registry).start()
    try:
        yield f"127.0.0.1:{running.port}"
    finally:
        running.stop(0)
        agent.stop(0)
        registry.close()


@pytest.fixture(scope="module")
def advice(server: str) -> AdviceRecord:
    """The advice over gRPC (one run of the search serves every test of it: each of its
    evaluations starts two rank processes)."""
    from mlms.remote_client import RemoteClient

    with RemoteClient(server) as client:
        return client.advise(SPLIT)


def test_advise_splits_every_evaluation_it_runs(server: str, advice: AdviceRecord) -> None:
    from mlms.remote_client import RemoteClient

    assert advice.request.tensor_parallel == 2
    assert advice.recommendation is not None and advice.recommendation.accuracy_holds
    assert advice.recommendation.config.label() == "torch, fp32, 1 threads, bs 1"
    ran = {o.evaluation_id for o in advice.observations} | set(advice.baselines.values())
    assert ran == {advice.recommendation.evaluation_id}
    with RemoteClient(server) as client:
        records = [client.get_evaluation(evaluation_id) for evaluation_id in ran]
    for record in records:
        assert record.request.tensor_parallel == 2
        assert [(r.rank, r.device) for r in record.ranks] == [(0, "cpu"), (1, "cpu")]
    shown = dict(zip(*facts(advice).to_dict("list").values(), strict=True))
    assert shown["device"].endswith("; the model split over 2 ranks")
    assert shown["recommendation"].startswith("torch, fp32, 1 threads, bs 1, tensor parallel 2:")


def test_the_space_holds_what_a_split_runs() -> None:
    """torch only, compiled without autotuning or not at all, each rank's threads from its
    share of the cores."""
    request = AdviceRequest(model="llama_mini", tensor_parallel=2, objective="throughput")
    space = build_space(request, get_model("llama_mini"), (9, 0), 16)
    assert set(space.frameworks) == {"torch"}
    assert {c.compile for c in space.configs} == {None, "default", "reduce-overhead"}
    assert "onnxruntime: does not split models here (--tensor-parallel 2 takes torch)" in (
        space.left_out
    )
    assert (
        "compile max-autotune on torch: a split model compiles in default, reduce-overhead only"
        in space.left_out
    )
    cpu = build_space(request, get_model("llama_mini"), None, 8)
    assert {c.threads for c in cpu.configs} == {1, 2, 4}


def test_stored_evaluations_count_only_at_the_same_split(server: str, advice: AdviceRecord) -> None:
    from mlms.remote_client import RemoteClient

    assert advice.recommendation is not None and advice.recommendation.evaluation_id
    with RemoteClient(server) as client:
        record = client.get_evaluation(advice.recommendation.evaluation_id)
    assert _config_of(record, 1, 2) == advice.recommendation.config
    assert _config_of(record, 1, 1) is None


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "digits_cnn"], "model 'digits_cnn' has no tensor-parallel split"),
        (
            ["--model", "llama_mini", "--frameworks", "onnxruntime"],
            "framework 'onnxruntime': does not split models here (--tensor-parallel 2 takes torch)",
        ),
        (
            ["--model", "llama_mini", "--compile", "max-autotune"],
            "compile mode max-autotune: expected none or a mode of torch: default",
        ),
        (["--model", "llama_mini", "--dataset", "digits"], "a split model runs synthetic inputs"),
        (["--model", "llama_mini", "--hw", "gpu"], "--tensor-parallel 2 needs 2 gpu GPUs"),
    ],
)
def test_what_advise_cannot_split_is_one_line(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    status, _out, err = run_cli(["advise", *args, "--tensor-parallel", "2"], capsys, monkeypatch)
    lines = err.splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("mlms: error:"), err
    assert fragment in lines[0]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            advice_pb2.AdviceSpec(model="digits_cnn", tensor_parallel=2),
            "model 'digits_cnn' has no tensor-parallel split",
        ),
        (advice_pb2.AdviceSpec(model="llama_mini", tensor_parallel=0), "tensor_parallel"),
    ],
)
def test_what_advise_cannot_split_over_grpc_is_invalid(
    server: str, spec: advice_pb2.AdviceSpec, fragment: str
) -> None:
    with grpc.insecure_channel(server) as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Advise(advice_pb2.AdviseRequest(spec=spec), timeout=120))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in caught.value.details() and "\n" not in caught.value.details()


# -- loadgen ---------------------------------------------------------------------------------


def _loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlms", "loadgen", "--tensor-parallel", "2", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_loadgen_drives_a_split_model_from_rank_0(store) -> None:
    done = _loadgen("-m", "llama_mini", "--scenario", "offline", "--duration", "0.3",
                    "--target-qps", "50", "--batch-size", "4", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = LoadRecord.model_validate_json(done.stdout)
    assert LoadRecord.model_validate_json(store.get_bytes(record_key(record.id))) == record
    assert (record.tensor_parallel, record.devices) == (2, ["cpu", "cpu"])
    assert (record.model, record.framework, record.where) == ("llama_mini", "torch", "embedded")
    assert record.validity == "VALID", record.invalid_because
    # Offline is one query of every sample: each sample has an mlms latency.
    assert record.loadgen["samples_per_second"] > 0
    assert record.mlms is not None and record.mlms.samples >= 50 * 0.3
    names = {key.rsplit("/", 1)[1] for key in record.logs}
    assert {"mlperf_log_summary.txt", "mlperf_log_detail.txt"} <= names


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["-m", "llama_mini", "--server", "127.0.0.1:1"],
            "--tensor-parallel 2 with --server: an agent answers predicts in one process",
        ),
        (["-m", "digits_cnn"], "model 'digits_cnn' has no tensor-parallel split"),
        (
            ["-m", "bert_base", "-f", "onnxruntime"],
            "--tensor-parallel 2: framework 'onnxruntime' does not split models here",
        ),
    ],
)
def test_what_loadgen_cannot_split_is_one_line(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    arguments = ["loadgen", "--tensor-parallel", "2", *args, "--duration", "0.3"]
    one_line_error(run_cli(arguments, capsys, monkeypatch), fragment)


def test_token_models_get_token_ids_below_the_vocabulary() -> None:
    manifest = get_model("llama_mini")
    info = TargetInfo("llama_mini", "torch", "", "cpu", "embedded", manifest)
    samples = synthetic_samples(info, 8, seed=0)
    assert samples.shape == (8, 128) and samples.dtype == np.int64
    assert samples.min() >= 0 and samples.max() < 32000 and len(np.unique(samples[:, 0])) > 1
