"""The one table of frameworks: where each one's predictor class lives, how it is imported,
whether it is installed here and which interpreter runs it. Plain data and the standard
library only, so that the CLI, the zoo and the predictors can all read it."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class FrameworkEntry:
    name: str
    module: str  # where the Predictor subclass lives
    cls: str
    imports: str  # the package the framework is imported as
    distributions: tuple[str, ...]  # PyPI names that may provide it, for its version
    #: A virtualenv (relative to the repository) whose interpreter runs the framework when it
    #: cannot import beside the others (mxnet 1.9 needs numpy 1.23); scripts/setup.sh makes it.
    venv: str | None = None
    #: Imports here but must not share a process with torch's compiler stack (TensorFlow's
    #: global LLVM symbols crash torch's Triton: ``mlms.isolation``), so the embedded client
    #: runs it in an agent of its own on this interpreter.
    own_process: bool = False
    #: The framework whose stored asset it runs (Keras on JAX runs the TensorFlow agent's
    #: ``.keras`` files); None: an asset of its own.
    assets_of: str | None = None


TABLE: dict[str, FrameworkEntry] = {
    "torch": FrameworkEntry(
        "torch", "mlms.predictors.torch_predictor", "TorchPredictor", "torch", ("torch",)
    ),
    "onnxruntime": FrameworkEntry(
        "onnxruntime",
        "mlms.predictors.onnxruntime_predictor",
        "OnnxRuntimePredictor",
        "onnxruntime",
        ("onnxruntime", "onnxruntime-gpu"),
    ),
    "tensorflow": FrameworkEntry(
        "tensorflow",
        "mlms.predictors.tensorflow_predictor",
        "TensorFlowPredictor",
        "tensorflow",
        ("tensorflow-cpu", "tensorflow", "tensorflow-gpu"),
        own_process=True,
    ),
    # Keras 3 on the JAX backend: Keras picks its backend once per process (KERAS_BACKEND), so
    # it runs in an agent of its own, like TensorFlow.
    "jax": FrameworkEntry(
        "jax",
        "mlms.predictors.jax_predictor",
        "JaxPredictor",
        "jax",
        ("jax",),
        own_process=True,
        assets_of="tensorflow",
    ),
    "mxnet": FrameworkEntry(
        "mxnet",
        "mlms.predictors.mxnet_predictor",
        "MXNetPredictor",
        "mxnet",
        ("mxnet", "mxnet-mkl", "mxnet-cu112"),
        venv=".venv-mxnet",
    ),
}


#: The frameworks mlms knows, in the order it prefers them.
FRAMEWORKS = tuple(TABLE)


def installed_version(name: str) -> str | None:
    entry = TABLE.get(name)
    if entry is None or importlib.util.find_spec(entry.imports) is None:
        return None
    for distribution in entry.distributions:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def own_interpreter(name: str) -> Path | None:
    """The Python that runs ``name`` in its own virtualenv, when it does not import here.

    ``MLMS_<NAME>_PYTHON`` overrides the table's virtualenv. None when the framework imports in
    this environment or has no environment of its own."""
    entry = TABLE.get(name)
    if entry is None or entry.venv is None or installed_version(name) is not None:
        return None
    override = os.environ.get(f"MLMS_{name.upper()}_PYTHON")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / entry.venv / "bin" / "python"


def runs_apart(name: str) -> bool:
    """Whether ``name`` runs in a process of its own (a child agent) when this process would
    otherwise load it beside other frameworks: it imports only in its own virtualenv, or its
    native libraries clash with torch's."""
    entry = TABLE.get(name)
    return entry is not None and (entry.own_process or own_interpreter(name) is not None)


def loaded_apart() -> str | None:
    """The framework loaded in this process that must not meet torch's compiler stack (in a
    TensorFlow agent: tensorflow), if any."""
    for name, entry in TABLE.items():
        if entry.own_process and entry.imports in sys.modules:
            return name
    return None


def asset_framework(name: str) -> str:
    """The framework whose asset ``name`` runs (itself, unless it shares another's)."""
    entry = TABLE.get(name)
    return entry.assets_of if entry is not None and entry.assets_of else name


def installed_frameworks() -> dict[str, str]:
    """Framework name -> version, for those that can run in this environment."""
    found = {name: installed_version(name) for name in TABLE}
    return {name: version for name, version in found.items() if version}
