"""Model manifests: what a zoo model is, as data (one YAML file per model).

Validated by pydantic; a file that does not validate raises ``ManifestError`` naming the file and
the field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlms.errors import ManifestError
from mlms.reasons import short

#: Where a model comes from: shipped with mlms, added to the store, a file evaluated where it
#: lies, or a Hugging Face Hub id.
ORIGINS = ("zoo", "user", "file", "hub")
#: Artifact formats a user's model may come in.
FORMATS = ("onnx", "torch_export", "torchscript", "keras", "saved_model", "hf_folder")

#: Values that become part of a path (a label file, a downloaded file, a builder's name): one
#: plain name, never a folder, ``..`` or an absolute path.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
#: Values one sample may hold: 2**24 float32 values are 64 MiB, a gRPC message's limit.
MAX_SAMPLE_VALUES = 2**24


def _plain(value: str, what: str) -> str:
    if not _PLAIN_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{what} {value!r}: expected a plain name like 'resnet50-0676ba61.pth'")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FrameworkConstraint(_Strict):
    name: Literal["torch", "onnxruntime", "tensorflow", "jax", "mxnet"]
    #: A PEP 440 range such as ">=2.0,<3"; empty admits every version.
    version: str = ""

    @field_validator("version")
    @classmethod
    def _valid_range(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version range: {value!r} (expected e.g. '>=2.0,<3')") from exc
        return value

    def admits(self, version: str) -> bool:
        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        # Local labels such as "+cu130" name a build, not a release.
        return SpecifierSet(self.version).contains(parsed.public, prereleases=True)


class Preprocessing(_Strict):
    color: Literal["RGB", "BGR", "L"] = "RGB"
    resize: int | None = Field(default=None, gt=0, description="shorter side, before the crop")
    crop: int | None = Field(default=None, gt=0, description="centre crop, square")
    scale: float = Field(
        default=255.0, gt=0, allow_inf_nan=False, description="pixel values are divided by this"
    )
    mean: list[float] = Field(default_factory=list, max_length=4)
    std: list[float] = Field(default_factory=list, max_length=4)

    @field_validator("mean", "std")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        if any(not math.isfinite(v) for v in value):
            raise ValueError(f"every value must be a finite number, got {value}")
        return value


class InputSpec(_Strict):
    name: str
    shape: list[int] = Field(min_length=1, description="one sample, no batch axis")
    dtype: Literal["float32", "float16", "uint8", "int64"] = "float32"
    #: "tokens": token ids, shape [sequence length] (``--seq-len`` changes it up to max_length).
    layout: Literal["CHW", "HWC", "tokens"] = "CHW"
    preprocessing: Preprocessing = Preprocessing()
    vocab_size: int | None = Field(default=None, gt=0, description="token ids are below this")
    max_length: int | None = Field(default=None, gt=0, description="longest sequence it takes")

    @field_validator("shape")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(d <= 0 for d in value):
            raise ValueError(f"every dimension must be positive, got {value}")
        if math.prod(value) > MAX_SAMPLE_VALUES:
            raise ValueError(
                f"shape {value} holds {math.prod(value):,} values: expected at most "
                f"{MAX_SAMPLE_VALUES:,} a sample"
            )
        return value


class OutputSpec(_Strict):
    name: str
    #: "next_token": logits over the vocabulary for the token after the sequence;
    #: "detection" and "segmentation": what ``mlms.tasks.vision_tasks`` networks return, which
    #: ``mlms.tasks.postprocess`` turns into boxes or a class per pixel.
    type: Literal["classification", "next_token", "detection", "segmentation"] = "classification"
    #: A label file shipped in ``mlms/catalog/labels`` (e.g. "imagenet1k") or the labels inline;
    #: none for a vocabulary (classes are token ids).
    labels: str | list[str] | None = None

    @field_validator("labels")
    @classmethod
    def _label_file(cls, value: str | list[str]) -> str | list[str]:
        return _plain(value, "label file") if isinstance(value, str) else value


def _tokens_complete(spec: InputSpec) -> InputSpec:
    if spec.layout == "tokens":
        if spec.dtype != "int64" or len(spec.shape) != 1:
            raise ValueError("token inputs are int64 with shape [sequence length]")
        if spec.vocab_size is None or spec.max_length is None:
            raise ValueError("token inputs need vocab_size and max_length")
        if spec.shape[0] > spec.max_length:
            raise ValueError(f"sequence length {spec.shape[0]} exceeds max_length")
    return spec


class BuildSource(_Strict):
    """Construct the architecture locally with seeded weights."""

    kind: Literal["build"] = "build"
    builder: str = Field(description="a name in mlms.assets.architectures.ARCHITECTURES")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)

    @field_validator("builder")
    @classmethod
    def _builder(cls, value: str) -> str:
        return _plain(value, "builder")


class UrlSource(_Strict):
    """Download a framework artifact once into the store, verified against its sha256."""

    kind: Literal["url"] = "url"
    framework: Literal["torch", "onnxruntime", "tensorflow", "mxnet"]
    url: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    filename: str

    @field_validator("url")
    @classmethod
    def _remote(cls, value: str) -> str:
        # urllib would also open file:// (any local file) and ftp:// URLs.
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise ValueError(f"url {value!r}: expected an https:// (or http://) URL")
        return value

    @field_validator("filename")
    @classmethod
    def _filename(cls, value: str) -> str:
        return _plain(value, "filename")


class FileSource(_Strict):
    """A user's artifact (``mlms.assets.formats``): stored in the store under the model's asset
    prefix (origin user), or read where it lies (origin file or hub: ``path`` names it)."""

    kind: Literal["file"] = "file"
    format: Literal["onnx", "torch_export", "torchscript", "keras", "saved_model", "hf_folder"]
    framework: Literal["torch", "onnxruntime", "tensorflow", "mxnet"]
    #: The file's (or folder's) name.
    filename: str
    #: Of the file's bytes; for a folder, of its listing of files and their sha256.
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    #: A local path, for a model read where it lies; empty for one in the store.
    path: str = ""

    @field_validator("filename")
    @classmethod
    def _filename(cls, value: str) -> str:
        return _plain(value, "filename")


class InputShape(_Strict):
    """An input's full shape, batch axis first (``--input-shape NAME=1x3x224x224``)."""

    name: str = Field(min_length=1)
    shape: list[int] = Field(min_length=1, max_length=8)

    @field_validator("shape")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(d <= 0 for d in value):
            raise ValueError(f"every dimension must be positive, got {value}")
        return value


