"""The records a server answered lately, kept as their messages: a record never changes once
stored, so a cached one is never stale. Bounded by count, least recently used out first."""

from __future__ import annotations

import threading
from collections import OrderedDict

from google.protobuf.message import Message

#: About 10 KiB a record here: a few tens of MiB at most.
DEFAULT_SIZE = 4096


class RecordCache:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[str, Message] = OrderedDict()

    def get(self, key: str) -> Message | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: str, message: Message) -> None:
        with self._lock:
            self._items[key] = message
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
