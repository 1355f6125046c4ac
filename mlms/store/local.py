"""A folder as the object store: the embedded default (``$MLMS_HOME/store``)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from mlms.errors import StoreError
from mlms.store.base import validate_key


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def path_of(self, key: str) -> Path:
        return self.root / validate_key(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self.path_of(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".tmp-", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, target)

    def put_file(self, key: str, path: Path, *, move: bool = False) -> None:
        target = self.path_of(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if move:
            try:
                # The mode of every object the store writes itself (its temporaries' 0600).
                os.chmod(path, 0o600)
                os.replace(path, target)  # atomic, and no second copy of a large artifact
                return
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
            self.put_file(key, path)  # another file system: copied, then given up
            Path(path).unlink()
            return
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".tmp-", delete=False) as tmp:
            with open(path, "rb") as source:
                shutil.copyfileobj(source, tmp, length=1 << 20)
        os.replace(tmp.name, target)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path_of(key).read_bytes()
        except FileNotFoundError as exc:
            raise StoreError(f"no object {key!r} in store {self.url}") from exc

    def get_file(self, key: str, path: Path) -> None:
        source = self.path_of(key)
        if not source.is_file():
            raise StoreError(f"no object {key!r} in store {self.url}")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            with open(source, "rb") as handle:
                shutil.copyfileobj(handle, tmp, length=1 << 20)
        os.replace(tmp.name, path)

    def exists(self, key: str) -> bool:
        return self.path_of(key).is_file()

    def list(self, prefix: str) -> list[str]:
        keys = []
        # Only the folder the prefix names is walked (not the whole store: span archives,
        # models and records of other prefixes), by os.scandir: a folder of 10^5 records is
        # listed in a fraction of pathlib's time.
        folder = self.root.joinpath(*prefix.split("/")[:-1])
        if not folder.is_dir():
            return []
        start = len(str(self.root)) + 1
        pending = [str(folder)]
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file() and not entry.name.startswith(".tmp"):
                        key = entry.path[start:]
                        if key.startswith(prefix):
                            keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        self.path_of(key).unlink(missing_ok=True)
