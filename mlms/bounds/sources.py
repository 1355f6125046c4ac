"""Where a bound reads a model's layers from: the zoo's torch architecture, or a user's
``torch.export`` program (``.pt2``, added to the store or read where it lies), whose graph gives
the layers and their shapes; any other model is refused in one line naming what is accepted.

The bound and its benchmarks' child process both build the graph here, from the same
``GraphSource``, so that a configuration the bound asks for is one the child finds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mlms.bounds.graph import LayerGraph, layer_graph
from mlms.config import mlms_home
from mlms.errors import InvalidArgument
from mlms.manifest import ModelManifest
from mlms.store.base import ObjectStore

ACCEPTED = "a zoo model (its torch architecture) or a torch.export program (.pt2)"


class GraphSource(BaseModel):
    """A zoo model by name, or the local path of a ``torch.export`` program, and its input's
    dtype (token ids are integers)."""

    model_config = ConfigDict(frozen=True)

    model: str
    program: str | None = None
    dtype: str = "float32"


def graph_source(asked: str, manifest: ModelManifest, store: ObjectStore) -> GraphSource:
    """The source of ``manifest``'s layer graph (``asked``: the model as the user named it)."""
    dtype = manifest.inputs[0].dtype
    if manifest.origin == "zoo":
        return GraphSource(model=manifest.name, dtype=dtype)
    source = manifest.file_source
    if source is None or source.format != "torch_export":
        kind = f"file model ({source.format})" if source is not None else f"{manifest.origin} model"
        what = f"a {kind}"
        raise InvalidArgument(
            f"bound --model {asked}: a bound reads the layers of {ACCEPTED}; "
            f"model {manifest.name!r} is {what}"
        )
    from mlms.assets.manager import AssetManager

    asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, "torch")
    return GraphSource(model=manifest.name, program=str(asset.path), dtype=dtype)


def source_graph(
    source: GraphSource, input_shape: tuple[int, ...], device: str = "cpu"
) -> LayerGraph:
    """The layer graph for one input of ``input_shape`` on ``device``; its ``traced`` module
    runs the whole network. A zoo network on token ids is exported (``torch.export``) rather
    than traced with ``torch.fx``, whose symbolic ids a transformer's Python code cannot slice
    and index with."""
    from mlms.bounds.exported import program_graph

    if source.program is not None:
        return program_graph(Path(source.program), input_shape, source.model, source.dtype, device)
    from mlms.assets.architectures import architecture_of
    from mlms.catalog.resolve import resolve_model

    network = architecture_of(resolve_model(source.model)).eval()
    if source.dtype.startswith("float"):
        return layer_graph(network, input_shape, source.model)
    import torch

    batch = torch.export.Dim("batch", min=1, max=4096)
    ids = torch.zeros((2, *input_shape[1:]), dtype=getattr(torch, source.dtype))
    program = torch.export.export(network, (ids,), dynamic_shapes=({0: batch},))
    return program_graph(program, input_shape, source.model, source.dtype, device)


def example_input(source: GraphSource, input_shape: tuple[int, ...], device: str) -> Any:
    """An input the network runs on: random values, or zeros for ids (valid for any
    vocabulary)."""
    import torch

    dtype = getattr(torch, source.dtype)
    if dtype.is_floating_point:
        return torch.rand(input_shape, dtype=dtype, device=device)
    return torch.zeros(input_shape, dtype=dtype, device=device)
