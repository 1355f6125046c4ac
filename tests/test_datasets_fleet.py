"""Data sets on a fleet: a real etcd, S3 over HTTP (moto's server), one ``mlms server`` and one
torch ``mlms agent`` on loopback. The data sets are added to the shared S3 store; the agent
reads them from there. Nothing is faked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from PIL import Image

from mlms.assets.digits import load_split
from mlms.datasets.ingest import add_dataset
from mlms.evaluation.record import EvaluationRequest
from mlms.protos.mlms.v2 import calls_pb2, evaluation_pb2, evaluator_pb2_grpc
from mlms.remote_client import RemoteClient
from mlms.store.factory import store_from_url
from tests.loopback_fleet import running_fleet

#: digits_cnn's top-1 on its held-out split (mlms/catalog/models/digits_cnn.yaml, seed 0).
ZOO_TOP1 = 0.9806


@pytest.fixture(scope="module")
def fleet(etcd, s3, store, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(server address, store URL) of a running server and agent."""
    root = tmp_path_factory.mktemp("datasets_fleet")
    with running_fleet(etcd, s3, root, ["torch"], ["digits_cnn"], assets_from=store) as fleet:
        yield fleet.address, s3.url


@pytest.fixture(scope="module")
def added(fleet, tmp_path_factory) -> dict[str, str]:
    """The digits hold-out added to the fleet's store as PNGs (one folder per class) and as
    .npz, and a .npz whose labels go past digits_cnn's ten outputs: kind -> sha256."""
    _address, store_url = fleet
    root = tmp_path_factory.mktemp("fleet_holdout")
    split = load_split()
    for number, (image, label) in enumerate(zip(split.test_images, split.test_labels, strict=True)):
        (root / "png" / str(label)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[..., 0], "L").save(root / "png" / str(label) / f"{number}.png")
    arrays = (split.test_images.transpose(0, 3, 1, 2) / 16.0).astype(np.float32)
    np.savez(root / "holdout.npz", image=arrays, label=split.test_labels)
    np.savez(root / "beyond.npz", image=arrays[:4], label=np.array([1, 2, 10, 3]))
    store = store_from_url(store_url)
    return {
        "png": add_dataset(store, root / "png", "holdout-png")[1],
        "npz": add_dataset(store, root / "holdout.npz", "holdout-npz")[1],
        "beyond": add_dataset(store, root / "beyond.npz", "beyond")[1],
    }


def test_the_agent_reads_the_data_set_from_the_shared_store(fleet, added) -> None:
    address, _store = fleet
    with RemoteClient(address) as client:
        for kind in ("png", "npz"):
            record = client.evaluate(
                EvaluationRequest(
                    model="digits_cnn",
                    batch_sizes=[64],
                    iterations=1,
                    warmup=1,
                    min_seconds=0.0,
                    dataset=f"holdout-{kind}",
                )
            )
            accuracy = record.accuracy
            assert accuracy is not None and record.agent["mode"] != "embedded"
            assert round(accuracy.top1, 4) == ZOO_TOP1 and accuracy.samples == 360
            assert (accuracy.dataset, accuracy.dataset_version, accuracy.dataset_sha256) == (
                f"holdout-{kind}",
                "1",
                added[kind],
            )
            assert record.results[0].samples == 360
            stored = client.get_evaluation(record.id)
            assert stored.accuracy == accuracy


def test_bad_data_sets_over_grpc(fleet, added) -> None:
    address, _store = fleet
    channel = grpc.insecure_channel(address)
    stub = evaluator_pb2_grpc.EvaluatorStub(channel)

    def status(**fields) -> tuple[grpc.StatusCode, str]:
        spec = evaluation_pb2.EvaluationSpec(batch_sizes=[8], iterations=1, warmup=0, **fields)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Evaluate(calls_pb2.EvaluateRequest(spec=spec), timeout=120))
        return caught.value.code(), caught.value.details()

    try:
        code, details = status(model="digits_cnn", dataset="beyond")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "data set 'beyond' has label 10: model 'digits_cnn' has 10 outputs" in details
        code, details = status(model="resnet18", dataset="holdout-npz")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "array 'image' has samples of shape [1, 8, 8]" in details
        assert "expects [3, 224, 224]" in details
        code, details = status(model="resnet18", dataset="holdout-png")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "has labels model 'resnet18' does not have: '0', '1'" in details
        code, details = status(model="digits_cnn", dataset="../../evaluations")
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "data set name '../../evaluations'" in details
        code, details = status(model="digits_cnn", dataset="absent")
        assert code == grpc.StatusCode.NOT_FOUND and "unknown data set 'absent'" in details
        code, details = status(model="digits_cnn", dataset="holdout-npz", inputs=["dataset"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "a data set is the input" in details
    finally:
        channel.close()


def test_the_cli_adds_to_and_evaluates_from_the_fleet(fleet, added, tmp_path: Path) -> None:
    """``mlms datasets add --store s3://...`` then ``mlms eval --server ... --dataset``."""
    from tests.test_cli import mlms

    address, store_url = fleet
    split = load_split()
    arrays = (split.test_images.transpose(0, 3, 1, 2) / 16.0).astype(np.float32)
    np.savez(tmp_path / "digits.npz", image=arrays, label=split.test_labels)
    added_line = mlms(
        "datasets",
        "add",
        str(tmp_path / "digits.npz"),
        "--name",
        "cli-digits",
        "--store",
        store_url,
    )
    assert added_line.returncode == 0, added_line.stderr
    assert "added data set cli-digits@1: 360 samples (arrays)" in added_line.stdout
    result = mlms(
        "eval",
        "-m",
        "digits_cnn",
        "--dataset",
        "cli-digits",
        "-b",
        "90",
        "-n",
        "1",
        "--server",
        address,
    )
    assert result.returncode == 0, result.stderr
    assert "accuracy on cli-digits@1: top-1 0.9806" in result.stdout
    assert "(360 samples, index sha256 " in result.stdout
