"""What every registry shares above its storage: leases kept alive (and re-granted when lost),
prefix watches read again on a nudge, and what a registry hands out, closed with it. A backend
supplies a few primitive calls; this module adds the threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from mlms.errors import MlmsError, Unavailable
from mlms.registry.base import WatchCallback, WatchHandle, validate_key, validate_ttl

log = logging.getLogger(__name__)


class LeaseBackend(Protocol):
    """The storage operations a ``KeptLease`` needs. Each raises ``Unavailable`` when the
    registry cannot be reached."""

    url: str

    def grant(self, ttl: float) -> int: ...

    def keep_alive(self, lease_id: int) -> bool:
        """Refresh the lease; False when it no longer exists (expired, or the store was
        wiped)."""
        ...

    def put(self, key: str, value: bytes, lease_id: int) -> None: ...

    def delete(self, key: str) -> None: ...

    def revoke(self, lease_id: int) -> None: ...


class KeptLease:
    """A lease refreshed every ttl/3 by a daemon thread; re-granted with all its keys when lost.

    The keys it holds are remembered here, so that a lost lease (the registry restarted
    without its data, or was out of reach past the ttl) comes back whole on its own, and a put
    that failed while the registry was down is applied once it answers again.
    """

    def __init__(self, backend: LeaseBackend, ttl: float) -> None:
        self.ttl = validate_ttl(ttl)
        self._backend = backend
        self._keys: dict[str, bytes] = {}
        self._stale: set[str] = set()  # keys whose put or delete has not reached the registry
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._lease_id: int | None = backend.grant(self.ttl)
        self._thread = threading.Thread(target=self._keep, name="mlms-lease", daemon=True)
        self._thread.start()

    @property
    def lease_id(self) -> int | None:
        return self._lease_id

    def put(self, key: str, value: bytes) -> None:
        validate_key(key)
        with self._lock:
            self._keys[key] = value
            self._sync(key)

    def delete(self, key: str) -> None:
        validate_key(key)
        with self._lock:
            if self._keys.pop(key, None) is not None or key in self._stale:
                self._sync(key)

    def refresh(self) -> None:
        """The keeper's next keepalive, now: the lease granted again if the registry lost it,
        and the keys that have not reached the registry put. Raises ``Unavailable``."""
        with self._lock:
            self._refresh()

    def close(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._thread.join()
        with self._lock:
            lease_id, self._lease_id = self._lease_id, None
            self._keys.clear()
        if lease_id is not None:
            try:
                self._backend.revoke(lease_id)
            except MlmsError as exc:  # the registry is down: the ttl removes the keys
                log.warning("could not revoke lease %x at %s: %s", lease_id, self._backend.url, exc)

    def abandon(self) -> None:
        """Stop refreshing without revoking: what the holder's death looks like to the
        registry (its keys expire after the ttl). For tests."""
        self._stopped.set()
        self._thread.join()

    def _sync(self, key: str) -> None:
        """Write one key's state (called under the lock); remember it when that fails."""
        try:
            if self._lease_id is None:
                raise Unavailable(f"registry {self._backend.url}: no lease held")
            if key in self._keys:
                self._backend.put(key, self._keys[key], self._lease_id)
            else:
                self._backend.delete(key)
        except Unavailable:
            self._stale.add(key)
            raise
        self._stale.discard(key)

    def _keep(self) -> None:
        healthy = True
        while not self._stopped.wait(self.ttl / 3 if healthy else min(0.25, self.ttl / 6)):
            try:
                with self._lock:
                    self._refresh()
                if not healthy:
                    log.info("registry %s answers again; lease kept", self._backend.url)
                healthy = True
            except Unavailable as exc:
                if healthy:
                    log.warning("lease keepalive failed, retrying: %s", exc)
                healthy = False

    def _refresh(self) -> None:
        """One keepalive (under the lock): re-grant and re-put everything if the lease is gone,
        then apply the writes that failed while the registry was away."""
        if self._lease_id is None or not self._backend.keep_alive(self._lease_id):
            self._lease_id = None
            self._lease_id = self._backend.grant(self.ttl)
            self._stale.update(self._keys)
            log.warning(
                "lease lost at %s; granted %x and putting %d keys again",
                self._backend.url,
                self._lease_id,
                len(self._keys),
            )
        for key in sorted(self._stale):
            self._sync(key)


class PrefixWatch:
    """Calls ``callback`` with the whole dict under a prefix whenever it differs from the last
    call. It reads on ``poke()`` (a backend that sees its own changes) or every ``every``
    seconds (a backend polled over the network)."""

    def __init__(
        self,
        read: Callable[[], dict[str, bytes]],
        callback: WatchCallback,
        *,
        every: float,
        prefix: str,
    ) -> None:
        validate_key(prefix, prefix=True)
        self._read = read
        self._callback = callback
        self._every = every
        self._prefix = prefix
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlms-watch", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()
        if threading.current_thread() is not self._thread:  # closed from its own callback
            self._thread.join()

    def _run(self) -> None:
        last: dict[str, bytes] | None = None
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                current = self._read()
            except Unavailable:
                current = last  # no calls while the registry is away
            if current is not None and current != last:
                last = current
                try:
                    self._callback(dict(current))
                except Exception:  # a watcher's bug must not stop the watch
                    log.exception("watch callback for %r failed", self._prefix)
            self._wake.wait(self._every)


W = TypeVar("W", bound=WatchHandle)


class Holdings(Generic[W]):
    """The leases and watches a registry has handed out, closed together with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: list[W] = []
        self._leases: list[KeptLease] = []

    def lease(self, backend: LeaseBackend, ttl: float) -> KeptLease:
        lease = KeptLease(backend, ttl)
        with self._lock:
            self._leases.append(lease)
        return lease

    def watch(self, watch: W) -> W:
        with self._lock:
            self._watches.append(watch)
        return watch

    def watches(self) -> list[W]:
        with self._lock:
            return list(self._watches)

    def close(self) -> None:
        with self._lock:
            watches, self._watches = self._watches, []
            leases, self._leases = self._leases, []
        for watch in watches:
            watch.close()
        for lease in leases:
            lease.close()
