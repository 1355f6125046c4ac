"""transformers without TensorFlow: transformers imports TensorFlow whenever it finds it
installed, and TensorFlow must not share a process with torch's compiler stack
(``mlms.isolation``). transformers reads the switch once, when it is first imported, so every
import of it goes through here.

It also imports scikit-learn when installed (generation's assisted decoding, which mlms does not
use), 1-1.5 s of each process that builds a transformers model; it decides once, on import,
whether scikit-learn is there (``mlms.assets.optional_imports``).

Its progress bars (``Loading weights: 41/41``) stay off: mlms's own progress is on stderr, and
a bar per load between its lines reads as noise."""

from __future__ import annotations

import os
from types import ModuleType

from mlms.assets.optional_imports import without

#: Packages transformers loads only because they are installed.
TRANSFORMERS_EXTRAS = ("sklearn",)


def import_transformers() -> ModuleType:
    os.environ.setdefault("USE_TF", "0")
    with without(TRANSFORMERS_EXTRAS):
        import transformers

    transformers.utils.logging.disable_progress_bar()
    return transformers
