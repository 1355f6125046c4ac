"""A library that raises while a model is built, loaded or run is one line naming the model, the
framework, the library and its version and the reason: on the command line (its traceback in the
command's log file, not on the terminal) and over gRPC (FAILED_PRECONDITION with the error's
class, its traceback in the agent's log). The failing call is real: a Hugging Face folder whose
configuration names an activation transformers does not have, so that building the network
raises inside transformers."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from mlms import errors
from mlms.agent.service import Load, PredictorService
from mlms.assets.file_models import ModelOptions
from mlms.assets.model_store import add_model
from mlms.assets.transformers_import import import_transformers
from mlms.evaluation.record import EvaluationRequest
from mlms.library_errors import TRACEBACKS, library_failures, library_reason
from mlms.protos.mlms.v2 import predictor_pb2, predictor_pb2_grpc, types_pb2
from mlms.rpc.options import CHANNEL_OPTIONS
from mlms.rpc.otlp import process_provider
from mlms.rpc.payloads import evaluate_message
from mlms.rpc.serving import Service, start_server
from mlms.rpc.status import error_from_rpc

#: What every report of the failure says, whatever the transformers version.
REASON = r"transformers \d+\.\d+\S*: KeyError: 'no_such_activation'"


@pytest.fixture(scope="module")
def bad_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT saved with save_pretrained whose config.json names an unknown activation."""
    folder = tmp_path_factory.mktemp("bad") / "bad-bert"
    transformers = import_transformers()
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64, num_labels=2,
    )  # fmt: skip
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    values = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**values, "hidden_act": "no_such_activation"}))
    return folder


def test_the_command_prints_one_line_and_logs_the_traceback(bad_bert: Path, tmp_path) -> None:
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-m", "mlms", "eval", "--model", str(bad_bert), "--iterations", "1",
         "--warmup", "0", "--min-seconds", "0", "--seq-len", "8"],
        env={**os.environ, "MLMS_HOME": str(home)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = home / "logs" / "mlms.log"
    assert done.returncode == 1, done.stderr
    assert re.fullmatch(
        rf"mlms: error: bad-bert on torch: {REASON} \(traceback in {re.escape(str(log))}\)\n",
        done.stderr,
    ), done.stderr
    logged = log.read_text()
    assert "Traceback (most recent call last)" in logged
    assert re.search(r"transformers/activations\.py", logged)


@pytest.fixture(scope="module")
def agent(store, bad_bert: Path) -> Iterator[predictor_pb2_grpc.PredictorStub]:
    add_model(store, bad_bert, ModelOptions(name="bad_bert", seq_len=8), replace=True)
    service = PredictorService(
        framework="torch",
        store=store,
        describe=lambda: '{"id": "test"}',
        agent_labels=lambda: {"agent_id": "test"},
        load=Load(),
        provider=process_provider("mlms-agent", None),
    )
    running = start_server(
        "127.0.0.1:0",
        [Service("mlms.v2.Predictor", service, predictor_pb2_grpc.add_PredictorServicer_to_server)],
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}", options=CHANNEL_OPTIONS)
    yield predictor_pb2_grpc.PredictorStub(channel)
    channel.close()
    running.stop(0)
    service.close_all()


def _failed(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("method", ["Open", "Evaluate"])
def test_over_grpc_it_is_failed_precondition_with_the_reason(agent, caplog, method) -> None:
    spec = types_pb2.ModelSpec(model="bad_bert", hw="cpu")
    request = EvaluationRequest(
        model="bad_bert", iterations=1, warmup=0, min_seconds=0.0, seq_len=8
    )
    calls = {
        "Open": lambda: agent.Open(predictor_pb2.OpenRequest(spec=spec)),
        "Evaluate": lambda: list(agent.Evaluate(evaluate_message(request))),
    }
    with caplog.at_level(logging.ERROR, logger=TRACEBACKS.name):
        failure = _failed(calls[method])
    assert failure.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert re.fullmatch(rf"bad_bert on torch: {REASON}", failure.details()), failure.details()
    assert isinstance(error_from_rpc(failure, "the agent"), errors.LibraryFailure)
    logged = [r.getMessage() for r in caplog.records if r.name == TRACEBACKS.name]
    assert any("transformers/activations.py" in message for message in logged)


def test_a_missing_attribute_of_a_library_names_the_module_and_the_version() -> None:
    transformers = import_transformers()
    with pytest.raises(errors.LibraryFailure) as caught, library_failures("bert_base on torch"):
        transformers.modeling_utils.no_such_switch  # noqa: B018
    assert str(caught.value) == (
        f"bert_base on torch: transformers {transformers.__version__} has no "
        "modeling_utils.no_such_switch"
    )
    assert "Traceback" in caught.value.details


def test_a_bug_of_mlms_is_not_a_library_failure() -> None:
    """An exception whose innermost frame is mlms's (here a pydantic error helper handed
    something that is not an error) stays what it is: an internal error, not a library's."""
    from mlms.reasons import one_line

    with pytest.raises(AttributeError) as caught, library_failures("nothing on torch"):
        one_line(None)  # type: ignore[arg-type]
    assert library_reason(caught.value) is None
