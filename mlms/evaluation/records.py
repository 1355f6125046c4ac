"""Evaluation records in the store (``evaluations/<id>.json``)."""

from __future__ import annotations

from mlms.errors import UnknownEvaluation
from mlms.evaluation.record import EvaluationRecord
from mlms.store.base import ObjectStore
from mlms.store.json_records import JsonRecords

PREFIX = "evaluations/"
_RECORDS = JsonRecords(PREFIX, EvaluationRecord, "evaluation", "mlms evals", UnknownEvaluation)


def save_record(store: ObjectStore, record: EvaluationRecord) -> str:
    return _RECORDS.save(store, record)


def load_record(store: ObjectStore, evaluation_id: str) -> EvaluationRecord:
    """By full id or a unique prefix of one."""
    return _RECORDS.load(store, evaluation_id)


def list_records(store: ObjectStore) -> list[EvaluationRecord]:
    return _RECORDS.all(store)
