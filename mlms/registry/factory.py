"""The registry named by a URL (``--registry``, ``MLMS_REGISTRY``).

memory://                  an in-memory registry (this process only)
etcd://HOST:PORT           etcd's v3 HTTP gateway, plaintext
etcd+https://HOST:PORT     the same over TLS
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from mlms.errors import InvalidArgument
from mlms.registry.base import Registry


class EtcdEndpoint(NamedTuple):
    host: str
    port: int
    tls: bool


#: Registry URL scheme -> etcd over TLS.
_ETCD_SCHEMES = {"etcd": False, "etcd+https": True}
_EXPECTED = "expected etcd://HOST:PORT, etcd+https://HOST:PORT or memory://"


def parse_registry_url(url: str) -> EtcdEndpoint | None:
    """Where the etcd of an ``etcd://HOST:PORT`` or ``etcd+https://HOST:PORT`` URL is, None
    for ``memory://``; raises ``InvalidArgument`` for anything else. Touches no network."""
    parts = urlsplit(url.strip())
    if parts.scheme == "memory" and not parts.netloc and parts.path in ("", "/"):
        return None
    if parts.scheme in _ETCD_SCHEMES and parts.path in ("", "/") and not parts.query:
        try:
            host, port = parts.hostname, parts.port
        except ValueError:  # a port that is not a number
            host, port = None, None
        if host and port:
            return EtcdEndpoint(host, port, _ETCD_SCHEMES[parts.scheme])
    raise InvalidArgument(f"invalid registry URL {url!r}: {_EXPECTED}")


def registry_from_url(url: str) -> Registry:
    """``memory://`` (this process only), or etcd's v3 HTTP gateway at ``etcd://HOST:PORT``
    (plaintext) or ``etcd+https://HOST:PORT`` (TLS); the CA, client certificate and etcd
    user come from ``MLMS_ETCD_*`` variables (``mlms.registry.etcd``).

    Raises ``InvalidArgument`` for any other URL or a bad variable, ``Unavailable`` (naming
    the address) when etcd does not answer and ``AccessRefused`` when it refuses the
    credentials.
    """
    endpoint = parse_registry_url(url)
    if endpoint is None:
        from mlms.registry.memory import MemoryRegistry

        return MemoryRegistry()
    from mlms.registry.etcd import EtcdRegistry

    return EtcdRegistry.from_env(endpoint.host, endpoint.port, tls=endpoint.tls)
