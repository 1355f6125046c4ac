"""A user's model files: the zoo's digits_cnn saved as ONNX, a torch.export program and
TorchScript, and a tiny seeded BERT saved with save_pretrained; added to a store and evaluated
by name (embedded, and uploaded through a loopback server with an agent), or evaluated where
they lie; every bad input refused in one line with nothing stored. All real: the frameworks,
a server and agent on loopback over gRPC; the Keras path runs in tests/test_tensorflow.py's
way (its own process) and is exercised by the CLI transcript in the README."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from mlms import errors
from mlms.assets.digits import load_split
from mlms.assets.file_models import ModelOptions, parse_input_shape
from mlms.assets.formats import file_sha256
from mlms.assets.manager import AssetManager
from mlms.assets.transformers_import import import_transformers
from mlms.catalog.resolve import resolve_model
from mlms.catalog.zoo import get_model
from mlms.client import EmbeddedClient
from mlms.evaluation.record import EvaluationRequest
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class
from mlms.protos.mlms.v2 import evaluator_pb2, evaluator_pb2_grpc
from mlms.store.local import LocalStore

DIGITS = ["color=L", "resize=8", "crop=8", "scale=16"]


def _digits_options(name: str, **extra) -> ModelOptions:
    from mlms.assets.file_models import parse_preprocess

    return ModelOptions(name=name, preprocess=parse_preprocess(DIGITS), **extra)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, store) -> dict[str, Path]:
    """digits_cnn's trained torch weights from the session's store, saved in each torch
    format, and the zoo's own ONNX asset (exported by the asset builder from those weights;
    read only)."""
    import torch

    folder = tmp_path_factory.mktemp("artifacts")
    manifest = get_model("digits_cnn")
    assets = AssetManager(store, folder / "cache")
    module = assets.canonical_module(manifest)
    example = torch.zeros(2, 1, 8, 8)
    batch = torch.export.Dim("batch", min=1, max=4096)
    torch.export.save(
        torch.export.export(module, (example,), dynamic_shapes=({0: batch},)),
        folder / "digits.pt2",
    )
    with pytest.warns(FutureWarning):
        torch.jit.save(torch.jit.trace(module, example), folder / "digits.pt")
    torch.save(module.state_dict(), folder / "weights.pt")
    return {
        "onnx": assets.ensure(manifest, "onnxruntime").path,
        "pt2": folder / "digits.pt2",
        "torchscript": folder / "digits.pt",
        "state_dict": folder / "weights.pt",
        "zoo_store": store.root,
    }


@pytest.fixture
def client(tmp_path, monkeypatch) -> EmbeddedClient:
    monkeypatch.setenv("MLMS_HOME", str(tmp_path / "home"))
    return EmbeddedClient(LocalStore(tmp_path / "store"))


def _logits(manifest, store, framework: str) -> np.ndarray:
    asset = AssetManager(store, store.root / "cache").ensure(manifest, framework)
    images = list(load_split().test_images[:32])
    with predictor_class(framework)(manifest, asset.path, PredictorOptions()) as predictor:
        return predictor.predict(predictor.preprocess(images))


@pytest.mark.parametrize(
    ("kind", "framework", "shapes"),
    [
        ("onnx", "onnxruntime", []),
        ("pt2", "torch", []),
        ("torchscript", "torch", ["input=1x1x8x8"]),
    ],
)
def test_a_format_added_by_name_gives_the_zoo_logits(
    artifacts, client, kind, framework, shapes
) -> None:
    options = _digits_options(f"digits_{kind}", input_shapes=[parse_input_shape(s) for s in shapes])
    manifest = client.add_model(artifacts[kind], options)
    assert manifest.origin == "user"
    assert manifest.framework_names[0] == framework
    assert manifest.inputs[0].shape == [1, 8, 8]
    assert manifest.file_source.sha256 == file_sha256(artifacts[kind])
    assert resolve_model(f"digits_{kind}", client.store) == manifest
    assert f"digits_{kind}" in [m.name for m in client.list_models()]

    zoo = _logits(get_model("digits_cnn"), LocalStore(artifacts["zoo_store"]), "torch")
    mine = _logits(manifest, client.store, framework)
    np.testing.assert_allclose(mine, zoo, rtol=1e-4, atol=1e-4)

    record = client.evaluate(
        EvaluationRequest(
            model=f"digits_{kind}", iterations=3, warmup=1, min_seconds=0, trace_level="framework"
        )
    )
    assert record.model.origin == "user"
    assert record.asset_sha256 == manifest.file_source.sha256
    assert record.framework.name == framework
    assert record.results[0].levels["framework"].spans > 0  # layer spans, as for zoo models


def test_a_file_is_evaluated_where_it_lies(artifacts, client) -> None:
    record = client.evaluate(
        EvaluationRequest(model=str(artifacts["onnx"]), iterations=2, warmup=1, min_seconds=0)
    )
    assert record.model.origin == "file"
    assert record.model.source == str(artifacts["onnx"])
    assert record.asset_sha256 == file_sha256(artifacts["onnx"])
    assert not client.store.list("manifests/")  # evaluating a file adds nothing


def tiny_bert(folder: Path) -> object:
    """A tiny seeded BERT classifier, saved with save_pretrained into ``folder``."""
    import torch

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64, num_labels=3,
        id2label={0: "sad", 1: "calm", 2: "glad"}, label2id={"sad": 0, "calm": 1, "glad": 2},
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    return model


def test_a_hugging_face_folder(tmp_path, client) -> None:
    """A tiny seeded BERT classifier saved with save_pretrained, on torch and on ONNX Runtime
    (exported by torch.onnx), both giving transformers' own logits."""
    import torch

    folder = tmp_path / "tiny-bert"
    model = tiny_bert(folder)
    manifest = client.add_model(folder, ModelOptions(name="tiny_bert", seq_len=16))
    assert manifest.task == "text_classification"
    assert manifest.inputs[0].layout == "tokens" and manifest.inputs[0].shape == [16]
    assert manifest.inputs[0].vocab_size == 99
    assert manifest.outputs[0].labels == ["sad", "calm", "glad"]
    ids = np.random.default_rng(0).integers(0, 99, (4, 16), dtype=np.int64)
    with torch.inference_mode():
        expected = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    for framework in ("torch", "onnxruntime"):
        asset = AssetManager(client.store, tmp_path / "cache").ensure(manifest, framework)
        with predictor_class(framework)(manifest, asset.path, PredictorOptions()) as predictor:
            np.testing.assert_allclose(predictor.predict(ids), expected, rtol=1e-4, atol=1e-4)
    record = client.evaluate(
        EvaluationRequest(model="tiny_bert", iterations=2, warmup=1, min_seconds=0, seq_len=8)
    )
    assert record.results[0].latency_ms.p50 > 0


