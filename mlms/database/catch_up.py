"""Catching the index up with the records stored while no index took them (their pending
markers), as every listing does first: light while nothing is pending."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mlms.errors import StoreError
from mlms.evaluation.record_store_keys import PENDING

if TYPE_CHECKING:
    from mlms.database.index import EvaluationIndex
    from mlms.evaluation.record import EvaluationRecord
    from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)

#: Records read and indexed per transaction.
BATCH = 500


def catch_up(store: ObjectStore, index: EvaluationIndex) -> int:
    """Index the records stored with a pending marker (no index took them then), dropping
    each marker once its record is indexed; how many were added. A marker whose record is not
    in the store yet (being written) stays for the next time."""
    keys = store.list(PENDING)
    ids = [key[len(PENDING) :] for key in keys]
    added = 0
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        records = [r for r in (read_record(store, i, quiet=True) for i in chunk) if r is not None]
        added += index.add(records)
        for record in records:
            store.delete(f"{PENDING}{record.id}")
    return added


def read_record(
    store: ObjectStore, evaluation_id: str, quiet: bool = False
) -> EvaluationRecord | None:
    """The stored record, or None (logged unless ``quiet``) where it is missing or unreadable."""
    from mlms.evaluation.record_store import RECORDS  # the record model: only with one to read

    try:
        return RECORDS.model.model_validate_json(
            store.get_bytes(f"{RECORDS.prefix}{evaluation_id}.json")
        )
    except StoreError as exc:
        if not quiet:
            log.warning("index: no record %s in %s: %s", evaluation_id, store.url, exc)
    except ValueError as exc:  # pydantic's ValidationError: another version's, or damaged
        log.warning("index: skipping unreadable record %s: %s", evaluation_id, exc)
    return None
