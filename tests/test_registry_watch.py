"""etcd's watch as the registry follows it (``mlms.registry.etcd_watch``), on a real etcd:
changes pushed by etcd's stream rather than read again, a quiet stream resumed at its
revision, a compacted revision and a store that came back empty read again in full."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import etcd3gw
import pytest

from mlms.registry import etcd as etcd_module
from mlms.registry.etcd import EtcdRegistry
from mlms.registry.factory import registry_from_url
from tests.processes import wait_for
from tests.services import EtcdServer

TTL = 2.0


class Watched:
    """A watch of ``jobs/`` with the range reads and stream openings it made counted."""

    def __init__(self, registry: EtcdRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[dict[str, bytes]] = []
        self.reads = 0
        self.opened: list[int] = []  # the revision each stream opened at
        snapshot, stream = registry._snapshot, registry._watch_stream

        def read(prefix: str):
            self.reads += 1
            return snapshot(prefix)

        def opening(prefix: str, revision: int):
            self.opened.append(revision)
            self.before_open(len(self.opened))
            return stream(prefix, revision)

        self.before_open: Callable[[int], None] = lambda _number: None
        monkeypatch.setattr(registry, "_snapshot", read)
        monkeypatch.setattr(registry, "_watch_stream", opening)
        self.watch = registry.watch_prefix("jobs/", self.seen.append)

    def shows(self, keys: set[str], what: str) -> None:
        wait_for(lambda: self.seen and set(self.seen[-1]) == keys, 10, what)


@pytest.fixture
def registry(running_etcd: EtcdServer) -> Iterator[EtcdRegistry]:
    registry = registry_from_url(running_etcd.url)
    assert isinstance(registry, EtcdRegistry)
    yield registry
    registry.close()


def test_changes_are_pushed_not_read_again(registry: EtcdRegistry, monkeypatch) -> None:
    """One range read at the start; every change after it comes from etcd's stream, in order,
    each as the whole prefix; closing wakes the stream's reader at once."""
    watched = Watched(registry, monkeypatch)
    watched.shows(set(), "the start")
    lease = registry.lease(TTL)
    for number in range(10):
        lease.put(f"jobs/{number}", str(number).encode())
    lease.delete("jobs/3")
    lease.put("jobs/4", b"again")
    # The delete already leaves these keys: the last change is the one waited for.
    last = {f"jobs/{n}": str(n).encode() for n in range(10) if n != 3} | {"jobs/4": b"again"}
    wait_for(lambda: watched.seen and watched.seen[-1] == last, 10, "every change")
    assert watched.reads == 1 and len(watched.opened) == 1
    began = time.monotonic()
    watched.watch.close()
    assert time.monotonic() - began < etcd_module.IDLE_S / 2
    lease.close()


def test_a_quiet_stream_opens_again_at_its_revision(registry: EtcdRegistry, monkeypatch) -> None:
    """The first key comes from the stream (the start was read before it was put), so each
    opening after it is at a later revision than the first, and nothing is read again."""
    monkeypatch.setattr(etcd_module, "IDLE_S", 0.3)
    watched = Watched(registry, monkeypatch)
    watched.shows(set(), "the start")
    lease = registry.lease(TTL)
    lease.put("jobs/a", b"1")
    watched.shows({"jobs/a"}, "the first key")
    wait_for(lambda: len(watched.opened) >= 3, 10, "the quiet stream opened again")
    lease.put("jobs/b", b"2")
    watched.shows({"jobs/a", "jobs/b"}, "a change after the stream opened again")
    assert watched.reads == 1  # resumed at its revision, nothing read again
    assert watched.opened[-1] > watched.opened[0]
    watched.watch.close()
    lease.close()


def test_a_compacted_revision_is_read_again(
    registry: EtcdRegistry, running_etcd: EtcdServer, monkeypatch
) -> None:
    """The changes made while the stream was closed, then compacted away: etcd cancels the
    stream opened at the old revision, and the prefix is read again with them."""
    monkeypatch.setattr(etcd_module, "IDLE_S", 0.3)
    watched = Watched(registry, monkeypatch)
    lease = registry.lease(TTL)
    operator = etcd3gw.Etcd3Client("127.0.0.1", running_etcd.port, api_path="/v3/")

    def change_and_compact(number: int) -> None:
        if number == 2:  # the first time the quiet stream opens again
            lease.put("jobs/while-closed", b"x")
            lease.put("jobs/while-closed", b"y")  # the first of the two is compacted away
            revision = int(operator.status()["header"]["revision"])
            operator.post(operator.get_url("/kv/compaction"), json={"revision": revision})

    watched.before_open = change_and_compact
    watched.shows({"jobs/while-closed"}, "the change made while the stream was closed")
    assert watched.seen[-1]["jobs/while-closed"] == b"y" and watched.reads == 2
    watched.watch.close()
    lease.close()


def test_etcd_back_without_its_data_is_read_again(
    registry: EtcdRegistry, running_etcd: EtcdServer, monkeypatch
) -> None:
    """etcd restarted empty starts again from revision 1: the watch does not wait for the old
    revision to come back, it reads the new store (the old keys gone, the new ones there)."""
    watched = Watched(registry, monkeypatch)
    lease = registry.lease(TTL)
    lease.put("jobs/before", b"1")
    watched.shows({"jobs/before"}, "the key before the restart")
    lease.abandon()  # not put again in the new store
    running_etcd.restart(wipe=True)
    after = registry.lease(TTL)
    after.put("jobs/after", b"2")
    watched.shows({"jobs/after"}, "the new store's keys")
    watched.watch.close()
    after.close()
