"""What the fork server of ``mlms.isolation`` imports before it forks any child: each module of
``PRELOAD`` that loads. multiprocessing's own preload skips only an ImportError, and any other
failure (a library whose native part fails to load raises OSError) would stop the server, and
with it every call; here such a module is left out, and the child that needs it meets the error
itself, as it would have without a server. The server finds this module, and so the children
their ``mlms``, on the interpreter's own path (its environment's ``PYTHONPATH`` included), not
on paths a caller added to ``sys.path`` at run time."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

#: What the asset builders and the signature readers import first. Each must leave TensorFlow
#: and Triton unloaded (``mlms.isolation`` says why); one that fails to load is left out.
PRELOAD = ("torch", "torch.onnx", "onnxscript", "sympy", "networkx")


def preload(names: Iterable[str]) -> list[str]:
    """Import each of ``names`` that loads; the names that did."""
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # whatever fails here is the child's to report, when it needs it
            continue
        loaded.append(name)
    return loaded


preload(PRELOAD)
