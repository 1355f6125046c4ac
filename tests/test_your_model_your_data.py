"""A user's model on a user's data, end to end: digits_cnn's trained weights saved as ONNX, a
``torch.export`` program and a Keras file, each added with ``models add``'s code path, evaluated
on the digits hold-out added as a PNG folder (8-bit grayscale, values 0..16, lossless) and as
``.npz``. Every pair gives the zoo model's top-1 on its built-in split, embedded and through a
loopback fleet with a real etcd, S3 over HTTP (moto's server), a server and one agent per
framework. Nothing is faked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlms.assets.digits import load_split
from mlms.assets.file_models import ModelOptions, parse_preprocess
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.client import EmbeddedClient
from mlms.datasets.ingest import add_dataset
from mlms.evaluation.record import EvaluationRequest
from mlms.remote_client import RemoteClient
from mlms.store.factory import store_from_url
from mlms.store.local import LocalStore
from tests.loopback_fleet import running_fleet

#: digits_cnn's top-1 on its held-out split (mlms/catalog/models/digits_cnn.yaml, seed 0).
ZOO_TOP1 = 0.9806
FORMATS = {"onnx": "onnxruntime", "pt2": "torch", "keras": "tensorflow"}
DATASETS = ("png", "npz")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, store, mlms_home: Path) -> dict[str, Path]:
    """digits_cnn's trained weights as ONNX, .pt2 and .keras (the zoo's own ONNX and TensorFlow
    assets, exported by the asset builder from the same torch weights; the session store's, read
    only)."""
    import torch

    folder = tmp_path_factory.mktemp("digits_artifacts")
    assets = AssetManager(store, mlms_home / "cache")
    manifest = get_model("digits_cnn")
    module = assets.canonical_module(manifest)
    example = torch.zeros(2, 1, 8, 8)
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, folder / "digits.pt2")
    return {
        "onnx": assets.ensure(manifest, "onnxruntime").path,
        "pt2": folder / "digits.pt2",
        "keras": assets.ensure(manifest, "tensorflow").path,
    }


@pytest.fixture(scope="module")
def holdout(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("digits_holdout")
    split = load_split()
    for number, (image, label) in enumerate(zip(split.test_images, split.test_labels, strict=True)):
        (root / "png" / str(label)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[..., 0], "L").save(root / "png" / str(label) / f"{number}.png")
    arrays = (split.test_images.transpose(0, 3, 1, 2) / 16.0).astype(np.float32)
    np.savez(root / "holdout.npz", image=arrays, label=split.test_labels)
    return {"png": root / "png", "npz": root / "holdout.npz"}


def _options(kind: str) -> ModelOptions:
    return ModelOptions(
        name=f"digits-{kind}",
        labels=[str(digit) for digit in range(10)],
        preprocess=parse_preprocess(["color=L", "resize=8", "crop=8", "scale=16"]),
    )


def _request(kind: str, dataset: str) -> EvaluationRequest:
    return EvaluationRequest(
        model=f"digits-{kind}",
        batch_sizes=[64],
        iterations=1,
        warmup=1,
        min_seconds=0.0,
        dataset=f"holdout-{dataset}",
    )


def _check(record, kind: str, dataset: str) -> None:
    accuracy = record.accuracy
    assert accuracy is not None, (kind, dataset)
    assert record.framework.name == FORMATS[kind]
    assert record.model.origin == "user"
    assert (round(accuracy.top1, 4), accuracy.samples) == (ZOO_TOP1, 360), (kind, dataset)
    assert accuracy.dataset == f"holdout-{dataset}"


def test_embedded(artifacts, holdout, tmp_path) -> None:
    client = EmbeddedClient(LocalStore(tmp_path / "store"))
    for kind, path in artifacts.items():
        manifest = client.add_model(path, _options(kind))
        assert manifest.framework_names == [FORMATS[kind]]
    for dataset, path in holdout.items():
        add_dataset(client.store, path, f"holdout-{dataset}")
    for kind in artifacts:
        for dataset in DATASETS:
            _check(client.evaluate(_request(kind, dataset)), kind, dataset)


@pytest.fixture(scope="module")
def fleet(etcd, s3, tmp_path_factory) -> Iterator[str]:
    """A server and one agent per framework of FORMATS on loopback, sharing etcd and S3."""
    root = tmp_path_factory.mktemp("your_model_fleet")
    with running_fleet(etcd, s3, root, list(FORMATS.values()), timeout=180) as fleet:
        yield fleet.address


def test_through_a_loopback_fleet(artifacts, holdout, fleet, s3) -> None:
    """Models uploaded through the server (AddModel), data sets added to the fleet's S3 store;
    each agent fetches both from the store."""
    store = store_from_url(s3.url)
    for dataset, path in holdout.items():
        add_dataset(store, path, f"holdout-{dataset}", replace=True)
    with RemoteClient(fleet) as client:
        for kind, path in artifacts.items():
            client.add_model(path, _options(kind), replace=True)
        for kind in artifacts:
            for dataset in DATASETS:
                record = client.evaluate(_request(kind, dataset))
                assert record.agent["mode"] != "embedded"
                _check(record, kind, dataset)
