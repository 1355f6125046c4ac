"""What a server answered lately, kept as messages in memory, each cache bounded by count (the
least recently used out first).

- Records (``GetEvaluation``): a record never changes once stored, so a cached one is never
  stale.
- Listings (``ListEvaluations``): a page is answered again while the index's generation, which
  every write of the index changes, is the one it was read at (so a record indexed by any
  server of the fleet is listed at once), and for ``LISTING_MAX_AGE_S`` at most (what a writer
  that leaves the generation alone, another mlms version's, can leave stale).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Generic, TypeVar

from google.protobuf.message import Message

#: About 10 KiB a record here: a few tens of MiB at most.
DEFAULT_SIZE = 4096
#: About 25 KiB a page of 50 summaries.
DEFAULT_LISTINGS = 256
LISTING_MAX_AGE_S = 5.0

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
    """Listings' answers by their query's serialized bytes, with the index generation each was
    read at. The messages are shared: callers copy one before changing it."""

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

    def put(self, key: bytes, generation: str | None, message: Message) -> None:
        """``generation``: the one read before the page was (a write in between makes the
        next call read it again)."""
        if generation is not None:
            self._pages.put(key, (generation, time.monotonic(), message))

    def __len__(self) -> int:
        return len(self._pages)
