"""TLS of mlms's clients (of etcd, S3 and its own servers): PEM files checked when a client
is built, whether a host is loopback, and a handshake failure in a few words. It sits below
the registry, the store and ``mlms.security``, which all use it.

A missing, unreadable or non-PEM file fails at start with one line naming the variable and the
path, rather than as a TLS error at the first call. ``handshake_failure`` turns the nested
requests/urllib3/ssl text of a failed handshake into what an operator can act on.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from mlms.errors import InvalidArgument

_VERIFY = re.compile(r"certificate verify failed: ([^'\"(]*)")
_ALERT = re.compile(r"\] ((?:sslv3|tlsv1\d?) alert [a-z ]+)", re.IGNORECASE)
# A server that breaks off the handshake: one that wants a client certificate (TLS 1.3 sends its
# alert after the client's part is done, so the client often sees only the end of the stream)
# or one that does not speak TLS at all.
_BROKEN_OFF = (
    "EOF occurred in violation of protocol",
    "WRONG_VERSION_NUMBER",
    "record layer failure",
)
_CLIENT_CERT = "it may require a client certificate from a CA it trusts"


def pem_file(variable: str, path: str) -> str:
    """``path`` when it is a readable PEM file; ``variable`` names where it came from."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {variable} {path!r}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise InvalidArgument(f"{variable} {path!r} is not a PEM file (no '-----BEGIN' line)")
    return path


def pem_from_env(
    variables: tuple[str, ...], environ: Mapping[str, str] = os.environ
) -> tuple[str, str] | None:
    """``(variable, path)`` of the first of ``variables`` set (non-empty), checked as a PEM
    file; None when none is set."""
    for variable in variables:
        path = environ.get(variable, "").strip()
        if path:
            return variable, pem_file(variable, path)
    return None


def handshake_failure(text: str) -> str | None:
    """Why a TLS handshake failed, from an exception's text; None when it is no TLS failure."""
    verify = _VERIFY.search(text)
    if verify or "CERTIFICATE_VERIFY_FAILED" in text:
        detail = verify.group(1).strip() if verify else ""
        return f"certificate verify failed: {detail}" if detail else "certificate verify failed"
    alert = _ALERT.search(text)
    if alert:
        return f"the server refused the TLS handshake ({alert.group(1).lower()}); {_CLIENT_CERT}"
    if any(mark in text for mark in _BROKEN_OFF):
        return f"the server broke off the TLS handshake; {_CLIENT_CERT}, or not serve TLS"
    return None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and names that resolve only to them (``localhost``)."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)
