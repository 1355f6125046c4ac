"""An exception raised inside a framework or library, as one line: the library (the package of
the innermost frame outside Python's own modules, or the module an attribute is missing from),
its version, and the reason, e.g. ``bert_base on torch: transformers 5.17.0 has no
modeling_utils.no_init_weights``.

The traceback stays with the error (``LibraryFailure.details``), also across the pipe of a
process of its own (``mlms.isolation``), and goes to the log of the process that reports it
(``log_traceback``: the command's log file, or the agent's log), never to the user's terminal.
An exception whose innermost frame is mlms's is mlms's own bug (also where a library called mlms
back) and is not translated: it stays an internal error, with its traceback in the log as well.
"""

from __future__ import annotations

import logging
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from mlms.errors import LibraryFailure, MlmsError
from mlms.reasons import short_reason

#: Where library failures' tracebacks are logged: ``mlms.cli.main`` sends it to the command's
#: log file alone; elsewhere (an agent) it goes wherever the process logs.
TRACEBACKS = logging.getLogger("mlms.tracebacks")

T = TypeVar("T")

#: Modules whose frames are mlms's own, and Python's (skipped: a library's error often surfaces
#: through them).
_OWN = {"mlms", "__main__"}
_PYTHON = {"builtins", *sys.stdlib_module_names}


@contextmanager
def library_failures(subject: str) -> Iterator[None]:
    """Raise a library's exception inside as a ``LibraryFailure`` whose message starts with
    ``subject`` (``bert_base on torch``); mlms's own errors and bugs pass unchanged."""
    try:
        yield
    except MlmsError:
        raise
    except Exception as exc:
        reason = library_reason(exc)
        if reason is None:
            raise
        details = "".join(traceback.format_exception(exc))
        raise LibraryFailure(f"{subject}: {reason}", details) from exc


def library_reason(exc: BaseException) -> str | None:
    """``LIBRARY VERSION has no MODULE.NAME`` or ``LIBRARY VERSION: Type: message``; None when
    no library raised ``exc``."""
    owner = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
    if isinstance(owner, types.ModuleType) and _library(owner.__name__):
        top, _, below = owner.__name__.partition(".")
        return f"{_versioned(top)} has no {below + '.' if below else ''}{exc.name}"  # type: ignore[attr-defined]
    library = _raised_in(exc)
    if library is None:
        return None
    return f"{_versioned(library)}: {type(exc).__name__}: {short_reason(exc)}"


def _raised_in(exc: BaseException) -> str | None:
    """The library of the innermost frame outside Python's own modules; None where that frame
    is mlms's (a bug of mlms, also when a library called it back)."""
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        top = frame.f_globals.get("__name__", "").partition(".")[0]
        if top in _OWN:
            return None
        if _library(top):
            return top
    return None


def log_traceback(error: MlmsError) -> bool:
    """Log the traceback a ``LibraryFailure`` carries; False when there is none to log."""
    details = getattr(error, "details", "")
    if details:
        TRACEBACKS.error("%s\n%s", error, details.rstrip())
    return bool(details)


def _library(module: str) -> str | None:
    top = module.partition(".")[0]
    own = top in _OWN or top in _PYTHON or top.startswith("_")
    return None if not top or own else top


def _versioned(top: str) -> str:
    version = getattr(sys.modules.get(top), "__version__", None)
    if not isinstance(version, str):
        from importlib import metadata

        try:
            version = metadata.version(top)
        except metadata.PackageNotFoundError:
            return top
    return f"{top} {version}"


def calling(subject: str, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` inside ``library_failures(subject)``: what a process of its own runs
    (``mlms.isolation``), where the traceback still has its frames."""
    with library_failures(subject):
        return function(*args)
