"""Keras models for the TensorFlow artifacts.

Where the torch architecture is a plain ``nn.Sequential`` of layers Keras has (digits_cnn), the
Keras model is rebuilt layer by layer and the canonical torch weights are copied in, with the
layout transposes (OIHW -> HWIO kernels; a Dense after a Flatten gets its rows reordered from
torch's CHW to Keras's HWC order), so both frameworks compute the same function. The ImageNet
architectures come from ``keras.applications`` (weights=None, seeded): their layouts differ from
torchvision's (e.g. ResNet-50 v1 against v1.5), so their weights are Keras's own, not torch's.
Every model takes the manifest's CHW input and permutes it to NHWC first, because TensorFlow's
CPU kernels run NHWC only.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mlms.errors import AssetError
from mlms.zoo.manifest import BuildSource, ModelManifest

#: zoo builder -> keras.applications constructor (seeded weights, not the torch weights).
APPLICATIONS = {
    "resnet50": "ResNet50",
    "resnet101": "ResNet101",
    "resnet152": "ResNet152",
    "vgg16": "VGG16",
    "vgg19": "VGG19",
    "mobilenet_v2": "MobileNetV2",
    "densenet121": "DenseNet121",
    "inception_v3": "InceptionV3",
}
#: zoo builders whose torch module converts layer by layer, weights included.
TORCH_TWINS = ("digits_cnn",)


def import_tensorflow() -> Any:
    """``tensorflow``, imported with its C++ info and warning lines off (they would land in the
    middle of the progress bar); every mlms use of TensorFlow or Keras imports it through here."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow


def keras_model(module: Any, manifest: ModelManifest) -> Any:
    """The Keras model for ``manifest``: converted from the torch ``module`` or seeded."""
    import_tensorflow()
    import keras

    source = next(s for s in manifest.sources if isinstance(s, BuildSource))
    spec = manifest.inputs[0]
    inputs = keras.Input(shape=tuple(spec.shape), name=spec.name, dtype=spec.dtype)
    nhwc = keras.layers.Permute((2, 3, 1), name="to_nhwc")(inputs)
    if source.builder in TORCH_TWINS:
        return _from_sequential(module, inputs, nhwc, manifest.name)
    if source.builder in APPLICATIONS:
        keras.utils.set_random_seed(source.seed)
        constructor = getattr(keras.applications, APPLICATIONS[source.builder])
        return constructor(
            weights=None, input_tensor=nhwc, classes=1000, classifier_activation=None
        )
    raise AssetError(
        f"model {manifest.name!r}: no Keras twin of builder {source.builder!r}; expected one of: "
        f"{', '.join(sorted((*APPLICATIONS, *TORCH_TWINS)))}"
    )


def _from_sequential(module: Any, inputs: Any, x: Any, name: str) -> Any:
    """Rebuild a torch ``nn.Sequential`` in Keras (same layer names) and copy its weights."""
    import keras
    from torch import nn

    weights: list[tuple[str, list[np.ndarray]]] = []
    flattened_from: tuple[int, int, int] | None = None  # (H, W, C) before a Flatten
    for path, layer in module.named_children():
        if isinstance(layer, nn.Conv2d):
            if layer.groups != 1 or layer.dilation != (1, 1) or layer.padding_mode != "zeros":
                raise AssetError(f"model {name!r}: layer {path} ({layer}) has no Keras twin here")
            if any(layer.padding):
                x = keras.layers.ZeroPadding2D(layer.padding, name=f"{path}_pad")(x)
            x = keras.layers.Conv2D(
                layer.out_channels,
                layer.kernel_size,
                strides=layer.stride,
                use_bias=layer.bias is not None,
                name=path,
            )(x)
            kernel = layer.weight.detach().numpy().transpose(2, 3, 1, 0)  # OIHW -> HWIO
            weights.append((path, [kernel, *_bias(layer)]))
        elif isinstance(layer, nn.ReLU):
            x = keras.layers.ReLU(name=path)(x)
        elif isinstance(layer, nn.MaxPool2d):
            if layer.padding or layer.dilation != 1 or layer.ceil_mode:
                raise AssetError(f"model {name!r}: layer {path} ({layer}) has no Keras twin here")
            x = keras.layers.MaxPooling2D(layer.kernel_size, strides=layer.stride, name=path)(x)
        elif isinstance(layer, nn.Flatten):
            flattened_from = tuple(int(d) for d in x.shape[1:])
            x = keras.layers.Flatten(name=path)(x)
        elif isinstance(layer, nn.Linear):
            kernel = layer.weight.detach().numpy()  # (out, in)
            if flattened_from is not None:
                height, width, channels = flattened_from
                kernel = (
                    kernel.reshape(-1, channels, height, width)
                    .transpose(0, 2, 3, 1)
                    .reshape(kernel.shape[0], -1)
                )
                flattened_from = None
            x = keras.layers.Dense(layer.out_features, use_bias=layer.bias is not None, name=path)(
                x
            )
            weights.append((path, [kernel.T, *_bias(layer)]))
        else:
            raise AssetError(
                f"model {name!r}: layer {path} ({type(layer).__name__}) has no Keras twin; "
                "expected Conv2d, ReLU, MaxPool2d, Flatten or Linear"
            )
    model = keras.Model(inputs, x, name=name)
    for path, values in weights:
        model.get_layer(path).set_weights(values)
    return model


def _bias(layer: Any) -> list[np.ndarray]:
    return [layer.bias.detach().numpy()] if layer.bias is not None else []
