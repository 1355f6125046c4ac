"""``mlms bound`` of a ``torch.export`` program (``.pt2``) on the CPU: the program's graph gives
the layers and shapes the zoo's architecture gives (same names, configurations and edges, so the
perfdb serves both), a bound of a program runs end to end, and any other format is refused in
one line naming what is accepted, on the command line and over gRPC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlms.assets.architectures import architecture
from mlms.assets.file_models import ModelOptions
from mlms.assets.model_store import add_model
from mlms.bounds.exported import program_graph
from mlms.bounds.graph import LayerGraph, layer_graph
from mlms.bounds.perfdb import PerfDB
from mlms.bounds.record import BoundRequest
from mlms.bounds.run import bound
from mlms.bounds.sources import GraphSource, source_graph
from mlms.errors import InvalidArgument
from mlms.manifest import InputShape
from mlms.store.local import LocalStore
from tests.test_cli import _one_line_error, mlms
from tests.test_split_front_ends import server  # noqa: F401  (an mlms server and a torch agent)


def _exported(name: str, folder: Path, shape: tuple[int, ...], dynamic: bool = True) -> Path:
    """The zoo's ``name`` exported with torch.export, its batch axis dynamic or not."""
    network = architecture(name).eval()
    axes = ({0: torch.export.Dim("batch", min=1, max=1024)},) if dynamic else None
    program = torch.export.export(network, (torch.rand(shape),), dynamic_shapes=axes)
    path = folder / f"{name}.pt2"
    torch.export.save(program, path)
    return path


def _layers(graph: LayerGraph) -> list[tuple[str, str, str, str]]:
    return [(layer.name, layer.kind, layer.op, layer.config) for layer in graph.layers]


def _edges(graph: LayerGraph) -> list[tuple[str, str]]:
    return sorted((graph.layer(a).name, graph.layer(b).name) for a, b in graph.edges)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "densenet121"])
def test_a_program_gives_the_layer_configurations_of_the_zoo_architecture(name, tmp_path):
    """Residual adds, a module called twice (resnet's ReLU), depthwise convolutions, ReLU6, a
    functional pooling, dense blocks' concatenations and an in-place functional ReLU: each
    layer of the program is the zoo's, at a batch size other than the one it was exported at."""
    path = _exported(name, tmp_path, (2, 3, 224, 224))
    program = program_graph(path, (4, 3, 224, 224), name)
    zoo = layer_graph(architecture(name).eval(), (4, 3, 224, 224), name)
    assert _layers(program) == _layers(zoo)
    assert _edges(program) == _edges(zoo)
    assert program.configs().keys() == zoo.configs().keys()
    convolutions = [layer for layer in program.layers if layer.kind == "conv"]
    assert convolutions and all(layer.op == "Conv2d" for layer in convolutions)


def test_a_program_with_a_fixed_batch_refuses_another_in_one_line(tmp_path):
    path = _exported("resnet18", tmp_path, (1, 3, 224, 224), dynamic=False)
    assert len(program_graph(path, (1, 3, 224, 224)).layers) == 69
    with pytest.raises(InvalidArgument) as refused:
        program_graph(path, (8, 3, 224, 224), "mine")
    message = str(refused.value)
    assert "\n" not in message and "[8, 3, 224, 224]" in message
    assert "torch.export.Dim" in message


def test_a_bound_of_a_program_leaves_the_zoo_models_layer_benchmarks(tmp_path):
    """digits_cnn as a program, bounded end to end (benchmarks, measured evaluation, record):
    its benchmarks are the zoo's digits_cnn's, found in the perfdb under the zoo graph's keys,
    and each of its layers is matched to what the measured run timed.
    A store of its own: another test's bound of digits_cnn would leave nothing to benchmark."""
    store = LocalStore(tmp_path / "store")
    path = _exported("digits_cnn", tmp_path, (2, 1, 8, 8))
    request = BoundRequest(model=str(path), repeats=3, iterations=3, min_seconds=0)
    record = bound(request, store=store)
    batch = record.batches[0]
    assert record.benchmarked > 0 and batch.sequential_ms > 0 and batch.measured_ms > 0
    assert store.exists(f"bounds/{record.id}.json")
    perfdb = PerfDB(store, record.device_name, record.libraries, record.precisions, 3)
    zoo = layer_graph(architecture("digits_cnn").eval(), (1, 1, 8, 8), "digits_cnn")
    assert [(r.name, r.config) for r in batch.layers] == [
        (layer.name, layer.config) for layer in zoo.layers
    ]
    assert all(perfdb.get(key) is not None for key in zoo.configs())
    # The measured run's layers are the program's modules by the classes it recorded (an
    # unflattened module is an InterpreterModule), so each layer meets its measurement.
    assert all(layer.measured_ms is not None for layer in batch.layers)
    again = bound(request, store=store)
    assert again.benchmarked == 0 and again.cached == record.benchmarked


