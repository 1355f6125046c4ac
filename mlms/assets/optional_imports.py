"""Importing a framework without the packages it loads only because they are installed.

Keras loads scikit-learn, pandas and matplotlib, TensorFlow Lite's converter JAX, and
transformers' generation utilities scikit-learn, each for features mlms does not use, and
together they are half of ``import tensorflow`` here and a quarter of importing a transformers
model (``python -X importtime``), paid again by every agent and asset builder that imports one.
The names each framework is imported without live beside its import (``mlms.assets.keras_models``,
``mlms.assets.transformers_import``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without(names: tuple[str, ...]) -> Iterator[None]:
    """Imports inside see the packages ``names`` (those not loaded yet) as not installed, as
    Python's import system does for a ``None`` in ``sys.modules``; afterwards they import again,
    and only the framework's own optional features stay off in this process.

    Meant for the first import of a framework, while no other thread of the process imports
    these packages: the processes that import frameworks load pandas beforehand (so it is left
    alone) and never scikit-learn, matplotlib or, beside TensorFlow, JAX."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, object()) is None:
                del sys.modules[name]
