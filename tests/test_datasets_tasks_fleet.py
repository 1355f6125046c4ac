"""A segmentation data set on a fleet: a real etcd, S3 over HTTP (moto's server), one ``mlms
server`` and one torch ``mlms agent`` on loopback. The mask pairs are added to the shared S3
store; the agent scores them and the record's task and metrics cross the wire; a data set of
another task, or a mask class the model lacks, is INVALID_ARGUMENT in one line."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from PIL import Image, ImageDraw

from mlms.datasets.ingest import add_dataset
from mlms.evaluation.record import EvaluationRequest
from mlms.protos.mlms.v2 import calls_pb2, evaluation_pb2, evaluator_pb2_grpc
from mlms.remote_client import RemoteClient
from mlms.store.factory import store_from_url
from tests.loopback_fleet import running_fleet
from tests.test_datasets_tasks import draw_masks

MODEL = "lraspp_mobilenet_v3"


@pytest.fixture(scope="module")
def fleet(etcd, s3, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(server address, store URL) of a running server and agent, the drawn mask pairs added
    as 'pairs' and a copy with class 40 in one mask as 'beyond'."""
    root = tmp_path_factory.mktemp("tasks_fleet")
    draw_masks(root / "pairs")
    draw_masks(root / "beyond")
    mask = Image.new("L", (80, 60), 0)
    ImageDraw.Draw(mask).rectangle([1, 1, 5, 5], fill=40)
    mask.save(root / "beyond" / "masks" / "000.png")
    store = store_from_url(s3.url)
    add_dataset(store, root / "pairs", "pairs")
    add_dataset(store, root / "beyond", "beyond")
    with running_fleet(etcd, s3, root, ["torch"], [MODEL]) as running:
        yield running.address, s3.url


def test_the_task_metrics_cross_the_wire(fleet) -> None:
    address, _store = fleet
    request = EvaluationRequest(
        model=MODEL, batch_sizes=[3], iterations=1, warmup=0, min_seconds=0.0, dataset="pairs"
    )
    with RemoteClient(address) as client:
        record = client.evaluate(request)
        accuracy = record.accuracy
        assert accuracy is not None and record.agent["mode"] != "embedded"
        assert accuracy.task == "segmentation" and set(accuracy.metrics) == {
            "miou",
            "pixel_accuracy",
        }
        assert accuracy.top1 is None and accuracy.samples == 3
        assert client.get_evaluation(record.id).accuracy == accuracy


def test_a_data_set_of_another_task_over_grpc(fleet) -> None:
    address, _store = fleet
    channel = grpc.insecure_channel(address)
    stub = evaluator_pb2_grpc.EvaluatorStub(channel)

    def status(**fields) -> tuple[grpc.StatusCode, str]:
        spec = evaluation_pb2.EvaluationSpec(batch_sizes=[2], iterations=1, warmup=0, **fields)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Evaluate(calls_pb2.EvaluateRequest(spec=spec), timeout=120))
        return caught.value.code(), caught.value.details()

    try:
        code, details = status(model="resnet18", dataset="pairs")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "data set 'pairs' is a segmentation data set" in details
        assert "model 'resnet18' is an image classification model" in details
        code, details = status(model=MODEL, dataset="beyond")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert f"has masks with class 40: model '{MODEL}' has 21 classes" in details
    finally:
        channel.close()
