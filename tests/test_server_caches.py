"""The server's caches of answers: records by id, listings by query and index generation."""

from __future__ import annotations

from mlms.protos.mlms.v2 import evaluator_pb2
from mlms.server.caches import ListingCache, record_cache


def _page(total: int) -> evaluator_pb2.ListEvaluationsResponse:
    return evaluator_pb2.ListEvaluationsResponse(total=total)


def test_a_listing_is_answered_while_the_generation_holds() -> None:
    cache = ListingCache(size=2)
    cache.put(b"q", "g1", _page(1))
    assert cache.get(b"q", "g1") == _page(1)
    assert cache.get(b"q", "g2") is None  # the index changed since
    assert cache.get(b"other", "g1") is None
    cache.put(b"q", "g2", _page(2))
    assert cache.get(b"q", "g2") == _page(2)


def test_no_generation_caches_nothing() -> None:
    cache = ListingCache()
    cache.put(b"q", None, _page(1))
    assert len(cache) == 0 and cache.get(b"q", None) is None


def test_a_listing_expires_whatever_the_generation() -> None:
    cache = ListingCache(max_age=0.0)
    cache.put(b"q", "g1", _page(1))
    assert cache.get(b"q", "g1") is None


def test_both_caches_are_bounded_least_recently_used_out_first() -> None:
    records = record_cache(2)
    for key in ("a", "b"):
        records.put(key, _page(0))
    assert records.get("a") is not None  # "b" is now the least recently used
    records.put("c", _page(0))
    assert records.get("b") is None and records.get("a") is not None and len(records) == 2
    assert len(record_cache(0)) == 0
    listings = ListingCache(size=0)
    listings.put(b"q", "g", _page(1))
    assert listings.get(b"q", "g") is None
