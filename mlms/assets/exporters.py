"""Write a framework's artifact from the canonical torch module.

Each exporter takes the module, the manifest and a folder, writes one file and returns its name.
Frameworks register here (one table), so the asset builder needs no per-framework branches.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlms.manifest import ModelManifest

Exporter = Callable[[Any, ModelManifest, Path], str]


def export_torch(module: Any, manifest: ModelManifest, folder: Path) -> str:
    import torch

    torch.save(module.state_dict(), folder / "model.pt")
    return "model.pt"


def export_onnx(module: Any, manifest: ModelManifest, folder: Path) -> str:
    """ONNX through torch.export (the maintained exporter) with a dynamic batch axis (and
    sequence axis, for token inputs).

    Its nodes carry the module path in ``pkg.torch.onnx.name_scopes``, which the ONNX Runtime
    predictor uses to name layers like torch does.
    """
    import logging

    import torch

    spec = manifest.inputs[0]
    example = torch.zeros(2, *spec.shape, dtype=getattr(torch, spec.dtype))
    axes = {0: torch.export.Dim("batch", min=1, max=4096)}
    if spec.layout == "tokens":
        # --seq-len picks the length at evaluation time.
        axes[1] = torch.export.Dim("sequence", min=1, max=spec.max_length)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.onnx.export(
        module,
        (example,),
        str(folder / "model.onnx"),
        dynamo=True,
        input_names=[spec.name],
        output_names=[manifest.outputs[0].name],
        dynamic_shapes=(axes,),
        external_data=False,
        verbose=False,
    )
    return "model.onnx"


def export_tensorflow(module: Any, manifest: ModelManifest, folder: Path) -> str:
    """A Keras model (see ``mlms.assets.keras_models``: torch weights where the layers map)."""
    from mlms.assets.keras_models import keras_model

    keras_model(module, manifest).save(folder / "model.keras")
    return "model.keras"


def export_mxnet(module: Any, manifest: ModelManifest, folder: Path) -> str:
    """Gluon parameters as .npz (see ``mlms.assets.gluon_models``: torch weights where the layers
    map, else the seeded Gluon model zoo network, built in MXNet's own interpreter)."""
    from mlms.assets.gluon_models import export_parameters

    return export_parameters(module, manifest, folder)


EXPORTERS: dict[str, Exporter] = {
    "torch": export_torch,
    "onnxruntime": export_onnx,
    "tensorflow": export_tensorflow,
    "mxnet": export_mxnet,
}
