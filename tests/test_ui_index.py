"""The web UI's evaluation index: a refresh asks the store only for the records it lacks."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Collection

import pytest

from mlms.client import EmbeddedClient, Evaluations
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.records import save_record
from mlms.store.local import LocalStore
from mlms.ui import index as index_module
from mlms.ui.index import EvaluationIndex
from tests.processes import wait_for


@pytest.fixture(scope="module")
def record() -> EvaluationRecord:
    request = EvaluationRequest(model="digits_cnn", iterations=2, warmup=0, min_seconds=0)
    return EmbeddedClient().evaluate(request)


def _copy(record: EvaluationRecord) -> EvaluationRecord:
    return record.model_copy(update={"id": uuid.uuid4().hex})


def test_a_refresh_reads_only_new_records_and_drops_removed_ones(
    record, tmp_path, monkeypatch
) -> None:
    store = LocalStore(tmp_path / "store")
    first, second = _copy(record), _copy(record)
    save_record(store, first)
    save_record(store, second)
    client = EmbeddedClient(store)
    asked: list[tuple[set[str], set[str]]] = []  # (known, records read) per listing

    def listing(known: Collection[str]) -> Evaluations:
        answer = client.list_evaluations(known)
        asked.append((set(known), {r.id for r in answer.records}))
        return answer

    monkeypatch.setattr(index_module, "REFRESH_S", 0.0)
    index = EvaluationIndex(listing)
    assert {r.id for r in index.snapshot().rows} == {first.id, second.id}
    assert asked == [(set(), {first.id, second.id})]
    third = _copy(record)
    save_record(store, third)
    store.delete(f"evaluations/{first.id}.json")

    def current() -> set[str]:
        return {r.id for r in index.snapshot().rows}

    wait_for(lambda: current() == {second.id, third.id}, 30, "the refreshed listing")
    known, read = next((k, r) for k, r in asked[1:] if third.id in r)
    assert known == {first.id, second.id} and read == {third.id}


def test_known_ids_are_checked(tmp_path) -> None:
    client = EmbeddedClient(LocalStore(tmp_path / "store"))
    with pytest.raises(InvalidArgument, match=r"known evaluation id 'ABC': expected a full id"):
        client.list_evaluations(["ABC"])


def test_a_page_waits_for_the_warm_listing_instead_of_listing_again(record, tmp_path) -> None:
    store = LocalStore(tmp_path / "store")
    stored = _copy(record)
    save_record(store, stored)
    client = EmbeddedClient(store)
    started, release = threading.Event(), threading.Event()
    calls: list[set[str]] = []

    def listing(known: Collection[str]) -> Evaluations:
        calls.append(set(known))
        started.set()
        release.wait(30)  # held until the page below has asked
        return client.list_evaluations(known)

    index = EvaluationIndex(listing)
    index.warm()
    assert started.wait(30)
    pages: list[set[str]] = []
    page = threading.Thread(target=lambda: pages.append({r.id for r in index.snapshot().rows}))
    page.start()
    wait_for(lambda: _inside(page, "_first_listing"), 30, "the page waiting on the first listing")
    release.set()
    page.join(30)
    assert pages == [{stored.id}] and calls == [set()]  # one listing, the warm one


def _inside(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is running ``function`` now (somewhere on its stack)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False
