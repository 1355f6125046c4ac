"""What a model artifact takes and gives, read from the artifact itself.

ONNX: the graph's inputs (less its initializers) and outputs. ``torch.export``: the program's
user inputs and outputs, with their example shapes (a symbolic dimension is open). TorchScript:
the names of ``forward``'s arguments only (it records no shapes). Keras: the model's input and
output specs. SavedModel: the ``serving_default`` signature. A Hugging Face folder: its
``config.json`` (token inputs; the head's classes and labels; the task from the architecture).

torch and TensorFlow artifacts are opened in a process of their own (``mlms.isolation``): the
two must not share a process, and a corrupt file that crashes a loader takes only that process.
Anything a loader refuses becomes one ``InvalidArgument`` line naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlms.errors import InvalidArgument, MlmsError
from mlms.isolation import call_in_own_process

#: An open dimension, or a rank that is not recorded.
Shape = tuple[int | None, ...] | None

_HF_TASKS = {
    "ForSequenceClassification": "text_classification",
    "ForCausalLM": "text_generation",
    "LMHeadModel": "text_generation",
    "ForImageClassification": "image_classification",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: Shape  # batch axis first
    dtype: str  # numpy's name


@dataclass(frozen=True)
class Signature:
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    #: Hugging Face folders: task, vocab_size, max_length, labels (from config.json).
    config: dict[str, Any] = field(default_factory=dict)


def read_signature(path: Path, format: str) -> Signature:
    if format == "onnx":
        return _onnx(path)
    if format == "hf_folder":
        return _hf_folder(path)
    return call_in_own_process(
        signature_in_process,
        path,
        format,
        what=f"the reader of {str(path)!r}",
        error=InvalidArgument,
    )


def signature_in_process(path: Path, format: str) -> Signature:
    readers = {
        "torch_export": _torch_export,
        "torchscript": _torchscript,
        "keras": _keras,
        "saved_model": _saved_model,
    }
    try:
        return readers[format](path)
    except MlmsError:
        raise
    except Exception as exc:  # the loader's own error, whatever its type: one line
        raise unreadable(path, format, exc) from None


def unreadable(path: Path, format: str, exc: BaseException) -> InvalidArgument:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    reason = lines[0][:200] if lines else type(exc).__name__
    return InvalidArgument(
        f"model file {str(path)!r} cannot be read as {format} ({reason}): is it truncated or "
        "corrupt?"
    )


def _onnx(path: Path) -> Signature:
    import onnx
    from onnx import helper

    try:
        model = onnx.load(str(path), load_external_data=False)
        # By path: the checker reads the file itself instead of a re-serialised copy.
        onnx.checker.check_model(str(path))
    except Exception as exc:  # DecodeError, ValidationError, OSError: all mean unreadable
        raise unreadable(path, "onnx", exc) from None
    graph = model.graph
    weights = {init.name for init in graph.initializer}

    def info(value: Any) -> TensorInfo:
        kind = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(kind.elem_type).name if kind.elem_type else "?"
        return TensorInfo(value.name, dims if kind.HasField("shape") else None, dtype)

    inputs = [info(v) for v in graph.input if v.name not in weights]
    return Signature(inputs, [info(v) for v in graph.output])


def _torch_export(path: Path) -> Signature:
    import torch

    program = torch.export.load(str(path))
    signature = program.graph_signature
    nodes = {node.name: node for node in program.graph.nodes}

    def info(name: str) -> TensorInfo:
        value = nodes[name].meta.get("val")
        if value is None or not hasattr(value, "shape"):
            return TensorInfo(name, None, "?")
        dims = tuple(d if isinstance(d, int) else None for d in value.shape)
        return TensorInfo(name, dims, str(value.dtype).removeprefix("torch."))

    outputs = [info(name) for name in signature.user_outputs if name in nodes]
    return Signature([info(name) for name in signature.user_inputs], outputs)


def _torchscript(path: Path) -> Signature:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit's deprecation notice
        module = torch.jit.load(str(path), map_location="cpu")
    arguments = module.forward.schema.arguments[1:]  # after self
    return Signature([TensorInfo(a.name, None, "float32") for a in arguments], [])


def _keras(path: Path) -> Signature:
    from mlms.assets.keras_models import import_tensorflow

    import_tensorflow()
    import keras

    model = keras.models.load_model(path, compile=False)

    def info(tensor: Any) -> TensorInfo:
        return TensorInfo(tensor.name, tuple(tensor.shape), str(tensor.dtype))

    return Signature([info(t) for t in model.inputs], [info(t) for t in model.outputs])


def _saved_model(path: Path) -> Signature:
    from mlms.assets.keras_models import import_tensorflow

    tf = import_tensorflow()
    loaded = tf.saved_model.load(str(path))
    function = loaded.signatures.get("serving_default")
    if function is None:
        raise InvalidArgument(
            f"SavedModel {str(path)!r} has no 'serving_default' signature (it has: "
            f"{', '.join(loaded.signatures) or 'none'}): save it with a serving signature"
        )
    _args, kwargs = function.structured_input_signature

    def info(name: str, spec: Any) -> TensorInfo:
        shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
        return TensorInfo(name, shape, spec.dtype.name)

    outputs = function.structured_outputs
    return Signature(
        [info(name, spec) for name, spec in sorted(kwargs.items())],
        [info(name, spec) for name, spec in sorted(outputs.items())],
    )


def _hf_folder(path: Path) -> Signature:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise unreadable(path / "config.json", "a Hugging Face config", exc) from None
    if not isinstance(config, dict):
        raise InvalidArgument(f"{str(path / 'config.json')!r}: expected a JSON object")
    architectures = config.get("architectures") or []
    task = next(
        (t for arch in architectures for suffix, t in _HF_TASKS.items() if arch.endswith(suffix)),
        None,
    )
    if task is None:
        raise InvalidArgument(
            f"Hugging Face folder {str(path)!r}: architectures {architectures} has no head mlms "
            "evaluates: expected a ...ForSequenceClassification, ...ForCausalLM (or "
            "...LMHeadModel) or ...ForImageClassification model"
        )
    facts: dict[str, Any] = {"task": task, "architecture": architectures[0]}
    if task == "image_classification":
        size = config.get("image_size", 224)
        channels = config.get("num_channels", 3)
        inputs = [TensorInfo("pixel_values", (None, channels, size, size), "float32")]
    else:
        facts["vocab_size"] = config.get("vocab_size")
        facts["max_length"] = config.get("max_position_embeddings") or config.get("n_positions")
        inputs = [TensorInfo("input_ids", (None, None), "int64")]
    labels = config.get("id2label") or {}
    names = [labels[key] for key in sorted(labels, key=int)] if labels else []
    if task == "text_generation":
        classes = facts["vocab_size"]
    else:
        classes = len(names) or config.get("num_labels")
        # transformers names classes it was not told about LABEL_0, LABEL_1, ...
        if names and names != [f"LABEL_{i}" for i in range(len(names))]:
            facts["labels"] = names
    return Signature(inputs, [TensorInfo("logits", (None, classes), "float32")], facts)