class DatasetSpec(_Strict):
    name: Literal["digits"]
    split: Literal["test"] = "test"


#: What a model does; the zoo's tables group its models by it.
Task = Literal[
    "image_classification",
    "object_detection",
    "semantic_segmentation",
    "text_classification",
    "text_generation",
    "translation",
]
TASKS: tuple[str, ...] = get_args(Task)


class ModelManifest(_Strict):
    #: A library's architecture is ``LIBRARY:NAME`` (``mlms.catalog.library_models``).
    name: str = Field(pattern=r"^(?:[a-z]+:)?[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    version: str
    task: Task
    description: str = ""
    frameworks: list[FrameworkConstraint] = Field(min_length=1)
    inputs: list[InputSpec] = Field(min_length=1, max_length=1)
    outputs: list[OutputSpec] = Field(min_length=1, max_length=1)
    sources: list[BuildSource | UrlSource | FileSource] = Field(min_length=1)
    dataset: DatasetSpec | None = None
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict)
    origin: Literal["zoo", "user", "file", "hub"] = "zoo"

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion as exc:
            raise ValueError(f"not a version: {value!r} (expected e.g. '1.0.0')") from exc
        return value

    @field_validator("inputs")
    @classmethod
    def _token_inputs(cls, value: list[InputSpec]) -> list[InputSpec]:
        return [_tokens_complete(spec) for spec in value]

    @property
    def framework_names(self) -> list[str]:
        return [constraint.name for constraint in self.frameworks]

    def constraint_for(self, framework: str) -> FrameworkConstraint | None:
        return next((c for c in self.frameworks if c.name == framework), None)

    @property
    def file_source(self) -> FileSource | None:
        """The user's artifact, for a model that is not built by the zoo."""
        return next((s for s in self.sources if isinstance(s, FileSource)), None)

    def source_for(self, framework: str) -> BuildSource | UrlSource | FileSource:
        """The URL or file source for ``framework`` if one is named, else the build source,
        else the user's artifact (that another framework's artifact is exported from)."""
        for source in self.sources:
            if isinstance(source, UrlSource | FileSource) and source.framework == framework:
                return source
        for source in self.sources:
            if isinstance(source, BuildSource):
                return source
        if self.file_source is not None:
            return self.file_source
        raise ManifestError(
            f"model {self.name!r} has no source for framework {framework!r}: "
            "expected a 'build' source or a 'url' source for it"
        )


#: libyaml's safe loader where PyYAML was built with it: the zoo's manifests load ten times
#: faster, which ``mlms models`` feels at every start.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_manifest(path: Path) -> ModelManifest:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read it as UTF-8 text: {exc}") from exc
    return parse_manifest(text, str(path))


def dump_manifest(manifest: ModelManifest) -> str:
    return yaml.safe_dump(manifest.model_dump(mode="json"), sort_keys=False)


def parse_manifest(text: str, path: str) -> ModelManifest:
    """The manifest in YAML ``text``; ``path`` names where it came from in errors."""
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise ManifestError(f"{path}: not valid YAML: nested too deeply") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    return manifest_from_data(data, path)


def load_yaml(path: Path) -> object:
    """The YAML document in the file at ``path``; ``ManifestError`` naming it if unreadable."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read it as UTF-8 text: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc


def manifest_from_data(data: dict, path: str) -> ModelManifest:
    """The manifest in ``data``; ``path`` names where it came from in errors."""
    try:
        return ModelManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top)"
        got = "" if first["type"] == "value_error" else f", got {short(first['input'])}"
        raise ManifestError(f"{path}: field '{field}': {first['msg']}{got}") from exc
