"""Short one-line reasons and values for error messages (a message is one line; gRPC trailers
hold 8 KiB).

Connection failures from requests/urllib3 nest the OS error several layers deep in a long
repr; users need the ``[Errno 111] Connection refused`` part.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

_ERRNO = re.compile(r"\[Errno -?\d+\][^'\")]*")


def short_reason(exc: BaseException, text: str | None = None, limit: int = 200) -> str:
    """``text`` (default ``str(exc)``) on one line; the OS error alone when there is one."""
    text = text or str(exc) or type(exc).__name__
    errno = _ERRNO.search(text)
    if errno:
        text = f"{type(exc).__name__}: {errno.group(0).strip()}"
    return " ".join(text.split())[:limit]


def short(value: object, limit: int = 80) -> str:
    """A value for a one-line message: its repr on one line, at most ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def short_numbers(values: Sequence[int], keep: int = 8) -> str:
    """A list of numbers (a shape, batch sizes) for a message: a hundred axes are not worth a
    hundred numbers."""
    if len(values) <= keep:
        return str(list(values))
    return f"[{', '.join(map(str, values[:keep]))}, ...] ({len(values)} in all)"


def one_line(exc: ValidationError) -> str:
    """A validation error's first problem: the field, what is wrong, the value it got."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "value"
    if first["type"] == "value_error":  # the validator's own message names the value
        return f"{field}: {first['msg'].removeprefix('Value error, ')}"
    return f"{field}: {first['msg']}, got {short(first['input'])}"
