"""Models users add to the store (docs/DESIGN.md, "Object store layout").

An added model is its artifact under ``models/<name>/<version>/<framework>/`` beside
``asset.json`` (the file's name, size and sha256, as for zoo assets; a folder's files are listed
with theirs) and its manifest at ``manifests/<name>/<version>.yaml`` (origin user). Writes go
artifact first, ``asset.json`` next, the manifest last: a model is visible only once complete,
and a failure part-way deletes what it wrote. Removal deletes the manifest first.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from packaging.version import InvalidVersion, Version

from mlms.assets.file_models import ModelOptions, check_name, manifest_for
from mlms.assets.formats import Artifact, open_artifact
from mlms.assets.keys import (
    MANIFESTS,
    asset_key,
    asset_prefix,
    info_key,
    manifest_key,
    manifests_prefix,
    model_prefix,
)
from mlms.assets.signatures import read_signature
from mlms.errors import AlreadyExists, InvalidArgument, MlmsError, UnknownModel
from mlms.manifest import ModelManifest, dump_manifest, parse_manifest
from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)


def stored_versions(store: ObjectStore, name: str) -> list[str]:
    """The versions of ``name`` in the store, oldest first."""
    prefix = manifests_prefix(name)
    versions = [key[len(prefix) : -len(".yaml")] for key in store.list(prefix)]
    return sorted((v for v in versions if "/" not in v), key=_order)


def _order(version: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def stored_manifest(
    store: ObjectStore, name: str, version: str | None = None
) -> ModelManifest | None:
    """The stored manifest of ``name`` (its newest version unless ``version``), if any."""
    versions = stored_versions(store, name)
    if version is None:
        version = versions[-1] if versions else None
    if version is None or version not in versions:
        return None
    key = manifest_key(name, version)
    return parse_manifest(store.get_bytes(key).decode("utf-8"), f"{store.url}/{key}")


def stored_manifests(store: ObjectStore) -> list[ModelManifest]:
    """The newest version of every added model, by name."""
    names = sorted({key.split("/")[1] for key in store.list(MANIFESTS) if key.count("/") == 2})
    found = []
    for name in names:
        try:
            manifest = stored_manifest(store, name)
        except MlmsError as exc:  # one bad manifest must not hide the others
            log.warning("skipping the manifest of %r: %s", name, exc)
            continue
        if manifest is not None:
            found.append(manifest)
    return found


def add_model(
    store: ObjectStore,
    path: Path,
    options: ModelOptions,
    *,
    replace: bool = False,
    source: str | None = None,
    taken: frozenset[str] = frozenset(),
    sha256: str | None = None,
) -> ModelManifest:
    """Store the artifact at ``path`` as ``options.name``; its manifest. ``source`` names the
    artifact in the manifest (an upload's file name, never a path on the server); ``taken``:
    names no added model may have (the zoo's); ``sha256``: the file's, where the caller has
    just hashed its bytes."""
    if not options.name:
        raise InvalidArgument("a model added to the store needs a name: give --name NAME")
    name = check_name(options.name)
    if name in taken:
        raise AlreadyExists(f"model name {name!r} is a zoo model's: pick another --name")
    artifact = open_artifact(path, sha256)
    manifest = manifest_for(
        artifact,
        read_signature(artifact.path, artifact.format),
        options,
        origin="user",
        source=source or artifact.path.name,
    )
    key = manifest_key(name, manifest.version)
    if store.exists(key):
        if not replace:
            raise AlreadyExists(
                f"model {name!r} version {manifest.version} is in the store already: "
                "--replace overwrites it, or give another --name or --version"
            )
        remove_model(store, name, manifest.version)
    written: list[str] = []
    try:
        _put_artifact(store, manifest, artifact, written)
        store.put_bytes(key, dump_manifest(manifest).encode())
    except BaseException:
        for done in reversed(written):
            try:
                store.delete(done)
            except MlmsError as exc:
                log.warning("could not delete %s after a failed add: %s", done, exc)
        raise
    return manifest


def _put_artifact(
    store: ObjectStore, manifest: ModelManifest, artifact: Artifact, written: list[str]
) -> None:
    source = manifest.file_source
    assert source is not None  # manifest_for always names the file
    prefix = asset_prefix(manifest, source.framework)
    info: dict[str, object] = {
        "file": source.filename,
        "sha256": artifact.sha256,
        "size": artifact.size,
        "source": f"user:{manifest.attributes.get('source', '')}",
    }
    if artifact.files:
        for relative in artifact.files:
            key = asset_key(prefix, source.filename, relative)
            written.append(key)
            store.put_file(key, artifact.path / relative)
        info["files"] = artifact.files
    else:
        key = asset_key(prefix, source.filename)
        written.append(key)
        store.put_file(key, artifact.path)
    written.append(info_key(prefix))
    store.put_bytes(info_key(prefix), json.dumps(info, indent=1).encode())


def remove_model(store: ObjectStore, name: str, version: str | None = None) -> list[str]:
    """Delete an added model (every version, or ``version``): the versions removed."""
    check_name(name)
    versions = stored_versions(store, name)
    if version is not None:
        versions = [v for v in versions if v == version]
    if not versions:
        raise UnknownModel(
            f"no added model {name!r}"
            + (f" version {version}" if version else "")
            + " in the store; 'mlms models' lists them (zoo models cannot be removed)"
        )
    for each in versions:
        store.delete(manifest_key(name, each))  # first: the model is gone from now on
        for key in store.list(model_prefix(name, each)):
            store.delete(key)
    return versions
