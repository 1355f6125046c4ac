"""Where mlms keeps its state on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def mlms_home() -> Path:
    """``$MLMS_HOME``, default ``~/.mlms``."""
    return Path(os.environ.get("MLMS_HOME", "~/.mlms")).expanduser()
