"""A user's torch artifact as a ``torch.nn.Module``: a ``torch.export`` program (unflattened,
so that its submodules keep the names of the module it was exported from and layer hooks see
them), a TorchScript module, or a Hugging Face folder through transformers."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

from mlms.errors import InvalidArgument, UnsupportedFramework
from mlms.manifest import ModelManifest


class TorchModules(NamedTuple):
    """A loaded artifact: the module whose submodules layer hooks see, and the one predicts run
    (the same object, except for a ``torch.export`` program: its unflattened module interprets
    its graphs node by node in Python, 20 % slower than the eager network on resnet18 at batch 1
    on the CPU, while the program's flat module runs generated code as fast as the eager one)."""

    layers: Any
    runs: Any


def load_torch_module(manifest: ModelManifest, path: Path) -> TorchModules:
    import torch

    source = manifest.file_source
    if source is None:
        raise UnsupportedFramework(f"model {manifest.name!r} has no artifact of a user's")
    try:
        if source.format == "torch_export":
            program = torch.export.load(str(path))
            flat = program.module()
            try:
                return TorchModules(torch.export.unflatten(program), flat)
            except Exception:  # some programs (e.g. with lifted constants) do not unflatten
                return TorchModules(flat, flat)
        if source.format == "torchscript":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # torch.jit's deprecation notice
                scripted = torch.jit.load(str(path), map_location="cpu")
            return TorchModules(scripted, scripted)
        if source.format == "hf_folder":
            from mlms.assets.transformer_models import pretrained_module

            network = pretrained_module(str(path), manifest.task)
            return TorchModules(network, network)
    except (RuntimeError, OSError, ValueError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise InvalidArgument(
            f"model {manifest.name!r}: torch cannot load {str(path)!r} as {source.format}: "
            f"{first[:200]}"
        ) from None
    raise UnsupportedFramework(
        f"model {manifest.name!r} is {source.format}, which torch does not load"
    )


def eval_mode(module: Any) -> Any:
    """``module.eval()``, where the module allows it (an exported program's graph module is
    in inference form already and may refuse)."""
    try:
        return module.eval()
    except (NotImplementedError, RuntimeError):
        return module
