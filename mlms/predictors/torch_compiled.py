"""torch.compile's caches belong to the process: Dynamo keeps the code it compiled for a Python
function (a model class's ``forward``) across every instance of that class, and once a function
has ``recompile_limit`` (8) variants it runs each new one eager, silently, while the record says
compiled. A process that evaluates many compiled configurations of one model (an agent, advise,
a sweep) measured eager models from the ninth on, and the second and later compiles of a model
took well under a second, which no fresh process sees. So a compiled model starts from an empty
cache, as in a fresh process, unless another compiled model is in use in the process (emptying
the cache then would make that one compile again inside its timed loop)."""

from __future__ import annotations

import threading
from typing import Any


class CompiledModels:
    """The compiled models in use in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_use = 0

    def opened(self, torch: Any) -> None:
        """One more in use; the first after none empties torch.compile's caches."""
        with self._lock:
            if self._in_use == 0:
                torch.compiler.reset()
            self._in_use += 1

    def closed(self) -> None:
        with self._lock:
            self._in_use -= 1


COMPILED = CompiledModels()