def test_bad_inputs_are_one_line_and_store_nothing(artifacts, client, tmp_path) -> None:
    onnx = artifacts["onnx"]
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(onnx.read_bytes()[: onnx.stat().st_size // 2])
    corrupt_pt2 = tmp_path / "corrupt.pt2"
    corrupt_pt2.write_bytes(b"PK\x03\x04 not really a zip")
    unknown = tmp_path / "model.bin"
    unknown.write_bytes(b"\0" * 64)
    cases = [
        (truncated, {}, errors.InvalidArgument, "cannot be read as onnx"),
        (corrupt_pt2, {}, errors.InvalidArgument, "not a readable zip archive"),
        (unknown, {}, errors.InvalidArgument, "unknown format '.bin'"),
        (artifacts["state_dict"], {}, errors.InvalidArgument, "torch.save archive"),
        (artifacts["torchscript"], {}, errors.InvalidArgument, "--input-shape"),
        (onnx, {"name": "a/b"}, errors.InvalidArgument, "no path separators"),
        (onnx, {"name": "resnet50"}, errors.AlreadyExists, "zoo model"),
        (
            onnx,
            {"input_shapes": [parse_input_shape("image=1x3x8x8")]},
            errors.InvalidArgument,
            "fixed at 1",
        ),
        (onnx, {"labels": ["a", "b"]}, errors.InvalidArgument, "10 output classes"),
    ]
    for path, fields, error, fragment in cases:
        options = ModelOptions(**{"name": "mine", **fields})
        with pytest.raises(error, match=fragment) as caught:
            client.add_model(path, options)
        assert "\n" not in str(caught.value)
        assert not client.store.list("")  # nothing stored half
    client.add_model(onnx, _digits_options("mine"))
    with pytest.raises(errors.AlreadyExists, match="--replace"):
        client.add_model(onnx, _digits_options("mine"))
    replaced = client.add_model(onnx, _digits_options("mine", task="image_classification"), True)
    assert replaced.name == "mine"
    assert client.remove_model("mine") == ["1"]
    assert not client.store.list("")
    with pytest.raises(errors.UnknownModel):
        client.remove_model("mine")


def test_the_cli_says_one_line(artifacts, tmp_path) -> None:
    env = {"MLMS_HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, "-m", "mlms", "models", "add", str(artifacts["state_dict"]),
         "--name", "w"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "torch.save archive" in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "mlms", "eval", "--model", str(artifacts["onnx"]),
         "--input-shape", "image=1x8x8"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "has 4 dimensions" in result.stderr and result.stderr.count("\n") == 1


def test_compare_sweep_and_loadgen_take_a_model_file(artifacts, tmp_path, monkeypatch) -> None:
    """The commands that take a model take its file too; compare names its chart by the file's
    stem (a path's separators made it unwritable); bound refuses a file in one line (its
    layer-by-layer rebuild needs the zoo's architecture)."""
    from click.testing import CliRunner

    from mlms.cli.main import cli
    from mlms.errors import InvalidArgument

    monkeypatch.setenv("MLMS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    onnx = str(artifacts["onnx"])
    quick = ["-n", "2", "--min-seconds", "0"]
    runner = CliRunner()
    compared = runner.invoke(cli, ["compare", "--model", onnx, "-f", "onnxruntime", *quick])
    assert compared.exit_code == 0, compared.output
    assert (tmp_path / "compare-model-cpu.png").is_file()
    swept = runner.invoke(cli, ["sweep", "--models", onnx, "-f", "onnxruntime", "-b", "1", *quick])
    assert swept.exit_code == 0 and "completed" in swept.output, swept.output
    loaded = runner.invoke(cli, ["loadgen", "--model", onnx, "--duration", "1"])
    assert loaded.exit_code == 0 and "mlms's own clock" in loaded.output, loaded.output
    bound = runner.invoke(cli, ["bound", "--model", onnx])
    assert isinstance(bound.exception, InvalidArgument)
    assert "a bound reads the layers of a zoo model" in str(bound.exception)
    assert "is a file model (onnx)" in str(bound.exception)


@pytest.fixture
def loopback_fleet(tmp_path, monkeypatch) -> Iterator[tuple[str, LocalStore]]:
    """A server and a torch agent on loopback sharing an in-memory registry and a folder
    store; the server takes uploads up to 4 MB."""
    from mlms.agent.process import Agent, AgentConfig
    from mlms.registry.memory import MemoryRegistry
    from mlms.server.process import Server, ServerConfig

    monkeypatch.setenv("MLMS_HOME", str(tmp_path / "home"))
    store_folder = str(tmp_path / "store")
    registry = MemoryRegistry()
    agent = Agent(AgentConfig(framework="torch", store=store_folder), registry=registry).start()
    server = Server(
        ServerConfig(store=store_folder, max_upload_bytes=4_000_000), registry=registry
    ).start()
    try:
        yield f"127.0.0.1:{server.port}", LocalStore(Path(store_folder))
    finally:
        server.stop()
        agent.stop()


def test_upload_through_the_server_then_evaluate_on_an_agent(artifacts, loopback_fleet) -> None:
    from mlms.remote_client import RemoteClient

    address, store = loopback_fleet
    with RemoteClient(address) as client:
        manifest = client.add_model(artifacts["pt2"], _digits_options("uploaded"))
        assert manifest.file_source.sha256 == file_sha256(artifacts["pt2"])
        assert manifest.attributes["source"] == "digits.pt2"  # never a path on the server
        assert "uploaded" in [m.name for m in client.list_models()]
        # The agent started before the model was added: it finds it in the store on demand.
        record = client.evaluate(
            EvaluationRequest(model="uploaded", iterations=2, warmup=1, min_seconds=0)
        )
        assert record.asset_sha256 == manifest.file_source.sha256
        assert record.agent.get("agent_id")
        with pytest.raises(errors.AlreadyExists, match="--replace"):
            client.add_model(artifacts["pt2"], _digits_options("uploaded"))
        with pytest.raises(errors.InvalidArgument, match="which a server cannot"):
            client.evaluate(EvaluationRequest(model=str(artifacts["onnx"])))
        assert client.remove_model("uploaded") == ["1"]

    stub = evaluator_pb2_grpc.EvaluatorStub(grpc.insecure_channel(address))
    data = artifacts["onnx"].read_bytes()

    def upload(size: int, sha256: str, body: bytes) -> grpc.RpcError:
        header = evaluator_pb2.ModelUploadHeader(
            name="raw", filename="model.onnx", size=size, sha256=sha256,
            preprocess={"color": "L", "scale": "16", "resize": "8"},
        )  # fmt: skip
        parts = [evaluator_pb2.ModelUpload(header=header), evaluator_pb2.ModelUpload(chunk=body)]
        with pytest.raises(grpc.RpcError) as caught:
            stub.AddModel(iter(parts), timeout=60)
        return caught.value

    failure = upload(len(data), "0" * 64, data)
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sha256 mismatch" in failure.details()
    failure = upload(5_000_000, "0" * 64, data)
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "limit of 4,000,000 bytes" in failure.details()
    assert not store.list("manifests/") and not store.list("models/raw")


class _Hub:
    """A local HTTP server standing in for the Hugging Face Hub: the calls
    ``huggingface_hub.snapshot_download`` makes (a revision, its file list: in the revision's
    answer before huggingface_hub 1, from the tree since; then each file by commit), served
    from one folder."""

    def __init__(self, repo: str, folder: Path) -> None:
        import hashlib
        import http.server
        import threading

        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        commit = hashlib.sha1(b"".join(files[n] for n in sorted(files))).hexdigest()
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, body: bytes | None) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                info = f"/api/models/{repo}/revision/"
                tree = f"/api/models/{repo}/tree/"
                prefix = f"/{repo}/resolve/"
                if body is None and self.path.startswith(info):
                    import json

                    listing = {"id": repo, "sha": commit,
                               "siblings": [{"rfilename": n} for n in sorted(files)]}  # fmt: skip
                    return self._send(200, json.dumps(listing).encode(), {})
                if body is None and self.path.startswith(tree):  # huggingface_hub 1's listing
                    import json

                    entries = [
                        {"type": "file", "path": n, "size": len(data),
                         "oid": hashlib.sha1(data).hexdigest()}
                        for n, data in sorted(files.items())
                    ]  # fmt: skip
                    return self._send(200, json.dumps(entries).encode(), {})
                if self.path.startswith(prefix):
                    _rev, _, name = self.path[len(prefix) :].partition("/")
                    if name in files:
                        data = files[name]
                        headers = {"X-Repo-Commit": commit,
                                   "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}  # fmt: skip
                        return self._send(200, data, headers)
                self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(None)

            def do_HEAD(self) -> None:
                self._answer(b"")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_hub_id_is_fetched_once_and_then_offline(tmp_path, client, monkeypatch) -> None:
    folder = tmp_path / "tiny-bert"
    tiny_bert(folder)
    hub = _Hub("acme/tiny-bert", folder)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        manifest = resolve_model("hf:acme/tiny-bert@main", client.store)
        assert manifest.origin == "hub" and manifest.outputs[0].labels == ["sad", "calm", "glad"]
        assert any("/resolve/" in r for r in hub.requests)  # the files came from the server
        with pytest.raises(errors.UnknownModel, match="no such repository"):
            resolve_model("hf:acme/missing", client.store)
    finally:
        hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    record = client.evaluate(
        EvaluationRequest(
            model="hf:acme/tiny-bert@main", iterations=2, warmup=1, min_seconds=0, seq_len=8
        )
    )
    assert record.model.origin == "hub" and record.model.source == "hf:acme/tiny-bert@main"
    assert (Path(client.store.root).parent / "home" / "hub").is_dir()  # under $MLMS_HOME
    with pytest.raises(errors.Unavailable, match="HF_HUB_OFFLINE"):
        resolve_model("hf:acme/other", client.store)
    with pytest.raises(errors.InvalidArgument, match="hf:ORG/NAME"):
        resolve_model("hf:../etc", client.store)


def write_keras_models(folder: Path) -> None:
    """A small seeded Keras CNN (channels last), saved as .keras and exported as a SavedModel.
    Runs in a process of its own: TensorFlow must not load in the test process."""
    from mlms.assets.keras_models import import_tensorflow

    import_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1), name="pixels"),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.save(folder / "small.keras")
    model.export(folder / "small_saved_model", verbose=False)


def test_keras_and_saved_model(tmp_path, client) -> None:
    """Both TensorFlow formats, added and evaluated in the embedded client's TensorFlow child:
    the same weights give the same predictions, and Keras layers give layer spans."""
    from mlms.isolation import call_in_own_process

    call_in_own_process(write_keras_models, tmp_path, what="the Keras model writer")
    records = {}
    for name, path in (("small_keras", "small.keras"), ("small_sm", "small_saved_model")):
        manifest = client.add_model(
            tmp_path / path, ModelOptions(name=name, preprocess={"scale": "16"})
        )
        assert manifest.framework_names == ["tensorflow"]
        assert manifest.inputs[0].shape == [8, 8, 1] and manifest.inputs[0].layout == "HWC"
        request = EvaluationRequest(
            model=name, iterations=2, warmup=1, min_seconds=0, trace_level="framework"
        )
        records[name] = client.evaluate(request)
        assert records[name].asset_sha256 == manifest.file_source.sha256
    assert records["small_keras"].predictions.top5 == records["small_sm"].predictions.top5
    assert records["small_keras"].results[0].levels["framework"].spans > 0
