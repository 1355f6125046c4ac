"""Every timm and torchvision architecture by name (docs/DESIGN.md, "Models by name"):
``timm:NAME`` and ``torchvision:NAME`` evaluate like zoo models, an unknown name is one line
with the closest names (CLI and gRPC), one mlms cannot feed is refused saying why, ``mlms
models --all`` lists over a thousand, and sweeps take them and the ``zoo``/``task:`` selectors.

The networks are timm's test models (160 pixels, under half a million parameters) and
torchvision's smallest classifier, a few iterations each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from mlms.catalog.library_models import library_manifest, refused_architectures
from mlms.catalog.resolve import resolve_model
from mlms.catalog.zoo import all_models
from mlms.client import EmbeddedClient
from mlms.errors import InvalidArgument, UnknownModel
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.sweep import SweepSpec
from mlms.protos.mlms.v2 import calls_pb2, evaluator_pb2, evaluator_pb2_grpc
from mlms.remote_client import RemoteClient
from mlms.server.process import Server, ServerConfig
from tests.processes import run_mlms

TIMM = "timm:test_resnet"
TORCHVISION = "torchvision:shufflenet_v2_x0_5"


def _request(model: str, **changes: object) -> EvaluationRequest:
    values = {
        "model": model,
        "batch_sizes": [1, 2],
        "iterations": 2,
        "warmup": 1,
        "min_seconds": 0.0,
        "trace_level": "framework",
    }
    return EvaluationRequest(**(values | changes))


def test_manifests_come_from_the_libraries_configs() -> None:
    import timm as timm_library
    import torchvision
    from timm.models import get_pretrained_cfg

    timm = resolve_model(TIMM)
    assert timm.task == "image_classification" and timm.inputs[0].shape == [3, 160, 160]
    config = get_pretrained_cfg("test_resnet")
    # timm's eval transform: the crop is crop_pct of the resized image.
    assert timm.inputs[0].preprocessing.resize == int(160 / config.crop_pct)
    assert timm.inputs[0].preprocessing.mean == list(config.mean)
    assert timm.sources[0].builder == "timm.test_resnet"
    assert timm.version == timm_library.__version__
    inception = resolve_model("torchvision:inception_v3")
    assert inception.inputs[0].shape == [3, 299, 299]
    assert inception.inputs[0].preprocessing.resize == 342
    assert inception.version == torchvision.__version__
    # ViT-H/14's default (SWAG) weights take 518 pixels; the network built without them 224.
    assert resolve_model("torchvision:vit_h_14").inputs[0].shape == [3, 224, 224]
    detector = resolve_model("torchvision:ssdlite320_mobilenet_v3_large")
    assert detector.task == "object_detection" and detector.inputs[0].shape == [3, 320, 320]
    zoo = {m.name: m for m in all_models()}["ssdlite320_mobilenet_v3"]
    assert detector.outputs == zoo.outputs and detector.sources == zoo.sources
    assert resolve_model("torchvision:fcn_resnet50").task == "semantic_segmentation"


def test_an_unknown_name_names_the_closest() -> None:
    with pytest.raises(UnknownModel) as caught:
        resolve_model("timm:resnet181")
    message = str(caught.value)
    assert "\n" not in message and "timm:resnet18," in message
    with pytest.raises(UnknownModel, match="closest: torchvision:resnet50"):
        resolve_model("torchvision:resnt50")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("torchvision:raft_small", "optical-flow"),
        ("torchvision:r3d_18", "video"),
        ("torchvision:quantized_resnet18", "float version is torchvision:resnet18"),
        ("timm:vit_base_patch16_sapiens2", "3x1024x768"),
    ],
)
def test_what_mlms_cannot_feed_is_refused_and_left_out(name: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why) as caught:
        library_manifest(name)
    assert "\n" not in str(caught.value)
    assert name in refused_architectures()
    listed = {m.name for m in EmbeddedClient().list_models(libraries=True)}
    assert name not in listed


def test_library_models_evaluate_like_zoo_ones(store) -> None:
    """Latency per batch size and the layers of the framework level, on the CPU."""
    client = EmbeddedClient(store)
    for name in (TIMM, TORCHVISION):
        record = client.evaluate(_request(name))
        assert record.model.name == name
        assert [r.batch_size for r in record.results] == [1, 2]
        assert all(r.latency_ms.p50 > 0 for r in record.results)
        layers = client.analyze([record.id], ["layer_types"])["layer_types"]
        assert "conv" in set(layers["kind"]), name


def test_every_trace_level_runs(store) -> None:
    record = EmbeddedClient(store).evaluate(_request(TIMM, batch_sizes=[1], trace_level="full"))
    assert record.trace_level == "full" and record.results[0].latency_ms.p50 > 0


def test_models_all_lists_over_a_thousand_and_models_alone_none(mlms_home: Path) -> None:
    listed = run_mlms(mlms_home, "models", "--all")
    assert listed.returncode == 0, listed.stderr
    count = listed.stdout.strip().splitlines()[-1]
    total = int(count.split(" models:")[0].replace(",", ""))
    assert total >= 1000, count
    assert f"{TIMM} " in listed.stdout and f"{TORCHVISION} " in listed.stdout
    assert "torchvision:raft_small" not in listed.stdout
    plain = run_mlms(mlms_home, "models")
    assert plain.returncode == 0 and "timm:" not in plain.stdout


def test_the_cli_says_an_unknown_name_in_one_line(mlms_home: Path) -> None:
    result = run_mlms(mlms_home, "eval", "--model", "timm:resnet181", "-n", "1")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlms: error: unknown model 'timm:resnet181'")
    assert "closest: timm:resnet18," in lines[0]


def test_sweep_selectors_and_library_names(store) -> None:
    from mlms.cli.sweep import select_models

    client = EmbeddedClient(store)
    zoo = all_models()
    detectors = select_models("task:object_detection", client)
    assert detectors == [m.name for m in zoo if m.task == "object_detection"] and detectors
    everything = select_models(f"{TIMM},zoo,resnet18", client)
    assert everything == [TIMM, *(m.name for m in zoo)]
    with pytest.raises(InvalidArgument, match="unknown task 'detection'"):
        select_models("task:detection", client)
    spec = SweepSpec(
        models=[TIMM], frameworks=["torch"], batch_sizes=[1], hw=["cpu"], iterations=1,
        warmup=0, min_seconds=0.0,
    )  # fmt: skip
    final = client.sweep(spec, None, lambda _state: None)
    assert [(c.model, c.state) for c in final.cells] == [(TIMM, "completed")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("library_server")
    started = Server(ServerConfig(store=str(folder))).start()
    try:
        yield started
    finally:
        started.stop(0)


def test_over_grpc_a_bad_name_is_not_found_or_invalid_never_internal(server: Server) -> None:
    address = f"127.0.0.1:{server.port}"
    with grpc.insecure_channel(address) as channel:
        stub = evaluator_pb2_grpc.EvaluatorStub(channel)
        asked = [
            (evaluator_pb2.ListModelsRequest(names=["timm:resnet181"]), stub.ListModels),
            (evaluator_pb2.ListModelsRequest(names=["torchvision:raft_small"]), stub.ListModels),
        ]
        for request, method in asked:
            with pytest.raises(grpc.RpcError) as caught:
                method(request, timeout=120)
            assert caught.value.code() in (
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.INVALID_ARGUMENT,
            )
            assert "\n" not in caught.value.details()
        evaluate = calls_pb2.EvaluateRequest()
        evaluate.spec.model = "timm:resnet181"
        evaluate.spec.batch_sizes.append(1)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Evaluate(evaluate, timeout=120))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert "closest: timm:resnet18," in caught.value.details()
    with RemoteClient(address) as client:
        assert client.model(TIMM).inputs[0].shape == [3, 160, 160]
        with pytest.raises(UnknownModel, match="closest: timm:resnet18,"):
            client.model("timm:resnet181")
        assert len(client.list_models(libraries=True)) >= 1000
        assert not any(":" in m.name for m in client.list_models())
