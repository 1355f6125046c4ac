"""Keras models for the TensorFlow artifacts.

Where the torch architecture is a plain ``nn.Sequential`` of layers Keras has (digits_cnn), the
Keras model is rebuilt layer by layer and the canonical torch weights are copied in, with the
layout transposes (OIHW -> HWIO kernels; a Dense after a Flatten gets its rows reordered from
torch's CHW to Keras's HWC order), so both frameworks compute the same function. The ImageNet
architectures come from ``keras.applications`` (weights=None, seeded): their layouts differ from
torchvision's (e.g. ResNet-50 v1 against v1.5), so their weights are Keras's own, not torch's.
Every image model takes the manifest's CHW input and permutes it to NHWC first, because
TensorFlow's CPU kernels run NHWC only.

The transformers (BERT, GPT-2) are KerasHub backbones whose weights KerasHub's own Hugging Face
converter ports from the torch model's ``save_pretrained`` folder, so no per-layer mapping lives
here; only the heads that the converter leaves out are added. KerasHub is not in the tensorflow
extra: every release requires tensorflow-text, which requires ``tensorflow`` and would install
that full wheel over tensorflow-cpu; ``scripts/setup.sh`` installs it without that requirement
(the backbones never import it). Without KerasHub these models have no TensorFlow asset.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from typing import Any

import numpy as np

from mlms.assets.optional_imports import without
from mlms.errors import AssetError
from mlms.manifest import BuildSource, ModelManifest

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
#: zoo builders from transformers -> their KerasHub backbone (converted by KerasHub, torch weights).
TRANSFORMERS = {"bert_base": "BertBackbone", "gpt2_small": "GPT2Backbone"}


#: What Keras imports only because it is installed, for features mlms does not use: its
#: scikit-learn wrappers, pandas DataFrames given to ``fit``, matplotlib's image galleries.
KERAS_EXTRAS = ("sklearn", "pandas", "matplotlib")
#: ...and what TensorFlow adds: JAX, for TensorFlow Lite's converter.
TENSORFLOW_EXTRAS = (*KERAS_EXTRAS, "jax")


def import_tensorflow() -> Any:
    """``tensorflow``, imported with its C++ info and warning lines off (they would land in the
    middle of the progress bar) and without ``TENSORFLOW_EXTRAS``; every mlms use of TensorFlow
    or Keras imports it through here."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with without(TENSORFLOW_EXTRAS):
        import tensorflow

    return tensorflow


def import_keras_on_jax() -> Any:
    """``keras`` on its JAX backend (where no other backend is loaded yet), without
    ``KERAS_EXTRAS``."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    with without(KERAS_EXTRAS):
        import keras

    return keras


def import_keras_for_building() -> Any:
    """``keras`` on TensorFlow where it is installed, else on JAX (a GPU machine with JAX and
    no TensorFlow builds the same ``.keras`` file for the jax framework). The seeded weights of
    keras.applications come from the backend's random generator, so they differ between the
    two. Runs in the asset builder's own process, where Keras is not yet imported."""
    if "keras" not in sys.modules:
        if importlib.util.find_spec("tensorflow") is None:
            return import_keras_on_jax()
        os.environ["KERAS_BACKEND"] = "tensorflow"
        import_tensorflow()
    import keras

    return keras


def keras_model(module: Any, manifest: ModelManifest) -> Any:
    """The Keras model for ``manifest``: converted from the torch ``module`` or seeded."""
    keras = import_keras_for_building()

    source = next(s for s in manifest.sources if isinstance(s, BuildSource))
    spec = manifest.inputs[0]
    if source.builder in TRANSFORMERS:
        return _from_transformers(module, manifest, TRANSFORMERS[source.builder])
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
        f"{', '.join(sorted((*APPLICATIONS, *TORCH_TWINS, *TRANSFORMERS)))}"
    )


def import_keras_hub(what: str) -> Any:
    """``keras_hub``, or an AssetError naming ``what`` needs it and why it is not installed."""
    try:
        import keras_hub
    except ImportError as exc:
        raise AssetError(
            f"{what} needs keras-hub, which is not installed: it requires tensorflow-text and "
            "so the full tensorflow wheel over tensorflow-cpu; scripts/setup.sh installs it "
            "with --no-deps"
        ) from exc
    return keras_hub


def _from_transformers(module: Any, manifest: ModelManifest, backbone_class: str) -> Any:
    """The KerasHub twin of a transformers network: one int64 token-id input of any length,
    the torch model's logits out."""
    import keras

    keras_hub = import_keras_hub(f"the TensorFlow asset of {manifest.name!r}")
    spec = manifest.inputs[0]
    with tempfile.TemporaryDirectory() as folder:
        module.pretrained.save_pretrained(folder, safe_serialization=True)
        backbone = getattr(keras_hub.models, backbone_class).from_preset(folder)
    if backbone_class == "BertBackbone":
        classifier = module.pretrained.classifier
        head = keras.layers.Dense(classifier.out_features, name="classifier")
        logits = head(backbone.output["pooled_output"])
        head.set_weights([classifier.weight.detach().numpy().T, classifier.bias.detach().numpy()])
    else:
        # GPT-2's head is its token embedding, tied; run on the last position as torch does.
        # The head joins the backbone's own graph: a layer shared across two graphs would be
        # saved in one and found without weights in the other.
        logits = backbone.token_embedding(backbone.output[:, -1, :], reverse=True)
    network = keras.Model(backbone.input, logits, name=backbone.name)
    ids = keras.Input(shape=(None,), dtype=spec.dtype, name=spec.name)
    # The torch models are called with token ids only: no padding, one segment.
    features = {"token_ids": ids, "padding_mask": keras.ops.ones_like(ids)}
    if "segment_ids" in network.input:
        features["segment_ids"] = keras.ops.zeros_like(ids)
    return keras.Model(ids, network(features), name=manifest.name)


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
