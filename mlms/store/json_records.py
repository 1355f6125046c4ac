"""Records kept as one JSON object each under a prefix of the store (``evaluations/``,
``bounds/``), found by full id or a unique prefix of one, listed oldest first."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from mlms.errors import NotFound, StoreError
from mlms.store.base import ObjectStore

Record = TypeVar("Record", bound=BaseModel)


@dataclass(frozen=True)
class JsonRecords(Generic[Record]):
    prefix: str  # "evaluations/"
    model: type[Record]  # with ``id`` and ``created_at`` fields
    noun: str  # "evaluation": named in errors
    lister: str | None = None  # the command that lists them, named in errors
    missing: type[NotFound] = NotFound

    def key(self, record_id: str) -> str:
        return f"{self.prefix}{record_id}.json"

    def exists(self, store: ObjectStore, record_id: str) -> bool:
        """Whether the record of this full id is stored."""
        return store.exists(self.key(record_id))

    def save(self, store: ObjectStore, record: Record) -> str:
        key = self.key(record.id)  # type: ignore[attr-defined]
        store.put_bytes(key, record.model_dump_json(indent=1).encode())
        return key

    def load(self, store: ObjectStore, record_id: str) -> Record:
        key = self.key(record_id)
        if not store.exists(key):
            matches = [k for k in store.list(f"{self.prefix}{record_id}") if k.endswith(".json")]
            if len(matches) != 1:
                found = f"several {self.noun}s" if matches else f"no {self.noun}"
                hint = f"; '{self.lister}' lists them" if self.lister else ""
                raise self.missing(f"{found} with id {record_id!r} in {store.url}{hint}")
            key = matches[0]
        try:
            return self.model.model_validate_json(store.get_bytes(key))
        except StoreError as exc:
            raise self.missing(f"no {self.noun} {record_id!r} in {store.url}") from exc

    def ids(self, store: ObjectStore) -> list[str]:
        """Every stored record's id (a listing of keys: no record is read)."""
        return [
            key[len(self.prefix) : -len(".json")]
            for key in store.list(self.prefix)
            if key.endswith(".json")
        ]

    def all(self, store: ObjectStore) -> list[Record]:
        return self.read(store, self.ids(store))

    def read(self, store: ObjectStore, ids: Collection[str]) -> list[Record]:
        """The stored records of ``ids`` (from a listing), oldest first."""
        records = [
            self.model.model_validate_json(store.get_bytes(self.key(record_id)))
            for record_id in ids
        ]
        return sorted(records, key=lambda r: r.created_at)  # type: ignore[attr-defined]
