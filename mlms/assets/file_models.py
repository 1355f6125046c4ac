"""A manifest of the zoo's schema for a user's artifact: its inputs and outputs read from the
artifact, the rest from what the user said (``ModelOptions``) or the task's defaults.

mlms feeds one input: a float image (CHW or HWC) or a row of token ids. Dimensions the
artifact leaves open besides the batch axis come from ``--input-shape``; token inputs take
``--seq-len`` (default 128, at most what the model's positions allow). Images get the task's
default preprocessing unless ``--preprocess`` says otherwise: RGB (or L for one channel),
shorter side resized to 256/224 of the input and centre-cropped to it, values divided by 255
and, for three channels, normalised by ImageNet's mean and standard deviation.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlms.assets.formats import Artifact
from mlms.assets.signatures import Signature, TensorInfo
from mlms.errors import InvalidArgument
from mlms.manifest import (
    FileSource,
    FrameworkConstraint,
    InputShape,
    InputSpec,
    ModelManifest,
    OutputSpec,
    Preprocessing,
)

#: A name a user gives a model: it becomes part of store keys, so no path separators.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_SEQ_LEN = 128
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
#: The artifact's name in the store, by format (its own name may hold anything).
STORED_NAMES = {
    "onnx": "model.onnx",
    "torch_export": "model.pt2",
    "torchscript": "model.pt",
    "keras": "model.keras",
    "saved_model": "saved_model",
    "hf_folder": "hf_model",
}
_DTYPES = {"float32", "float16", "uint8", "int64"}
_PREPROCESS_KEYS = ("color", "resize", "crop", "scale", "mean", "std")

Task = Literal[
    "image_classification",
    "text_classification",
    "text_generation",
    "object_detection",
    "semantic_segmentation",
]


class ModelOptions(BaseModel):
    """What the user says about an artifact (``mlms models add``'s options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    version: str | None = None
    task: Task | None = None
    labels: list[str] = Field(default_factory=list, max_length=1_000_000)
    #: Preprocessing settings over the task's defaults: color, resize, crop, scale, mean, std.
    preprocess: dict[str, str] = Field(default_factory=dict)
    input_shapes: list[InputShape] = Field(default_factory=list, max_length=16)
    seq_len: int | None = Field(default=None, ge=1, le=65536)
    layout: Literal["CHW", "HWC"] | None = None
    framework: str | None = None


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or ".." in name:
        raise InvalidArgument(
            f"model name {name!r}: expected 1 to 64 letters, digits, '_', '-' or '.' starting "
            "with a letter or digit (no path separators)"
        )
    return name


def parse_input_shape(text: str) -> InputShape:
    """``NAME=1x3x224x224`` (batch axis first)."""
    name, sep, dims = text.partition("=")
    parts = dims.lower().split("x")
    if not sep or not name.strip() or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise InvalidArgument(
            f"--input-shape {text!r}: expected NAME=DIMSxDIMS..., batch axis first, e.g. "
            "'input=1x3x224x224'"
        )
    return InputShape(name=name.strip(), shape=[int(p) for p in parts])


def parse_preprocess(items: list[str]) -> dict[str, str]:
    """``["scale=16", "color=L"]`` -> a mapping, each key checked against the known ones."""
    settings: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in _PREPROCESS_KEYS:
            raise InvalidArgument(
                f"--preprocess {item!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(_PREPROCESS_KEYS)} (mean and std comma-separated)"
            )
        settings[key] = value.strip()
    return settings


def read_labels(path: Path) -> list[str]:
    """One class name a line; blank lines at the end are dropped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(
            f"--labels {str(path)!r}: cannot read it as UTF-8 text: {exc}"
        ) from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InvalidArgument(f"--labels {str(path)!r} is empty: expected one class name a line")
    return lines


def manifest_for(
    artifact: Artifact,
    signature: Signature,
    options: ModelOptions,
    *,
    origin: Literal["user", "file", "hub"],
    source: str,
) -> ModelManifest:
    """The manifest of ``artifact``; ``source`` (its path or Hub id) is kept in its
    attributes, and in the file source's path where the model is read where it lies."""
    where = f"model {source!r}"
    framework = _framework(artifact, options.framework, where)
    tensor = _one_input(signature, where)
    given = _given_shape(tensor, options, where)
    if given is not None and tensor.shape is None:  # TorchScript records no shapes
        tensor = TensorInfo(tensor.name, (None, *given[1:]), tensor.dtype)
    facts = signature.config
    task = options.task or facts.get("task") or _task_of(tensor, where)
    spec = _input_spec(tensor, task, options, facts, where)
    classes = _classes(signature)
    labels = options.labels or facts.get("labels") or None
    if labels and classes and len(labels) != classes and task != "text_generation":
        raise InvalidArgument(
            f"--labels: {len(labels)} names, but {where} has {classes} output classes"
        )
    name = options.name or _name_from(source)
    version = options.version or ("1" if origin == "user" else f"0+{artifact.sha256[:12]}")
    frameworks = [framework, *(f for f in artifact.frameworks if f != framework)]
    data = {
        "name": check_name(name),
        "version": version,
        "task": task,
        "description": f"{artifact.format} artifact added by a user ({origin})",
        "frameworks": [FrameworkConstraint(name=f) for f in frameworks],
        "inputs": [spec],
        "outputs": [
            OutputSpec(
                name=signature.outputs[0].name if signature.outputs else "logits",
                type=OUTPUT_TYPES.get(task, "classification"),
                labels=labels if task != "text_generation" else None,
            )
        ],
        "sources": [
            FileSource(
                format=artifact.format,
                framework=artifact.frameworks[0],
                filename=STORED_NAMES[artifact.format],
                sha256=artifact.sha256,
                size=artifact.size,
                path="" if origin == "user" else str(artifact.path),
            )
        ],
        "attributes": {
            "format": artifact.format,
            "source": source,
            "sha256": artifact.sha256,
            **({"architecture": facts["architecture"]} if "architecture" in facts else {}),
            **_tokenizer(artifact, origin),
        },
        "origin": origin,
    }
    try:
        return ModelManifest.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(f"{where}: {one_line(exc)}") from None


#: What a task's model returns (``mlms.tasks.postprocess`` reads it): next-token logits; a
#: detector's boxes already decoded, ``[x1, y1, x2, y2, score, label]`` rows padded with score
#: -1 (as torchvision's two-stage detectors and models exported with their NMS return them);
#: a segmenter's class logits (rows, classes, height, width) at any stride.
OUTPUT_TYPES = {
    "text_generation": "next_token",
    "object_detection": "detection",
    "semantic_segmentation": "segmentation",
}
#: Files of a tokenizer saved with ``save_pretrained``.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def _tokenizer(artifact: Artifact, origin: str) -> dict[str, str]:
    """A Hugging Face folder read where it lies names itself as the model's tokenizer where
    it holds one, so that data sets of text reach it (``mlms.datasets.binding``)."""
    folder = Path(artifact.path)
    if artifact.format != "hf_folder" or origin == "user":
        return {}
    return (
        {"tokenizer": str(folder)} if any((folder / f).is_file() for f in TOKENIZER_FILES) else {}
    )


def _framework(artifact: Artifact, wanted: str | None, where: str) -> str:
    if wanted is None:
        return artifact.frameworks[0]
    if wanted not in artifact.frameworks:
        raise InvalidArgument(
            f"--framework {wanted}: {where} is {artifact.format}, which "
            f"{' or '.join(artifact.frameworks)} runs"
        )
    return wanted


def _one_input(signature: Signature, where: str) -> TensorInfo:
    if len(signature.inputs) != 1:
        names = ", ".join(repr(t.name) for t in signature.inputs) or "none"
        raise InvalidArgument(
            f"{where} takes {len(signature.inputs)} inputs ({names}): mlms feeds models of "
            "exactly one input (an image batch or token ids)"
        )
    return signature.inputs[0]


def _classes(signature: Signature) -> int | None:
    if not signature.outputs or signature.outputs[0].shape is None:
        return None
    last = signature.outputs[0].shape[-1]
    return last if isinstance(last, int) else None


def _task_of(tensor: TensorInfo, where: str) -> Task:
    if tensor.shape is None:
        raise InvalidArgument(
            f"{where}: the shape of input {tensor.name!r} is not recorded in the artifact: give "
            f"it with --input-shape {tensor.name}=1x3x224x224 (batch axis first)"
        )
    rank = len(tensor.shape)
    if tensor.dtype == "int64" and rank == 2:
        return "text_classification"
    if rank == 4:
        return "image_classification"
    raise InvalidArgument(
        f"{where}: cannot tell its task from input {tensor.name!r} ({tensor.dtype}, shape "
        f"{_shape_text(tensor.shape)}): give --task image_classification, text_classification "
        "or text_generation"
    )


def _given_shape(tensor: TensorInfo, options: ModelOptions, where: str) -> list[int] | None:
    given = {s.name: s.shape for s in options.input_shapes}
    unknown = [name for name in given if name != tensor.name]
    if unknown:
        raise InvalidArgument(
            f"--input-shape {unknown[0]}: {where} has no input of that name; its input is "
            f"{tensor.name!r}"
        )
    return given.get(tensor.name)


def _input_spec(
    tensor: TensorInfo, task: str, options: ModelOptions, facts: dict, where: str
) -> InputSpec:
    dtype = tensor.dtype
    if dtype not in _DTYPES:
        raise InvalidArgument(
            f"{where}: input {tensor.name!r} is {dtype}: mlms feeds float32, float16, uint8 "
            "or int64 inputs"
        )
    given = _given_shape(tensor, options, where)
    shape = _sample_shape(tensor, given, task, where)
    if task in ("text_classification", "text_generation"):
        max_length = facts.get("max_length") or (shape[0] if shape else None)
        if shape is None:
            shape = [min(options.seq_len or DEFAULT_SEQ_LEN, max_length or DEFAULT_SEQ_LEN)]
        elif options.seq_len is not None:
            shape = [options.seq_len]
        vocab = facts.get("vocab_size")
        if vocab is None:
            raise InvalidArgument(
                f"{where}: token input {tensor.name!r} without a vocabulary size: mlms reads it "
                "from a Hugging Face folder's config.json"
            )
        return _validated_input(
            where,
            name=tensor.name,
            shape=shape,
            dtype="int64",
            layout="tokens",
            vocab_size=vocab,
            max_length=max(max_length or shape[0], shape[0]),
        )
    if shape is None or len(shape) != 3:
        raise InvalidArgument(
            f"{where}: image input {tensor.name!r} has shape {_shape_text(tensor.shape)}: "
            "expected a batch of images (4 dimensions); give it with --input-shape "
            f"{tensor.name}=1x3x224x224"
        )
    layout = options.layout or ("HWC" if shape[-1] in (1, 3, 4) and shape[0] > 4 else "CHW")
    channels, height, width = (shape[0], *shape[1:]) if layout == "CHW" else (shape[2], *shape[:2])
    return _validated_input(
        where,
        name=tensor.name,
        shape=shape,
        dtype=dtype,
        layout=layout,
        preprocessing=_preprocessing(channels, height, width, options.preprocess, where),
    )


def _sample_shape(
    tensor: TensorInfo, given: list[int] | None, task: str, where: str
) -> list[int] | None:
    """One sample's shape (no batch axis), or None for a token input left open."""
    tokens = task in ("text_classification", "text_generation")
    if given is not None:
        if tensor.shape is not None and len(given) != len(tensor.shape):
            raise InvalidArgument(
                f"--input-shape {tensor.name}={'x'.join(map(str, given))}: input "
                f"{tensor.name!r} has {len(tensor.shape)} dimensions "
                f"({_shape_text(tensor.shape)}), batch axis first"
            )
        fixed = [] if tensor.shape is None else list(tensor.shape)
        for axis, (want, have) in enumerate(zip(given[1:], fixed[1:], strict=False), start=1):
            if have is not None and have != want:
                raise InvalidArgument(
                    f"--input-shape {tensor.name}={'x'.join(map(str, given))}: dimension "
                    f"{axis} of input {tensor.name!r} is fixed at {have}"
                )
        return list(given[1:])
    if tensor.shape is None:
        raise InvalidArgument(
            f"{where}: the shape of input {tensor.name!r} is not recorded in the artifact: give "
            f"it with --input-shape {tensor.name}=1x3x224x224 (batch axis first)"
        )
    rest = list(tensor.shape[1:])
    if any(d is None for d in rest):
        if tokens and len(rest) == 1:
            return None
        raise InvalidArgument(
            f"{where}: input {tensor.name!r} has open dimensions ({_shape_text(tensor.shape)}): "
            f"give them with --input-shape {tensor.name}=1x3x224x224 (batch axis first)"
        )
    return rest  # type: ignore[return-value]


def _preprocessing(
    channels: int, height: int, width: int, settings: dict[str, str], where: str
) -> Preprocessing:
    defaults: dict[str, object] = {
        "color": "L" if channels == 1 else "RGB",
        "resize": round(min(height, width) * 256 / 224),
        "crop": height if height == width else None,
        "scale": 255.0,
        "mean": IMAGENET_MEAN if channels == 3 else [],
        "std": IMAGENET_STD if channels == 3 else [],
    }
    for key, text in settings.items():
        if key in ("mean", "std"):
            defaults[key] = [_number(key, part) for part in text.split(",") if part.strip()]
        elif key in ("resize", "crop"):
            defaults[key] = None if text.lower() in ("", "none") else _number(key, text)
        elif key == "scale":
            defaults[key] = _number(key, text)
        else:
            defaults[key] = text.upper()
    if len(defaults["mean"]) != len(defaults["std"]):  # type: ignore[arg-type]
        raise InvalidArgument(
            f"--preprocess mean={defaults['mean']} std={defaults['std']}: expected as many "
            "values in each"
        )
    try:
        return Preprocessing.model_validate(defaults)
    except ValidationError as exc:
        raise InvalidArgument(f"--preprocess: {one_line(exc)}") from None


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f"--preprocess {key}={text!r}: expected a number") from None
    if not math.isfinite(value):
        raise InvalidArgument(f"--preprocess {key}={text!r}: expected a finite number")
    return int(value) if key in ("resize", "crop") and value.is_integer() else value


def _validated_input(where: str, **fields: object) -> InputSpec:
    try:
        return InputSpec.model_validate(fields)
    except ValidationError as exc:
        raise InvalidArgument(f"{where}: input {one_line(exc)}") from None


def one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "value"
    message = first["msg"].removeprefix("Value error, ")
    return f"{field}: {message}" + (
        "" if first["type"] == "value_error" else f", got {first['input']!r}"
    )


def _name_from(source: str) -> str:
    stem = Path(source.removeprefix("hf:").split("@")[0]).name
    stem = stem.rsplit(".", 1)[0] if "." in stem and not source.startswith("hf:") else stem
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip("._-")[:64]
    return cleaned or "model"


def _shape_text(shape: tuple[int | None, ...] | None) -> str:
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
