"""The modules and folders of mlms import each other without cycles, and folders only import
folders below them in the layer order of docs/DESIGN.md, "Layer order". Every import counts:
those inside functions and under ``TYPE_CHECKING`` are dependencies all the same."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "mlms"
DESIGN = REPO / "docs" / "DESIGN.md"  # docs/DESIGN.md, "Layer order"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, generated code left out."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[:2] != ("mlms", "protos"):
            found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load (``from a import b``: ``a.b`` and ``a``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: counted from this module's package
        package = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join([*package, *([base] if base else [])])
    return [f"{base}.{alias.name}" for alias in node.names]


def module_graph() -> nx.DiGraph:
    """Edges between mlms's modules (a package's ``__init__`` is the package)."""
    modules = _modules()
    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, module, is_package):
                while name and name not in modules:  # a name inside a module: the module
                    name = name.rpartition(".")[0]
                if name.startswith("mlms") and name != module:
                    graph.add_edge(module, name, line=node.lineno)
    return graph


def folder_of(module: str) -> str:
    """``mlms.x.y`` and ``mlms/x.py`` belong to ``x``; ``mlms/__init__.py`` to ``mlms``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "mlms"


def folder_graph() -> nx.DiGraph:
    """Edges between mlms's sub-packages and top-level modules, each with the imports behind it."""
    graph = nx.DiGraph()
    for source, target, data in module_graph().edges(data=True):
        a, b = folder_of(source), folder_of(target)
        graph.add_node(a)
        if a != b:
            graph.add_edge(a, b)
            graph[a][b].setdefault("via", []).append(f"{source}:{data['line']} -> {target}")
    return graph


def documented_layers() -> list[set[str]]:
    """The layers in the block of docs/DESIGN.md, "Layer order", top first: each line names its
    folders (comma-separated) before two spaces and what they hold."""
    text = DESIGN.read_text()
    section = text.split("## Layer order", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block, 'docs/DESIGN.md, "Layer order" has no code block'
    layers = []
    for line in block.group(1).splitlines():
        names = line.split("  ", 1)[0]
        if names.strip():
            layers.append({name.strip().removesuffix("/") for name in names.split(",")})
    return layers


def _cycles(graph: nx.DiGraph, describe) -> list[str]:
    return [describe(cycle) for cycle in nx.simple_cycles(graph)][:10]


def test_no_cycle_between_modules() -> None:
    graph = module_graph()

    def describe(cycle: list[str]) -> str:
        steps = zip(cycle, [*cycle[1:], cycle[0]], strict=True)
        return " -> ".join(f"{a}:{graph[a][b]['line']}" for a, b in steps)

    assert not _cycles(graph, describe)


def test_no_cycle_between_folders() -> None:
    graph = folder_graph()

    def describe(cycle: list[str]) -> str:
        steps = zip(cycle, [*cycle[1:], cycle[0]], strict=True)
        return "; ".join(graph[a][b]["via"][0] for a, b in steps)

    assert not _cycles(graph, describe)


def test_folders_import_only_downwards_in_the_documented_layer_order() -> None:
    layers = documented_layers()
    rank = {name: index for index, layer in enumerate(layers) for name in layer}
    graph = folder_graph()
    undocumented = sorted(set(graph) - set(rank))
    assert not undocumented, f'docs/DESIGN.md, "Layer order" lacks {undocumented}'
    upwards = [
        via[0]
        for a, b, via in graph.edges(data="via")
        if rank[b] < rank[a]  # same line: allowed (the cycle test still applies)
    ]
    assert not upwards, f"imports against the layer order: {upwards}"


def test_the_graph_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    """The check can fail: an import inside a function or under TYPE_CHECKING is an edge."""
    graph = module_graph()
    assert graph.has_edge("mlms.cli.common_options", "mlms.remote_client")  # inside connect()
    assert graph.has_edge("mlms.client", "mlms.evaluation.record")  # under TYPE_CHECKING
    with_cycle = nx.DiGraph(graph)
    with_cycle.add_edge("mlms.evaluation.record", "mlms.client", line=1)
    assert _cycles(with_cycle, str)


def test_predictors_hold_adapters_only() -> None:
    """No agent, server or wire code: the predictors sit under everything that runs them."""
    below = {"errors", "frameworks", "tracer", "manifest", "assets", "tasks"}
    assert set(folder_graph().successors("predictors")) <= below


def test_hardware_sits_at_the_bottom() -> None:
    """Most floors ask what the host has or what ``--hw`` means, so the hardware modules import
    only the error family and CUDA's numbering, which imports nothing of mlms."""
    graph = folder_graph()
    assert set(graph.successors("hardware")) <= {"errors", "cuda_visible"}
    assert "cuda_visible" not in graph or not set(graph.successors("cuda_visible"))
