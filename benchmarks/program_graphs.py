"""A bound's layer graph read from a ``torch.export`` program (``.pt2``) against the one traced
from the zoo's architecture, side by side in one process: for each model, the program exported
once (dynamic batch axis), then rounds that build both graphs at one batch size in turn; the
median build time of each, and whether their layers (name, operator, configuration) and edges
are the same.

    .venv/bin/python benchmarks/program_graphs.py [--models resnet18,mobilenet_v2,densenet121]
        [--batch-size 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mlms.assets.architectures import architecture_of
from mlms.bounds.exported import program_graph
from mlms.bounds.graph import LayerGraph, layer_graph
from mlms.catalog.zoo import get_model


def _signature(graph: LayerGraph) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    layers = [(layer.name, layer.op, layer.config) for layer in graph.layers]
    edges = sorted((graph.layer(a).name, graph.layer(b).name) for a, b in graph.edges)
    return layers, edges


def compare(model: str, batch_size: int, rounds: int, folder: Path) -> dict[str, object]:
    manifest = get_model(model)
    network = architecture_of(manifest).eval()
    shape = tuple(manifest.inputs[0].shape)
    began = time.perf_counter()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(network, (torch.rand(2, *shape),), dynamic_shapes=({0: batch},))
    path = folder / f"{model}.pt2"
    torch.export.save(program, path)
    exported = time.perf_counter() - began
    seconds: dict[str, list[float]] = {"zoo": [], "program": []}
    graphs: dict[str, LayerGraph] = {}
    for _ in range(rounds):
        for source in seconds:
            began = time.perf_counter()
            if source == "zoo":
                graphs[source] = layer_graph(network, (batch_size, *shape), model)
            else:
                graphs[source] = program_graph(path, (batch_size, *shape), model)
            seconds[source].append(time.perf_counter() - began)
    return {
        "model": model,
        "layers": len(graphs["zoo"].layers),
        "configs": len(graphs["zoo"].configs()),
        "same layers and edges": _signature(graphs["zoo"]) == _signature(graphs["program"]),
        "export (s)": exported,
        "zoo graph (s)": statistics.median(seconds["zoo"]),
        "program graph (s)": statistics.median(seconds["program"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,densenet121")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="program-graphs-") as folder:
        rows = [
            compare(model, args.batch_size, args.rounds, Path(folder))
            for model in args.models.split(",")
        ]
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
