"""What a server answered lately, kept as messages in memory, each cache bounded by count (the
least recently used out first). Each is derived from the registry, the store or the index and
dropped when its source changes: none is a second source of truth.

- Records (``GetEvaluation``): a record never changes once stored, so a cached one is never
  stale.
- Listings (``ListEvaluations``): a page is answered again while the index's generation, which
  every write of the index changes, is the one it was read at (so a record indexed by any
  server of the fleet is listed at once), and for ``LISTING_MAX_AGE_S`` at most (what a writer
  that leaves the generation alone, another mlms version's, can leave stale).
- Models (``ListModels``): the zoo, the library architectures and the models added to the
  store, answered again while the added models' generation holds
  (``mlms.server.model_changes``) and for ``MODELS_MAX_AGE_S`` at most (a model added straight
  to the store, not through a server, changes no generation).
- Agents (``ListAgents``): answered again while the fleet's view (a registry watch) is the one
  it was built from.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from google.protobuf.message import Message

#: About 10 KiB a record here: a few tens of MiB at most.
DEFAULT_SIZE = 4096
#: About 25 KiB a page of 50 summaries.
DEFAULT_LISTINGS = 256
LISTING_MAX_AGE_S = 5.0
#: ListModels answers: one for the zoo, one with the libraries, a few for names asked for.
DEFAULT_MODEL_LISTINGS = 64
MODELS_MAX_AGE_S = 5.0

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def record_cache(size: int = DEFAULT_SIZE) -> Lru[str, Message]:
    """Records' answers by evaluation id."""
    return Lru(size)


class ListingCache:
    """Listings' answers by their request's serialized bytes, with the generation of their
    source (the index, the added models, the fleet's view) each was read at. The messages are
    shared: callers copy one before changing it."""

    def __init__(self, size: int = DEFAULT_LISTINGS, max_age: float = LISTING_MAX_AGE_S) -> None:
        self.max_age = max_age
        self._pages: Lru[bytes, tuple[str, float, Message]] = Lru(size)

    def get(self, key: bytes, generation: str | None) -> Message | None:
        found = self._pages.get(key)
        if found is None or generation is None:
            return None
        read_at, stamp, message = found
        if read_at != generation or time.monotonic() - stamp >= self.max_age:
            return None
        return message

    def answer(self, key: bytes, generation: str | None, build: Callable[[], Message]) -> Message:
        """The answer kept for ``key`` at ``generation``, else ``build()``'s, kept
        (``generation``: read before this call, as for ``put``)."""
        found = self.get(key, generation)
        if found is None:
            found = build()
            self.put(key, generation, found)
        return found

    def put(self, key: bytes, generation: str | None, message: Message) -> None:
        """``generation``: the one read before the page was (a write in between makes the
        next call read it again)."""
        if generation is not None:
            self._pages.put(key, (generation, time.monotonic(), message))

    def __len__(self) -> int:
        return len(self._pages)
