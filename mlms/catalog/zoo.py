"""The model zoo: every manifest under ``mlms/catalog/models`` (and ``$MLMS_ZOO_PATH`` folders),
and every row of the tables under ``mlms/catalog/tables``.

A table is a family of models as data: ``defaults`` (a partial manifest) and ``models`` (rows,
each a partial manifest merged over the defaults: mappings key by key, a one-item list such as
``inputs`` item by item); a row's ``builder`` becomes its build source (seed 0) and its
``family`` an attribute. Other top-level keys hold values that rows share by YAML anchor.
"""

from __future__ import annotations

import difflib
import os
from functools import cache
from pathlib import Path

from mlms.errors import ManifestError, UnknownModel
from mlms.manifest import ModelManifest, load_manifest, load_yaml, manifest_from_data

BUILTIN_DIR = Path(__file__).parent / "models"
TABLES_DIR = Path(__file__).parent / "tables"
LABELS_DIR = Path(__file__).parent / "labels"


def merged(base: object, over: object) -> object:
    """``over`` laid over ``base``: mappings key by key, lists of equal length item by item."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {key: merged(base.get(key), value) for key, value in over.items()} | {
            key: value for key, value in base.items() if key not in over
        }
    if isinstance(base, list) and isinstance(over, list) and len(base) == len(over):
        return [merged(b, o) for b, o in zip(base, over, strict=True)]
    return over


def table_manifests(path: Path) -> list[ModelManifest]:
    """The manifests of the table at ``path``."""
    data = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ManifestError(f"{path}: expected a mapping with 'defaults' and a list 'models'")
    defaults = data.get("defaults") or {}
    manifests = []
    for number, row in enumerate(data["models"], start=1):
        if not isinstance(row, dict) or "builder" not in row or "name" not in row:
            raise ManifestError(f"{path}: model {number}: expected a mapping with name and builder")
        row = dict(row)
        row["sources"] = [{"kind": "build", "builder": row.pop("builder"), "seed": 0}]
        if "family" in row:
            row["attributes"] = {**row.get("attributes", {}), "family": row.pop("family")}
        manifests.append(manifest_from_data(merged(defaults, row), f"{path}: {row['name']}"))
    return manifests


def manifest_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("MLMS_ZOO_PATH", "").split(os.pathsep) if p]
    return [BUILTIN_DIR, *extra]


@cache
def _load_all(dirs: tuple[Path, ...]) -> dict[str, ModelManifest]:
    manifests: dict[str, ModelManifest] = {}
    for table in sorted(TABLES_DIR.glob("*.yaml")):
        for manifest in table_manifests(table):
            if manifest.name in manifests:
                raise ManifestError(f"{table}: model {manifest.name!r} is named twice")
            manifests[manifest.name] = manifest
    for folder in dirs:
        for path in sorted(folder.glob("*.yaml")):
            manifest = load_manifest(path)
            if manifest.name != path.stem:
                raise ManifestError(
                    f"{path}: field 'name': {manifest.name!r} differs from the file name "
                    f"{path.stem!r}"
                )
            manifests[manifest.name] = manifest
    return manifests


def all_models() -> list[ModelManifest]:
    return sorted(_load_all(tuple(manifest_dirs())).values(), key=lambda m: m.name)


def get_model(name: str) -> ModelManifest:
    manifests = _load_all(tuple(manifest_dirs()))
    if name in manifests:
        return manifests[name]
    close = difflib.get_close_matches(name, manifests, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; run 'mlms models' for the list"
    raise UnknownModel(f"unknown model {name!r}{hint}")


def labels_of(manifest: ModelManifest) -> list[str]:
    """The class names; empty for a vocabulary (its classes are token ids)."""
    labels = manifest.outputs[0].labels
    if labels is None:
        return []
    if isinstance(labels, list):
        return labels
    path = LABELS_DIR / f"{labels}.txt"
    if not path.is_file():
        raise ManifestError(f"model {manifest.name!r}: no label file {labels!r} in {LABELS_DIR}")
    return path.read_text().splitlines()
