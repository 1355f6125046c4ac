"""A data set in the store: its index, where its parts live, and how it is found.

Layout (``datasets/<name>/<version>/``): ``shards/<sha256>.parquet`` (named by their content,
so a replacement never overwrites a shard a reader may hold) and ``index.json``, written last:
a data set exists once its index does, and only whole.

Kinds: ``images`` (column ``image``: the encoded file's bytes, decoded in the evaluation's
pipeline), ``arrays`` (one fixed-shape column per model input) and ``text`` (``text`` or
``input_ids``). A classification data set has a ``label`` column: integer class indices, or
class names (listed in ``label_names``, mapped to the model's labels by name). The other tasks
(``task``) carry their own truth: ``detection`` images an ``image_id`` and ``annotations`` (the
image's COCO annotations as JSON, with the data set's ``categories``); ``segmentation`` images a
``mask`` (a PNG of class indices, ``label_max`` the largest); ``translation`` text a
``reference``; ``language_modeling`` text or token ids alone.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlms.errors import InvalidArgument, StoreError, UnknownDataset
from mlms.store.base import ObjectStore

PREFIX = "datasets/"
INDEX = "index.json"
DEFAULT_VERSION = "1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class Shard(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    samples: int = Field(ge=1)
    bytes: int = Field(ge=0)


class Column(BaseModel):
    """One column of an ``arrays`` or ``text`` data set: a sample's shape and dtype."""

    model_config = ConfigDict(frozen=True)

    name: str
    dtype: str
    #: One sample's shape; empty for variable-length token lists and text.
    shape: list[int] = Field(default_factory=list)


#: What a data set's truth is for; ``mlms.accuracy`` scores each.
DatasetTask = Literal[
    "classification", "detection", "segmentation", "translation", "language_modeling"
]


class DatasetIndex(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    kind: Literal["images", "arrays", "text"]
    task: DatasetTask = "classification"
    #: Detection: the COCO category ids the annotations use, and their names.
    categories: dict[int, str] | None = None
    samples: int = Field(ge=1)
    #: The class names where the labels are names; None where they are integer indices.
    label_names: list[str] | None = None
    #: Integer labels: the largest (checked against the model's outputs before a run).
    label_max: int | None = Field(default=None, ge=0)
    columns: list[Column]
    shards: list[Shard] = Field(min_length=1)
    source: str
    created_at: datetime


def check_name(value: str, what: str) -> str:
    """A data set's name or version: it becomes part of a store key, so one plain name."""
    if not _NAME.fullmatch(value) or ".." in value:
        shown = repr(value) if len(value) <= 60 else f"{value[:57]!r}..."
        raise InvalidArgument(
            f"data set {what} {shown}: expected a plain name of letters, digits, '_', '-' "
            "and '.' (no path separators), like 'digits-holdout'"
        )
    return value


def folder(name: str, version: str) -> str:
    return f"{PREFIX}{check_name(name, 'name')}/{check_name(version, 'version')}/"


def index_key(name: str, version: str) -> str:
    return folder(name, version) + INDEX


def parse_reference(reference: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME@VERSION`` -> (name, version or None for the newest)."""
    name, _, version = reference.partition("@")
    check_name(name, "name")
    if version:
        check_name(version, "version")
    return name, version or None


def list_indexes(store: ObjectStore, name: str = "") -> list[tuple[DatasetIndex, str]]:
    """Every data set in the store (every version of ``name`` where given) with its index's
    sha256, by name then version."""
    found = []
    for key in store.list(f"{PREFIX}{name}/" if name else PREFIX):
        parts = key.split("/")
        if len(parts) == 4 and parts[3] == INDEX:
            found.append(_read(store, key))
    return sorted(found, key=lambda item: (item[0].name, _version_order(item[0].version)))


def load_index(store: ObjectStore, reference: str) -> tuple[DatasetIndex, str]:
    """The index of ``NAME[@VERSION]`` (the newest version when none is named) and its sha256."""
    name, version = parse_reference(reference)
    if version is None:
        versions = [
            key.split("/")[2]
            for key in store.list(f"{PREFIX}{name}/")
            if key.count("/") == 3 and key.endswith(f"/{INDEX}")
        ]
        if not versions:
            raise UnknownDataset(
                f"unknown data set {name!r} in store {store.url}; 'mlms datasets' lists them"
            )
        version = max(versions, key=_version_order)
    key = index_key(name, version)
    if not store.exists(key):
        raise UnknownDataset(
            f"unknown data set {name!r} version {version!r} in store {store.url}; "
            "'mlms datasets' lists them"
        )
    return _read(store, key)


def _read(store: ObjectStore, key: str) -> tuple[DatasetIndex, str]:
    data = store.get_bytes(key)
    try:
        return DatasetIndex.model_validate_json(data), hashlib.sha256(data).hexdigest()
    except ValueError as exc:
        raise StoreError(f"data set index {key!r} in {store.url} does not validate: {exc}") from exc


def _version_order(version: str) -> tuple[int, ...] | tuple[float]:
    """Numeric versions ("1", "2.1") in number order, after them the others."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return (float("inf"),)


def remove(store: ObjectStore, reference: str) -> list[DatasetIndex]:
    """Remove ``NAME`` (every version) or ``NAME@VERSION``: the index first, so that a reader
    never finds a data set with shards missing; then the shards."""
    name, version = parse_reference(reference)
    indexes = (
        [load_index(store, reference)[0]]
        if version
        else [index for index, _ in list_indexes(store, name)]
    )
    if not indexes:
        raise UnknownDataset(f"unknown data set {name!r} in store {store.url}")
    for index in indexes:
        prefix = folder(index.name, index.version)
        store.delete(prefix + INDEX)
        for key in store.list(prefix):
            store.delete(key)
    return indexes
