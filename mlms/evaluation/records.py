"""Evaluation records in the store (``evaluations/<id>.json``)."""

from __future__ import annotations

import re
from collections.abc import Collection

from mlms.errors import InvalidArgument, UnknownEvaluation
from mlms.evaluation.record import EvaluationRecord
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

PREFIX = "evaluations/"
#: Ids are uuid4 hex; checked before one becomes part of a store key or a path.
_ID_PREFIX = re.compile(r"[0-9a-f]{1,32}")
_FULL_ID = re.compile(r"[0-9a-f]{32}")
_RECORDS = JsonRecords(PREFIX, EvaluationRecord, "evaluation", "mlms evals", UnknownEvaluation)


def save_record(store: ObjectStore, record: EvaluationRecord) -> str:
    return _RECORDS.save(store, record)


def load_record(store: ObjectStore, evaluation_id: str) -> EvaluationRecord:
    """By full id or a unique prefix of one (case does not matter)."""
    if not _ID_PREFIX.fullmatch(evaluation_id.lower()):
        raise InvalidArgument(
            f"evaluation id {evaluation_id!r}: expected hex digits, a full id (32) or a unique "
            "prefix of one"
        )
    return _RECORDS.load(store, evaluation_id.lower())


def is_stored(store: ObjectStore, evaluation_id: str) -> bool:
    """Whether the record of this full id is stored (a sweep's cell done before a restart)."""
    return _RECORDS.exists(store, evaluation_id)


def list_records(store: ObjectStore) -> list[EvaluationRecord]:
    return _RECORDS.all(store)


def list_new_records(
    store: ObjectStore, known: Collection[str]
) -> tuple[list[EvaluationRecord], list[str]]:
    """The stored records but those ``known`` names (a caller's copies: records are written
    once), oldest first, and every stored id, both from one listing of the store. Each known
    id must be a full id, 32 hex digits."""
    for record_id in known:
        if not _FULL_ID.fullmatch(record_id):
            raise InvalidArgument(
                f"known evaluation id {record_id[:40]!r}: expected a full id, 32 hex digits"
            )
    skip = set(known)
    stored = _RECORDS.ids(store)
    return _RECORDS.read(store, [i for i in stored if i not in skip]), stored
