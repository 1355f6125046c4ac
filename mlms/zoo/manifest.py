"""Model manifests: what a zoo model is, as data (one YAML file per model).

Validated by pydantic; a file that does not validate raises ``ManifestError`` naming the file and
the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlms.errors import ManifestError

FRAMEWORKS = ("torch", "onnxruntime", "tensorflow", "mxnet")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FrameworkConstraint(_Strict):
    name: Literal["torch", "onnxruntime", "tensorflow", "mxnet"]
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
    scale: float = Field(default=255.0, gt=0, description="pixel values are divided by this")
    mean: list[float] = Field(default_factory=list)
    std: list[float] = Field(default_factory=list)


class InputSpec(_Strict):
    name: str
    shape: list[int] = Field(min_length=1, description="one sample, no batch axis")
    dtype: Literal["float32", "float16", "uint8", "int64"] = "float32"
    layout: Literal["CHW", "HWC"] = "CHW"
    preprocessing: Preprocessing = Preprocessing()

    @field_validator("shape")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(d <= 0 for d in value):
            raise ValueError(f"every dimension must be positive, got {value}")
        return value


class OutputSpec(_Strict):
    name: str
    type: Literal["classification"] = "classification"
    #: A label file shipped in ``mlms/zoo/labels`` (e.g. "imagenet1k") or the labels inline.
    labels: str | list[str]


class BuildSource(_Strict):
    """Construct the architecture locally with seeded weights."""

    kind: Literal["build"] = "build"
    builder: str = Field(description="a name in mlms.zoo.architectures.ARCHITECTURES")
    seed: int = 0


class UrlSource(_Strict):
    """Download a framework artifact once into the store, verified against its sha256."""

    kind: Literal["url"] = "url"
    framework: Literal["torch", "onnxruntime", "tensorflow", "mxnet"]
    url: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    filename: str


class DatasetSpec(_Strict):
    name: Literal["digits"]
    split: Literal["test"] = "test"


class ModelManifest(_Strict):
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    version: str
    task: Literal["image_classification"]
    description: str = ""
    frameworks: list[FrameworkConstraint] = Field(min_length=1)
    inputs: list[InputSpec] = Field(min_length=1, max_length=1)
    outputs: list[OutputSpec] = Field(min_length=1, max_length=1)
    sources: list[BuildSource | UrlSource] = Field(min_length=1)
    dataset: DatasetSpec | None = None
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion as exc:
            raise ValueError(f"not a version: {value!r} (expected e.g. '1.0.0')") from exc
        return value

    @property
    def framework_names(self) -> list[str]:
        return [constraint.name for constraint in self.frameworks]

    def constraint_for(self, framework: str) -> FrameworkConstraint | None:
        return next((c for c in self.frameworks if c.name == framework), None)

    def source_for(self, framework: str) -> BuildSource | UrlSource:
        """The URL source for ``framework`` if one is named, else the build source."""
        for source in self.sources:
            if isinstance(source, UrlSource) and source.framework == framework:
                return source
        for source in self.sources:
            if isinstance(source, BuildSource):
                return source
        raise ManifestError(
            f"model {self.name!r} has no source for framework {framework!r}: "
            "expected a 'build' source or a 'url' source for it"
        )


def load_manifest(path: Path) -> ModelManifest:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    try:
        return ModelManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise ManifestError(f"{path}: field '{field}': {first['msg']}") from exc
