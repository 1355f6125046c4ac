"""A child process that ends with its parent (Linux's PR_SET_PDEATHSIG): the workers of
``mlms agent --gpus`` and ``mlms server --workers`` must not outlive a parent killed with
SIGKILL, which gets no chance to stop them."""

from __future__ import annotations

import contextlib
import signal
import sys

#: prctl's option that names the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def end_with_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
