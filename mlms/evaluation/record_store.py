"""Evaluation records in the store (``evaluations/<id>.json``), and their index.

The store is the archive; an index (``mlms.database``) lists and searches it. A record is saved
through the index when the process has one: its id is claimed there first, so that of two
copies of one evaluation finishing at once only the first is stored (the index's unique key
decides). Without an index, or while it is down, the record is stored with a marker under
``index/pending/`` that whoever holds the index later indexes (``mlms.database.keeper``).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Protocol

from mlms.errors import InvalidArgument, MlmsError, StoreError, Unavailable, UnknownEvaluation
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.record_store_keys import PENDING, PREFIX
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

log = logging.getLogger(__name__)

#: How long a refused copy waits for the first copy's record to appear in the store.
WINNER_WAIT_S = 60.0
#: Ids are uuid4 hex; checked before one becomes part of a store key or a path.
_ID_PREFIX = re.compile(r"[0-9a-f]{1,32}")
FULL_ID = re.compile(r"[0-9a-f]{32}")
RECORDS = JsonRecords(PREFIX, EvaluationRecord, "evaluation", "mlms evals", UnknownEvaluation)


class RecordIndex(Protocol):
    """What saving a record needs of the index (``mlms.database.index.EvaluationIndex``)."""

    def claim(self, record: EvaluationRecord) -> bool:
        """Index the record; False when its id is indexed already. ``Unavailable`` when the
        index cannot be reached."""
        ...

    def forget(self, evaluation_id: str) -> None: ...


def save_record(
    store: ObjectStore, record: EvaluationRecord, index: RecordIndex | None = None
) -> bool:
    """Store ``record``; False, with nothing written, when another copy of it was first.

    With an index, its id is claimed there before the record is written. Without one, or when
    it is unavailable, the record is written unless one with its id is stored already, with a
    pending marker first, so that it is indexed later."""
    if index is not None:
        try:
            claimed = index.claim(record)
        except Unavailable as exc:
            log.warning("evaluation %s: stored without the index for now (%s)", record.id, exc)
        else:
            if not claimed:
                return False
            try:
                RECORDS.save(store, record)
            except MlmsError:
                _forget(index, record.id)
                raise
            return True
    if store.exists(f"{PREFIX}{record.id}.json"):
        return False
    store.put_bytes(f"{PENDING}{record.id}", b"")
    RECORDS.save(store, record)
    return True


def _forget(index: RecordIndex, evaluation_id: str) -> None:
    try:
        index.forget(evaluation_id)
    except MlmsError as exc:  # the claim stays: a rebuild drops nothing, the record is absent
        log.warning("evaluation %s: its claim stays in the index: %s", evaluation_id, exc)


def stored_winner(store: ObjectStore, evaluation_id: str) -> EvaluationRecord:
    """The record of the copy that claimed ``evaluation_id`` first, once it is in the store
    (it claimed the id just before writing it)."""
    deadline = time.monotonic() + WINNER_WAIT_S
    pause = 0.01
    while True:
        try:
            return load_record(store, evaluation_id)
        except UnknownEvaluation:
            if time.monotonic() > deadline:
                raise StoreError(
                    f"evaluation {evaluation_id} was claimed by another copy, whose record is "
                    f"still not in {store.url} after {WINNER_WAIT_S:.0f}s"
                ) from None
        time.sleep(pause)  # the other copy is writing it: one store round trip
        pause = min(pause * 2, 0.5)


def load_record(store: ObjectStore, evaluation_id: str) -> EvaluationRecord:
    """By full id or a unique prefix of one (case does not matter)."""
    if not _ID_PREFIX.fullmatch(evaluation_id.lower()):
        raise InvalidArgument(
            f"evaluation id {evaluation_id!r}: expected hex digits, a full id (32) or a unique "
            "prefix of one"
        )
    return RECORDS.load(store, evaluation_id.lower())


def is_stored(store: ObjectStore, evaluation_id: str) -> bool:
    """Whether the record of this full id is stored (a sweep's cell done before a restart)."""
    return RECORDS.exists(store, evaluation_id)


def list_records(store: ObjectStore) -> list[EvaluationRecord]:
    return RECORDS.all(store)


def stored_ids(store: ObjectStore) -> list[str]:
    return RECORDS.ids(store)
