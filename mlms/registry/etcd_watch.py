"""A prefix of etcd kept in memory from etcd's own watch: changes pushed as they commit.

etcd3gw's ``watch_prefix`` hands over events but not what keeps a copy exact: it never says
when its stream ended (etcd restarted, the link dropped), nor why etcd cancelled it
(compaction). So the stream of etcd's HTTP gateway (``/v3/watch``) is read here, through the
registry's session (its TLS and auth token):

- Start: one range read gives the keys and the revision they are at (its header's); the
  stream opens at the next revision, so no change between the two is missed or seen twice.
- Each response of the stream carries the events of whole revisions, in order: applied to the
  copy, then the callback gets the whole copy (``Registry.watch_prefix``).
- A stream quiet for ``IDLE_S`` opens again at the next revision (nothing is read again): a
  link that drops without a reset sends nothing either, and this is how that is noticed.
- A stream that ends or fails (etcd killed or out of reach: it may come back without its data)
  or that etcd cancels (the revision was compacted away) starts over with a range read, tried
  every ``RETRY_S`` until etcd answers.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator

import requests
from urllib3.exceptions import ReadTimeoutError

from mlms.registry.base import WatchCallback, validate_key

log = logging.getLogger(__name__)

#: Seconds a stream may stay quiet before it is opened again.
IDLE_S = 5.0
#: Seconds between two tries to read the prefix again while etcd does not answer.
RETRY_S = 0.25

#: The keys under a prefix (relative to the root) and the revision they were read at.
Snapshot = tuple[dict[str, bytes], int]


class _StartOver(Exception):
    """The copy can no longer follow the stream: it is read again."""


class StreamWatch:
    def __init__(
        self,
        *,
        read: Callable[[], Snapshot],
        open_stream: Callable[[int], requests.Response],
        root: str,
        prefix: str,
        callback: WatchCallback,
    ) -> None:
        """``read``: the prefix's keys and revision; ``open_stream(revision)``: etcd's watch
        stream of the prefix from ``revision``, its events' keys under ``root``."""
        validate_key(prefix, prefix=True)
        self._read = read
        self._open = open_stream
        self._root = root
        self._prefix = prefix
        self._callback = callback
        self._keys: dict[str, bytes] | None = None  # None: to be read again
        self._revision = 0
        self._delivered: dict[str, bytes] | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._response: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name="mlms-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            response = self._response
        if response is not None:
            _interrupt(response)
        if threading.current_thread() is not self._thread:  # closed from its own callback
            self._thread.join()

    def _run(self) -> None:
        failing = False
        while not self._stopped.is_set():
            try:
                if self._keys is None:
                    self._keys, self._revision = self._read()
                    if failing:
                        log.info("watch of %r: following etcd again", self._prefix)
                    failing = False
                    self._deliver()
                self._follow()
            # Whatever failed (etcd away, a stream cut mid-line), the copy is read again: a
            # thread that ended here would leave its watcher's view frozen.
            except Exception as exc:
                if self._stopped.is_set():
                    return
                if _idle(exc):
                    continue  # opened again at the next revision
                if not failing:
                    log.warning("watch of %r: reading it again: %s", self._prefix, exc)
                failing, self._keys = True, None
                self._stopped.wait(RETRY_S)

    def _follow(self) -> None:
        """Apply the stream's events from the copy's revision on, until it fails or idles."""
        response = self._open(self._revision + 1)
        with self._lock:
            self._response = response
        try:
            if self._stopped.is_set():
                return
            for result in _results(response):
                self._apply(result)
            raise _StartOver("etcd ended the stream")
        finally:
            with self._lock:
                self._response = None
            response.close()

    def _apply(self, result: dict) -> None:
        if result.get("canceled"):
            why = result.get("cancel_reason") or f"compacted to {result.get('compact_revision')}"
            raise _StartOver(f"etcd cancelled the stream at revision {self._revision} ({why})")
        assert self._keys is not None
        for event in result.get("events", ()):
            kv = event["kv"]
            key = base64.b64decode(kv["key"]).decode().removeprefix(self._root)
            if event.get("type") == "DELETE":
                self._keys.pop(key, None)
            else:
                self._keys[key] = base64.b64decode(kv.get("value", ""))
            self._revision = max(self._revision, int(kv["mod_revision"]))
        self._deliver()

    def _deliver(self) -> None:
        if self._keys == self._delivered:
            return
        self._delivered = dict(self._keys or {})
        try:
            self._callback(dict(self._delivered))
        except Exception:  # a watcher's bug must not stop the watch
            log.exception("watch callback for %r failed", self._prefix)


def _results(response: requests.Response) -> Iterator[dict]:
    """The ``result`` of each line of a gateway watch stream; an ``error`` line raises."""
    for line in response.iter_lines():
        if not line.strip():
            continue
        chunk = json.loads(line)
        if "error" in chunk:
            error = chunk["error"]
            raise _StartOver(f"etcd refused the watch: {error.get('message') or error}")
        yield chunk["result"]


def _idle(exc: BaseException) -> bool:
    """A stream's read timed out: nothing came for ``IDLE_S``."""
    return isinstance(exc, requests.ConnectionError) and any(
        isinstance(arg, ReadTimeoutError) for arg in exc.args
    )


def _interrupt(response: requests.Response) -> None:
    """Wake the thread blocked reading ``response`` (closing it from here would not)."""
    with contextlib.suppress(AttributeError, OSError):
        response.raw.connection.sock.shutdown(socket.SHUT_RDWR)
