"""The model zoo: every manifest under ``mlms/zoo/models`` (and ``$MLMS_ZOO_PATH`` folders)."""

from __future__ import annotations

import difflib
import os
from functools import cache
from pathlib import Path

from mlms.errors import ManifestError, UnknownModel
from mlms.zoo.manifest import ModelManifest, load_manifest

BUILTIN_DIR = Path(__file__).parent / "models"
LABELS_DIR = Path(__file__).parent / "labels"


def manifest_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("MLMS_ZOO_PATH", "").split(os.pathsep) if p]
    return [BUILTIN_DIR, *extra]


@cache
def _load_all(dirs: tuple[Path, ...]) -> dict[str, ModelManifest]:
    manifests: dict[str, ModelManifest] = {}
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
