"""transformers without TensorFlow: transformers imports TensorFlow whenever it finds it
installed, and TensorFlow must not share a process with torch's compiler stack
(``mlms.isolation``). transformers reads the switch once, when it is first imported, so every
import of it goes through here."""

from __future__ import annotations

import os
from types import ModuleType


def import_transformers() -> ModuleType:
    os.environ.setdefault("USE_TF", "0")
    import transformers

    return transformers
