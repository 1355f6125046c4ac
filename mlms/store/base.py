"""The object store interface (docs/DESIGN.md, "Object store layout").

Keys are '/'-separated paths inside the store's bucket, e.g. ``evaluations/<id>.json``.
Implementations: ``LocalStore`` (a folder; the embedded default) and ``S3Store``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class ObjectStore(Protocol):
    def put_bytes(self, key: str, data: bytes) -> None: ...

    def put_file(self, key: str, path: Path, *, move: bool = False) -> None:
        """Upload a file without reading it whole into memory. ``move``: the caller gives the
        file up (a file it made for the store): a local store on the same file system renames
        it into place instead of writing a copy; either way it is gone afterwards."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """Raise ``StoreError`` naming the key when it is absent."""
        ...

    def get_file(self, key: str, path: Path) -> None:
        """Download ``key`` to ``path`` (written atomically)."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Keys that start with ``prefix``, sorted."""
        ...

    def delete(self, key: str) -> None: ...

    @property
    def url(self) -> str:
        """Where the store lives, for records and messages (``file:///...``, ``s3://...``)."""
        ...


def validate_key(key: str) -> str:
    from mlms.errors import StoreError

    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"invalid store key {key!r}: expected a relative path like 'a/b.json'")
    return key
