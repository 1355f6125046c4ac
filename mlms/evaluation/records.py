"""Evaluation records in the store (``evaluations/<id>.json``)."""

from __future__ import annotations

from mlms.errors import StoreError, UnknownEvaluation
from mlms.evaluation.record import EvaluationRecord
from mlms.store.base import ObjectStore

PREFIX = "evaluations/"


def save_record(store: ObjectStore, record: EvaluationRecord) -> str:
    key = f"{PREFIX}{record.id}.json"
    store.put_bytes(key, record.model_dump_json(indent=1).encode())
    return key


def load_record(store: ObjectStore, evaluation_id: str) -> EvaluationRecord:
    """By full id or a unique prefix of one."""
    key = f"{PREFIX}{evaluation_id}.json"
    if not store.exists(key):
        matches = [k for k in store.list(f"{PREFIX}{evaluation_id}") if k.endswith(".json")]
        if len(matches) != 1:
            found = "several evaluations" if matches else "no evaluation"
            raise UnknownEvaluation(
                f"{found} with id {evaluation_id!r} in {store.url}; 'mlms evals' lists them"
            )
        key = matches[0]
    try:
        return EvaluationRecord.model_validate_json(store.get_bytes(key))
    except StoreError as exc:
        raise UnknownEvaluation(f"no evaluation {evaluation_id!r} in {store.url}") from exc


def list_records(store: ObjectStore) -> list[EvaluationRecord]:
    records = [
        EvaluationRecord.model_validate_json(store.get_bytes(key))
        for key in store.list(PREFIX)
        if key.endswith(".json")
    ]
    return sorted(records, key=lambda r: r.created_at)
