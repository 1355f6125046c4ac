"""When the models added to the store change, as every server of the fleet learns it.

A server that adds or removes a model counts the change at once (its own next ListModels
lists it) and writes ``models/changed`` in the registry under its lease, which every server
watches: each one's generation of the added models moves with the key, so the ListModels
answers it keeps are built again. A model added straight to the store (``mlms models add``
without a server) is seen once the answers' age runs out (``caches.MODELS_MAX_AGE_S``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid

from mlms.errors import MlmsError
from mlms.registry.base import Lease, Registry

log = logging.getLogger(__name__)

PREFIX = "models/"
KEY = f"{PREFIX}changed"


class ModelChanges:
    def __init__(self, registry: Registry, lease: Lease | None) -> None:
        """``lease``: what announcements are written under; None: nothing is announced (a
        service alone, in a test or benchmark)."""
        self.lease = lease
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._generation = next(self._counter)
        self._seen: dict[str, bytes] | None = None
        self._watch = registry.watch_prefix(PREFIX, self._observed)

    def generation(self) -> str:
        """Moves with every change this server makes or any server announces."""
        with self._lock:
            return str(self._generation)

    def changed(self) -> None:
        """A model was added or removed through this server: counted here, announced to the
        others."""
        self._moved()
        if self.lease is None:
            return
        try:
            self.lease.put(KEY, uuid.uuid4().hex.encode())
        except MlmsError as exc:  # the key is put again once the registry answers
            log.warning("the other servers learn of the changed models later: %s", exc)

    def _observed(self, current: dict[str, bytes]) -> None:
        # The watch's first call is the state at its start, which nothing kept predates.
        first, self._seen = self._seen is None, current
        if not first:
            self._moved()

    def _moved(self) -> None:
        with self._lock:
            self._generation = next(self._counter)

    def close(self) -> None:
        self._watch.close()
