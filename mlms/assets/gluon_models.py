"""Gluon networks for the MXNet artifacts, and their parameters as a framework-neutral ``.npz``.

MXNet 1.9 imports only beside numpy 1.23, so it lives in its own virtualenv, without torch. The
artifact therefore carries everything the MXNet side needs without torch:
- a torch ``nn.Sequential`` of layers Gluon has (digits_cnn): its layer list as JSON under
  ``__layers__`` and the torch state dict unchanged (Gluon's HybridSequential names parameters
  "0.weight", "2.bias", ... like torch, and keeps torch's OIHW kernels, (out, in) dense weights
  and CHW flatten order), so MXNet computes the same function from the same weights;
- the ImageNet architectures: the Gluon model zoo network (pretrained=False), initialised with a
  fixed seed; its parameters are written by MXNet's own interpreter (a subprocess when this one
  cannot import MXNet). Their weights are Gluon's, not torch's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mlms.errors import AssetError
from mlms.manifest import BuildSource, ModelManifest

#: zoo builder -> Gluon model zoo name (seeded weights, not the torch weights).
MODEL_ZOO = {
    "alexnet": "alexnet",
    "resnet18": "resnet18_v1",
    "resnet34": "resnet34_v1",
    "resnet50": "resnet50_v1",
    "resnet101": "resnet101_v1",
    "resnet152": "resnet152_v1",
    "vgg16": "vgg16",
    "vgg19": "vgg19",
    "mobilenet_v2": "mobilenetv2_1.0",
    "densenet121": "densenet121",
    "squeezenet1_1": "squeezenet1.1",
    "inception_v3": "inceptionv3",
}
#: zoo builders whose torch module converts layer by layer, weights included.
TORCH_TWINS = ("digits_cnn",)
FILE = "weights.npz"
LAYERS_KEY = "__layers__"
MODEL_ZOO_KEY = "__model_zoo__"


def export_parameters(module: Any, manifest: ModelManifest, folder: Path) -> str:
    """Write ``weights.npz`` for ``manifest`` into ``folder``; returns the file name."""
    source = next(s for s in manifest.sources if isinstance(s, BuildSource))
    path = folder / FILE
    if source.builder in TORCH_TWINS:
        layers = sequential_layers(module, manifest.name)
        state = {key: value.detach().numpy() for key, value in module.state_dict().items()}
        np.savez(path, **{LAYERS_KEY: np.array(json.dumps(layers))}, **state)
        return FILE
    if source.builder not in MODEL_ZOO:
        raise AssetError(
            f"model {manifest.name!r}: no Gluon twin of builder {source.builder!r}; expected one "
            f"of: {', '.join(sorted((*MODEL_ZOO, *TORCH_TWINS)))}"
        )
    shape = ",".join(str(d) for d in manifest.inputs[0].shape)
    arguments = [source.builder, str(source.seed), shape, str(path)]
    try:
        import mxnet  # noqa: F401
    except ImportError:
        _write_in_mxnet_interpreter(arguments)
    else:
        write_seeded(source.builder, source.seed, tuple(map(int, shape.split(","))), path)
    return FILE


def _write_in_mxnet_interpreter(arguments: list[str]) -> None:
    from mlms.frameworks import own_interpreter

    python = own_interpreter("mxnet")
    if python is None or not python.exists():
        raise AssetError(
            f"building the MXNet asset needs MXNet's virtualenv ({python}); run scripts/setup.sh"
        )
    result = subprocess.run(
        [str(python), "-m", "mlms.assets.gluon_models", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise AssetError(f"building the MXNet asset in {python} failed: {last}")


def write_seeded(builder: str, seed: int, shape: tuple[int, ...], path: Path) -> None:
    """The Gluon model zoo network, seeded and initialised (Xavier), as ``.npz``."""
    import mxnet as mx

    mx.random.seed(seed)
    np.random.seed(seed)
    net = model_zoo_network(MODEL_ZOO[builder])
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net(mx.nd.zeros((1, *shape)))  # deferred initialisation: shapes are known after one call
    params = {key: p.data().asnumpy() for key, p in net._collect_params_with_prefix().items()}
    np.savez(path, **{MODEL_ZOO_KEY: np.array(MODEL_ZOO[builder])}, **params)


def model_zoo_network(name: str) -> Any:
    from mxnet.gluon.model_zoo import vision

    return vision.get_model(name, pretrained=False)


def sequential_layers(module: Any, name: str) -> list[dict[str, Any]]:
    """A torch ``nn.Sequential`` as a list of layer descriptions Gluon can rebuild."""
    from torch import nn

    layers: list[dict[str, Any]] = []
    for path, layer in module.named_children():
        if isinstance(layer, nn.Conv2d) and layer.groups == 1 and layer.padding_mode == "zeros":
            layers.append(
                {
                    "path": path,
                    "type": "conv",
                    "channels": layer.out_channels,
                    "in_channels": layer.in_channels,
                    "kernel": list(layer.kernel_size),
                    "stride": list(layer.stride),
                    "padding": list(layer.padding),
                    "dilation": list(layer.dilation),
                    "bias": layer.bias is not None,
                }
            )
        elif isinstance(layer, nn.ReLU):
            layers.append({"path": path, "type": "relu"})
        elif isinstance(layer, nn.MaxPool2d) and not layer.padding and layer.dilation == 1:
            layers.append(
                {
                    "path": path,
                    "type": "maxpool",
                    "kernel": layer.kernel_size,
                    "stride": layer.stride,
                    "ceil_mode": layer.ceil_mode,
                }
            )
        elif isinstance(layer, nn.Flatten):
            layers.append({"path": path, "type": "flatten"})
        elif isinstance(layer, nn.Linear):
            layers.append(
                {
                    "path": path,
                    "type": "dense",
                    "units": layer.out_features,
                    "in_units": layer.in_features,
                    "bias": layer.bias is not None,
                }
            )
        else:
            raise AssetError(
                f"model {name!r}: layer {path} ({layer}) has no Gluon twin; expected Conv2d, "
                "ReLU, MaxPool2d (no padding), Flatten or Linear"
            )
    return layers


def network(weights: Any) -> Any:
    """The Gluon network an ``.npz`` artifact describes (parameters not yet loaded)."""
    from mxnet.gluon import nn

    if MODEL_ZOO_KEY in weights.files:
        return model_zoo_network(str(weights[MODEL_ZOO_KEY]))
    net = nn.HybridSequential(prefix="")
    for layer in json.loads(str(weights[LAYERS_KEY])):
        prefix = f"{layer['path']}_"  # graph nodes are then named after the torch layer
        kind = layer["type"]
        if kind == "conv":
            block = nn.Conv2D(
                layer["channels"],
                tuple(layer["kernel"]),
                strides=tuple(layer["stride"]),
                padding=tuple(layer["padding"]),
                dilation=tuple(layer["dilation"]),
                use_bias=layer["bias"],
                in_channels=layer["in_channels"],
                prefix=prefix,
            )
        elif kind == "relu":
            block = nn.Activation("relu", prefix=prefix)
        elif kind == "maxpool":
            block = nn.MaxPool2D(
                layer["kernel"], layer["stride"], ceil_mode=layer["ceil_mode"], prefix=prefix
            )
        elif kind == "flatten":
            block = nn.Flatten(prefix=prefix)
        else:
            block = nn.Dense(
                layer["units"], use_bias=layer["bias"], in_units=layer["in_units"], prefix=prefix
            )
        net.add(block)
    return net


def parameters(weights: Any) -> dict[str, np.ndarray]:
    return {key: weights[key] for key in weights.files if not key.startswith("__")}


def main(argv: list[str]) -> None:
    """``python -m mlms.assets.gluon_models BUILDER SEED C,H,W OUT.npz`` (in MXNet's virtualenv)."""
    builder, seed, shape, out = argv
    write_seeded(builder, int(seed), tuple(int(d) for d in shape.split(",")), Path(out))


if __name__ == "__main__":
    main(sys.argv[1:])
