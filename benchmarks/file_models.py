"""A model from its file against the same model from the zoo, and the upload of a model file.

1. File vs zoo: resnet18's zoo weights (the torch asset: a state dict loaded into torchvision's
   network) saved as a ``torch.export`` program (.pt2) and added with ``mlms models add``'s code
   path (``EmbeddedClient.add_model``). Both are evaluated by the product's runner in one
   process, in rounds that alternate zoo and file; the logits of one batch of both predictors
   must agree (rtol 1e-4) and the ratio of the medians of the records' model-level p50 is what
   loading from a file costs what it measures (target within 3 %).
2. Upload: an ONNX model of --upload-mb MB (one MatMul over a seeded weight) added through an
   in-process ``mlms server`` on loopback (``RemoteClient.add_model``: the client hashes, the
   server checks size and sha256, reads the graph and stores it); MB/s over the whole call
   (target >= 50 MB/s).

    .venv/bin/python benchmarks/file_models.py [--model resnet18] [--rounds 5]
        [--iterations 20] [--upload-mb 100] [--only file|upload]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def file_vs_zoo(model: str, rounds: int, iterations: int, home: Path) -> None:
    import torch

    from mlms.assets.file_models import ModelOptions
    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.client import EmbeddedClient
    from mlms.evaluation.record import EvaluationRequest
    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.registry import predictor_class
    from mlms.store.local import LocalStore

    store = LocalStore(home / "store")
    client = EmbeddedClient(store)
    zoo = get_model(model)
    assets = AssetManager(store, home / "cache")
    module = assets.canonical_module(zoo).eval()
    example = torch.zeros(2, *zoo.inputs[0].shape)
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
    path = home / f"{model}.pt2"
    torch.export.save(program, path)
    added = client.add_model(path, ModelOptions(name=f"{model}_file"))

    rows = np.random.default_rng(0).standard_normal((4, *zoo.inputs[0].shape)).astype("float32")
    logits = []
    for manifest in (zoo, added):
        asset = assets.ensure(manifest, "torch")
        with predictor_class("torch")(manifest, asset.path, PredictorOptions()) as predictor:
            logits.append(predictor.predict(rows))
    np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-5)
    print(f"logits: file and zoo agree (rtol 1e-4), max |diff| "
          f"{float(np.abs(logits[1] - logits[0]).max()):.2e}")  # fmt: skip

    p50 = {"zoo": [], "file": []}
    for number in range(rounds):
        for side, name in (("zoo", model), ("file", added.name)):
            request = EvaluationRequest(
                model=name, framework="torch", iterations=iterations, warmup=3, min_seconds=0
            )
            record = client.evaluate(request)
            p50[side].append(record.results[0].latency_ms.p50)
        print(f"round {number + 1}: zoo {p50['zoo'][-1]:.3f} ms, file {p50['file'][-1]:.3f} ms")
    ratio = statistics.median(p50["file"]) / statistics.median(p50["zoo"])
    print(f"p50 file / zoo (median of {rounds} interleaved rounds): {ratio:.3f} "
          f"(target within 3 %: {'met' if abs(ratio - 1) <= 0.03 else 'NOT met'})")  # fmt: skip


def upload(megabytes: int, home: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlms.assets.file_models import ModelOptions
    from mlms.registry.memory import MemoryRegistry
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    side = int((megabytes * 1e6 / 4) ** 0.5)
    weight = np.random.default_rng(0).standard_normal((side, side)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"])],
        "big",
        # A one-row "image", so that it registers as an image classifier.
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 1, side])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, 1, side])],
        [numpy_helper.from_array(weight, "w")],
    )
    path = home / "big.onnx"
    onnx.save(helper.make_model(graph), path)
    size = path.stat().st_size
    server = Server(ServerConfig(store=str(home / "server-store")), registry=MemoryRegistry())
    server.start()
    try:
        with RemoteClient(f"127.0.0.1:{server.port}") as client:
            seconds = []
            for _ in range(3):
                start = time.perf_counter()
                client.add_model(path, ModelOptions(name="big"), replace=True)
                seconds.append(time.perf_counter() - start)
    finally:
        server.stop()
    best = statistics.median(seconds)
    rate = size / 1e6 / best
    print(f"upload of {size / 1e6:.1f} MB through the server on loopback: {rate:.1f} MB/s "
          f"(median of 3: {best:.2f} s; target >= 50 MB/s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--upload-mb", type=int, default=100)
    parser.add_argument("--only", choices=["file", "upload"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["MLMS_HOME"] = str(home / "home")
        if args.only in (None, "file"):
            file_vs_zoo(args.model, args.rounds, args.iterations, home)
        if args.only in (None, "upload"):
            upload(args.upload_mb, home)


if __name__ == "__main__":
    main()
