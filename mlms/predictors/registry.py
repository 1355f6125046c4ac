"""Which framework runs a model, and the predictor class that serves it (the frameworks' table
is ``mlms.frameworks``)."""

from __future__ import annotations

import importlib

from mlms.errors import UnsupportedFramework
from mlms.frameworks import FRAMEWORKS, TABLE, installed_frameworks
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor


def choose_framework(manifest: ModelManifest, requested: str | None) -> tuple[str, str]:
    """(framework, version) for the model: the requested one, else the first installed it
    supports. Raises ``UnsupportedFramework`` saying what would work."""
    installed = installed_frameworks()
    if requested is not None:
        if requested not in FRAMEWORKS:
            raise UnsupportedFramework(
                f"unknown framework {requested!r}; expected one of: {', '.join(FRAMEWORKS)}"
            )
        constraint = manifest.constraint_for(requested)
        if constraint is None:
            raise UnsupportedFramework(
                f"model {manifest.name!r} does not support framework {requested!r}; it "
                f"supports: {', '.join(manifest.framework_names)}"
            )
        version = installed.get(requested)
        if version is None:
            raise UnsupportedFramework(
                f"framework {requested!r} is not installed here (installed: "
                f"{', '.join(installed) or 'none'}); install the mlms[{requested}] extra"
            )
        if not constraint.admits(version):
            raise UnsupportedFramework(
                f"model {manifest.name!r} needs {requested} {constraint.version}, "
                f"installed is {version}"
            )
        return requested, version
    for constraint in manifest.frameworks:
        version = installed.get(constraint.name)
        if version and constraint.admits(version):
            return constraint.name, version
    raise UnsupportedFramework(
        f"no installed framework runs model {manifest.name!r}: it supports "
        f"{', '.join(manifest.framework_names)}; installed: {', '.join(installed) or 'none'}"
    )


def predictor_class(name: str) -> type[Predictor]:
    entry = TABLE.get(name)
    if entry is None:
        raise UnsupportedFramework(
            f"unknown framework {name!r}; expected one of: {', '.join(TABLE)}"
        )
    return getattr(importlib.import_module(entry.module), entry.cls)
