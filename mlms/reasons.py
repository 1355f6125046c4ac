"""Short one-line reasons from library exceptions, for the messages adapters raise.

Connection failures from requests/urllib3 nest the OS error several layers deep in a long
repr; users need the ``[Errno 111] Connection refused`` part.
"""

from __future__ import annotations

import re

_ERRNO = re.compile(r"\[Errno -?\d+\][^'\")]*")


def short_reason(exc: BaseException, text: str | None = None, limit: int = 200) -> str:
    """``text`` (default ``str(exc)``) on one line; the OS error alone when there is one."""
    text = text or str(exc) or type(exc).__name__
    errno = _ERRNO.search(text)
    if errno:
        text = f"{type(exc).__name__}: {errno.group(0).strip()}"
    return " ".join(text.split())[:limit]