def _torchscript(folder: Path, store) -> str:
    """digits_cnn as TorchScript, added to the store as ``digits_script``."""
    path = folder / "digits.pt"
    network = architecture("digits_cnn").eval()
    torch.jit.save(torch.jit.trace(network, torch.rand(1, 1, 8, 8)), path)
    shape = InputShape(name="input", shape=[1, 1, 8, 8])
    options = ModelOptions(name="digits_script", input_shapes=[shape])
    return add_model(store, path, options, replace=True).name


def test_mlms_bound_refuses_another_format_in_one_line(store, tmp_path):
    _one_line_error(
        mlms("bound", "--model", _torchscript(tmp_path, store)),
        "a zoo model (its torch architecture) or a torch.export program (.pt2)",
        "'digits_script' is a file model (torchscript)",
    )


def test_over_grpc_another_format_is_an_invalid_argument(server, store, tmp_path):  # noqa: F811
    from mlms.remote_client import RemoteClient

    name = _torchscript(tmp_path, store)
    with RemoteClient(server) as client, pytest.raises(InvalidArgument) as refused:
        client.bound(BoundRequest(model=name, repeats=3, iterations=1))
    message = str(refused.value)
    assert "\n" not in message and "torch.export program (.pt2)" in message
    assert "'digits_script' is a file model (torchscript)" in message


def test_a_zoo_network_on_token_ids_is_read_from_its_export():
    """torch.fx cannot trace a transformer on symbolic ids: the zoo's llama_mini is exported
    instead, and its layers (integer ids in, attention, matrix products) run alone."""
    source = GraphSource(model="llama_mini", dtype="int64")
    graph = source_graph(source, (2, 128))
    kinds = {layer.kind for layer in graph.layers}
    assert {"embedding", "attention", "gemm"} <= kinds
    assert graph.layers[0].output_shape[0] == 2
    for kind in ("embedding", "attention"):
        layer = next(layer for layer in graph.layers if layer.kind == kind)
        call = graph.isolate(layer, "cpu")
        call.prime()
        assert tuple(call.run().shape) == layer.output_shape


def test_a_network_on_ids_read_for_another_device_makes_its_tensors_there():
    """An export keeps the device it ran on: llama_mini's ``arange(..., device=cpu)`` and its
    ``to(cpu)``. Read for another device (``meta`` stands in for a GPU, which this machine
    lacks), the program moves there as a whole, so each layer runs alone on that device; and
    its layer configurations are the CPU's, so the perfdb's entries serve both."""
    source = GraphSource(model="llama_mini", dtype="int64")
    on_cpu, elsewhere = source_graph(source, (2, 16)), source_graph(source, (2, 16), "meta")
    assert _places(on_cpu) == {"cpu"} and _places(elsewhere) == {"meta"}
    tensors = [*elsewhere.traced.parameters(), *elsewhere.traced.buffers()]
    assert tensors and {t.device.type for t in tensors} == {"meta"}
    assert on_cpu.configs().keys() == elsewhere.configs().keys()


def _places(graph: LayerGraph) -> set[str]:
    """The devices a graph's operators name among their arguments."""
    arguments = (a for n in graph.traced.graph.nodes for a in (*n.args, *n.kwargs.values()))
    return {str(a) for a in arguments if isinstance(a, torch.device) or a in ("cpu", "meta")}
