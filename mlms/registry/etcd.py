"""The registry in etcd, over etcd's v3 HTTP gateway (``/v3/...``) with the ``etcd3gw`` client.

The HTTP gateway keeps etcd's own gRPC/protobuf stack out of this process (ours is newer than
what the gRPC etcd clients build against). Watches poll the prefix every ``WATCH_EVERY``
seconds rather than holding a gateway watch stream: a poll is one small range request, it
survives etcd restarts without any reconnection logic, and ``Fleet`` resyncs anyway.
Every etcd3gw exception is translated into ``Unavailable`` here, naming the address.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator
from typing import TypeVar

import etcd3gw
import requests
from etcd3gw import exceptions as etcd_errors

from mlms.errors import Unavailable
from mlms.reasons import short_reason
from mlms.registry.base import ROOT, WatchCallback, validate_key
from mlms.registry.keeper import Holdings, KeptLease, PrefixWatch

log = logging.getLogger(__name__)

#: Seconds between two reads of a watched prefix.
WATCH_EVERY = 0.2
#: Seconds one HTTP call to etcd may take; short, so that a hung etcd reads as down.
TIMEOUT = 3.0

T = TypeVar("T")


class EtcdRegistry:
    """A ``Registry`` on etcd at ``host:port``; fails with ``Unavailable`` at once when etcd
    does not answer."""

    def __init__(self, host: str, port: int) -> None:
        self.address = f"{host}:{port}"
        self.url = f"etcd://{self.address}"
        self._client = etcd3gw.Etcd3Client(host, port, timeout=TIMEOUT, api_path="/v3/")
        self._held = Holdings()
        self._call("status", self._client.status)

    # -- Registry -----------------------------------------------------------------------
    def lease(self, ttl: float) -> KeptLease:
        return self._held.lease(self, ttl)

    def get(self, key: str) -> bytes | None:
        values = self._call("get", self._client.get, ROOT + validate_key(key))
        return bytes(values[0]) if values else None

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        full = ROOT + validate_key(prefix, prefix=True)
        found = self._call("get_prefix", self._client.get_prefix, full, sort_target="key")
        return {meta["key"].decode()[len(ROOT) :]: bytes(value) for value, meta in found}

    def watch_prefix(self, prefix: str, callback: WatchCallback) -> PrefixWatch:
        return self._held.watch(
            lambda: self.get_prefix(prefix), callback, every=WATCH_EVERY, prefix=prefix
        )

    def close(self) -> None:
        self._held.close()
        self._client.session.close()

    # -- LeaseBackend (for KeptLease) ---------------------------------------------------
    def grant(self, ttl: float) -> int:
        # etcd counts whole seconds (and raises anything below its minimum, ~2 s by default).
        return self._call("lease grant", self._client.lease, math.ceil(ttl)).id

    def keep_alive(self, lease_id: int) -> bool:
        return self._call("lease keepalive", self._lease(lease_id).refresh) > 0

    def put(self, key: str, value: bytes, lease_id: int) -> None:
        self._call("put", self._client.put, ROOT + key, value, lease=self._lease(lease_id))

    def delete(self, key: str) -> None:
        self._call("delete", self._client.delete, ROOT + key)

    def revoke(self, lease_id: int) -> None:
        with self._missing_lease_is_fine():
            self._call("lease revoke", self._lease(lease_id).revoke)

    # -- the adapter ----------------------------------------------------------------------
    def _lease(self, lease_id: int) -> etcd3gw.Lease:
        return etcd3gw.Lease(lease_id, self._client)

    def _call(self, what: str, call: Callable[..., T], *args, **kwargs) -> T:
        try:
            return call(*args, **kwargs)
        except (etcd_errors.Etcd3Exception, requests.RequestException) as exc:
            raise Unavailable(
                f"etcd at {self.address} is unavailable ({what}): {_reason(exc)}"
            ) from exc

    @contextlib.contextmanager
    def _missing_lease_is_fine(self) -> Iterator[None]:
        try:
            yield
        except Unavailable as exc:
            if "lease not found" not in str(exc):
                raise


def _reason(exc: Exception) -> str:
    """etcd's own message when it answered (a JSON body), else the connection failure."""
    text = getattr(exc, "detail_text", None) or str(exc)
    try:
        body = json.loads(text)
        text = body.get("message") or body.get("error") or text
    except (ValueError, AttributeError):
        pass
    return short_reason(exc, str(text), limit=300)
