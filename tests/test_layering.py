"""The packages of mlms import each other without cycles (lazy imports inside functions count:
they are dependencies all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "mlms"


def folder_graph() -> nx.DiGraph:
    """Edges between mlms's sub-packages (``mlms/x.py`` modules count as package ``x``)."""
    graph = nx.DiGraph()
    for path in ROOT.rglob("*.py"):
        source = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if source == "protos":  # generated
            continue
        graph.add_node(source)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] == "mlms" and len(parts) > 1 and parts[1] != source:
                    graph.add_edge(source, parts[1])
    return graph


def test_predictors_hold_adapters_only():
    """No agent, server or wire code: the predictors sit under everything that runs them."""
    assert set(folder_graph().successors("predictors")) <= {"errors", "tracer", "zoo"}


def test_no_cycle_between_predictors_and_evaluation():
    graph = folder_graph()
    assert not nx.has_path(graph, "predictors", "evaluation")
