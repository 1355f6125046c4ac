"""Every store key of a model (docs/DESIGN.md, "Object store layout") is built here: an asset's
files and its ``asset.json`` under ``models/``, an added model's manifest under ``manifests/``.
The asset manager and the model store both write these keys, so both take them from here.

Standard library only: the model store lists, adds and removes models, and resolving a name
reads added manifests, without the numpy and framework imports of the asset manager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlms.manifest import ModelManifest

#: Every framework's asset of every model: ``models/<name>/<version>/<framework>/<file>``.
MODELS = "models/"
#: Added models' manifests: ``manifests/<name>/<version>.yaml``.
MANIFESTS = "manifests/"
#: Beside an asset's file: its name, size and sha256. Written last, so that its presence says
#: the asset is complete.
ASSET_INFO = "asset.json"


def model_prefix(name: str, version: str) -> str:
    """Where every framework's asset of one version of a model lies."""
    return f"{MODELS}{name}/{version}/"


def asset_prefix(manifest: ModelManifest, framework: str) -> str:
    """The folder of one framework's asset of a model, without a trailing slash (the name of
    its builders' lock too)."""
    return f"{model_prefix(manifest.name, manifest.version)}{framework}"


def asset_key(prefix: str, *path: str) -> str:
    """A file of the asset under ``prefix``; a folder artifact's file is its folder's name,
    then its path inside."""
    return "/".join((prefix, *path))


def info_key(prefix: str) -> str:
    """The ``asset.json`` of the asset under ``prefix``."""
    return asset_key(prefix, ASSET_INFO)


def manifests_prefix(name: str) -> str:
    """Where every version's manifest of an added model lies."""
    return f"{MANIFESTS}{name}/"


def manifest_key(name: str, version: str) -> str:
    return f"{manifests_prefix(name)}{version}.yaml"
