"""The registry in this process's memory: the embedded mode (one process is the whole fleet)
and unit tests. Same semantics as etcd: leases expire ttl seconds after their last keepalive
and take their keys with them; watches see every change at once.
"""

from __future__ import annotations

import itertools
import threading
import time

from mlms.errors import Unavailable
from mlms.registry.base import WatchCallback, validate_key
from mlms.registry.keeper import Holdings, KeptLease, PrefixWatch

#: Watches here are woken on every change; the period is only a backstop.
_WATCH_BACKSTOP = 1.0


class _Store:
    """Keys, leases and their deadlines; the ``LeaseBackend`` of ``KeptLease``."""

    url = "memory://"

    def __init__(self, changed) -> None:
        self._changed = changed
        self._lock = threading.Lock()
        self._values: dict[str, tuple[bytes, int | None]] = {}  # key -> (value, lease id)
        self._deadlines: dict[int, tuple[float, float]] = {}  # lease id -> (ttl, monotonic end)
        self._ids = itertools.count(1)
        self.closed = False

    def _check(self) -> None:
        if self.closed:
            raise Unavailable("registry memory:// is closed")

    def grant(self, ttl: float) -> int:
        with self._lock:
            self._check()
            lease_id = next(self._ids)
            self._deadlines[lease_id] = (ttl, time.monotonic() + ttl)
        self._changed()  # the reaper's next deadline may be sooner
        return lease_id

    def keep_alive(self, lease_id: int) -> bool:
        with self._lock:
            self._check()
            if lease_id not in self._deadlines:
                return False
            ttl, _ = self._deadlines[lease_id]
            self._deadlines[lease_id] = (ttl, time.monotonic() + ttl)
            return True

    def put(self, key: str, value: bytes, lease_id: int | None) -> None:
        with self._lock:
            self._check()
            if lease_id is not None and lease_id not in self._deadlines:
                raise Unavailable(f"registry memory://: lease {lease_id:x} has expired")
            self._values[key] = (bytes(value), lease_id)
        self._changed()

    def delete(self, key: str) -> None:
        with self._lock:
            self._check()
            found = self._values.pop(key, None)
        if found is not None:
            self._changed()

    def revoke(self, lease_id: int) -> None:
        with self._lock:
            self._check()
            self._drop([lease_id])
        self._changed()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            self._check()
            found = self._values.get(key)
            return None if found is None else found[0]

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        with self._lock:
            self._check()
            return {k: v for k, (v, _) in sorted(self._values.items()) if k.startswith(prefix)}

    def expire(self) -> float | None:
        """Drop the leases past their deadline; seconds until the next deadline (None: none)."""
        now = time.monotonic()
        with self._lock:
            expired = [i for i, (_, end) in self._deadlines.items() if end <= now]
            self._drop(expired)
            ends = [end for _, end in self._deadlines.values()]
        if expired:
            self._changed()
        return min(ends) - now if ends else None

    def _drop(self, lease_ids: list[int]) -> None:
        for lease_id in lease_ids:
            self._deadlines.pop(lease_id, None)
        gone = set(lease_ids)
        for key in [k for k, (_, lease) in self._values.items() if lease in gone]:
            del self._values[key]


class MemoryRegistry:
    """A ``Registry`` in this process. A reaper thread expires leases on time."""

    url = "memory://"

    def __init__(self) -> None:
        self._held: Holdings[PrefixWatch] = Holdings()
        self._wake = threading.Event()
        self._store = _Store(self._on_change)
        self._reaper = threading.Thread(target=self._reap, name="mlms-memory-reaper", daemon=True)
        self._reaper.start()

    def lease(self, ttl: float) -> KeptLease:
        return self._held.lease(self._store, ttl)

    def get(self, key: str) -> bytes | None:
        return self._store.get(validate_key(key))

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        return self._store.get_prefix(validate_key(prefix, prefix=True))

    def watch_prefix(self, prefix: str, callback: WatchCallback) -> PrefixWatch:
        return self._held.watch(
            PrefixWatch(
                lambda: self.get_prefix(prefix), callback, every=_WATCH_BACKSTOP, prefix=prefix
            )
        )

    def close(self) -> None:
        self._held.close()
        self._store.closed = True
        self._wake.set()

    def _on_change(self) -> None:
        self._wake.set()
        for watch in self._held.watches():
            watch.poke()

    def _reap(self) -> None:
        while not self._store.closed:
            self._wake.clear()
            self._wake.wait(self._store.expire())
