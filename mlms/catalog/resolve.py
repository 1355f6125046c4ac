"""The one way to find a model by what a user typed: a zoo name, a library's architecture
(``timm:NAME``, ``torchvision:NAME``), a model added to the store (``NAME`` or
``NAME@VERSION``), a model file or folder path, or a Hub id (``hf:ORG/NAME``).

Every caller (runner, agents, server, client, load generator, bounds, sweeps) asks here, so an
added model is found wherever a zoo model is. A path or Hub id is read once per process for the
same file (its size and modification time) and shapes.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Sequence
from pathlib import Path

from mlms.assets.file_models import NAME, ModelOptions, manifest_for
from mlms.assets.formats import open_artifact
from mlms.assets.model_store import stored_manifest, stored_manifests
from mlms.assets.signatures import read_signature
from mlms.catalog import hub, library_models, zoo
from mlms.errors import InvalidArgument, UnknownModel
from mlms.manifest import InputShape, ModelManifest
from mlms.store.base import ObjectStore


def is_path(name: str) -> bool:
    """Whether ``name`` names a file or folder rather than a model."""
    if "/" in name or os.sep in name or name.startswith(("~", ".")):
        return True
    try:
        return Path(name).exists()
    except (OSError, ValueError):  # too long a name, or a NUL in it: no file of that name
        return False


def is_local(name: str) -> bool:
    """A model read where the caller is (a path), which a server cannot see."""
    return not hub.is_hub_id(name) and is_path(name)


def resolve_model(
    name: str,
    store: ObjectStore | None = None,
    *,
    input_shapes: Sequence[InputShape] = (),
) -> ModelManifest:
    """The manifest ``name`` stands for; ``UnknownModel`` naming the close matches."""
    zoo_models = {m.name: m for m in zoo.all_models()}
    if name in zoo_models:
        return zoo_models[name]
    if library_models.is_library_name(name):
        return library_models.library_manifest(name)
    if hub.is_hub_id(name):
        folder = hub.hub_folder(name)
        return _file_manifest(str(folder), name, _key(input_shapes), _stamp(folder))
    if is_path(name):
        path = Path(name).expanduser().resolve()
        return _file_manifest(str(path), str(path), _key(input_shapes), _stamp(path))
    base, _, version = name.partition("@")
    if store is not None and NAME.fullmatch(base) and ".." not in base:
        manifest = stored_manifest(store, base, version or None)
        if manifest is not None:
            return manifest
    known = list(zoo_models)
    if store is not None:
        known += [m.name for m in stored_manifests(store)]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; run 'mlms models' for the list"
    raise UnknownModel(
        f"unknown model {name!r}: not in the zoo, not added to the store, not a file{hint}"
    )


def resolve_served(
    name: str, store: ObjectStore | None, *, input_shapes: Sequence[InputShape] = ()
) -> ModelManifest:
    """``resolve_model`` for a server: a path names a file on the caller's machine, which a
    server never reads."""
    if is_local(name):
        raise InvalidArgument(
            f"model {name!r} is a path: a server never reads files by path; add the model "
            "with 'mlms models add PATH --name NAME --server ...' and evaluate it by name"
        )
    return resolve_model(name, store, input_shapes=input_shapes)


def plausible_model(name: str) -> bool:
    """Whether ``name`` may name a model (zoo, library, added, path or Hub id), checked without
    a store or a library's import."""
    if (
        name in {m.name for m in zoo.all_models()}
        or library_models.is_library_name(name)
        or hub.is_hub_id(name)
        or is_path(name)
    ):
        return True
    base, _, _version = name.partition("@")
    return bool(NAME.fullmatch(base)) and ".." not in base


def all_models(store: ObjectStore | None, *, libraries: bool = False) -> list[ModelManifest]:
    """The zoo's models, with ``libraries`` every library architecture mlms can feed, then
    those added to the store."""
    added = stored_manifests(store) if store is not None else []
    named = library_models.library_manifests() if libraries else []
    return [*zoo.all_models(), *named, *added]


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def _key(shapes: Sequence[InputShape]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((s.name, tuple(s.shape)) for s in shapes)


@functools.lru_cache(maxsize=32)
def _file_manifest(
    path: str,
    source: str,
    shapes: tuple[tuple[str, tuple[int, ...]], ...],
    _stamp: tuple[int, int],
) -> ModelManifest:
    input_shapes = [InputShape(name=name, shape=list(shape)) for name, shape in shapes]
    artifact = open_artifact(Path(path))
    return manifest_for(
        artifact,
        read_signature(artifact.path, artifact.format),
        ModelOptions(input_shapes=input_shapes),
        origin="hub" if hub.is_hub_id(source) else "file",
        source=source,
    )
