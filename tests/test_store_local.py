"""The local-folder store's listing: the keys under a prefix, sorted, however deep; never its
own temporaries. A file given up to it (``move``) is renamed into place, or copied where it
lies on another file system; a file only lent to it is copied and left alone."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mlms.store.local import LocalStore


def test_listing_names_every_key_under_a_prefix(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    assert store.list("records/") == []
    for key in ("records/b.json", "records/a.json", "records/sub/deep/c.bin", "other/d.json",
                "records2/e.json"):  # fmt: skip
        store.put_bytes(key, b"1")
    (store.root / "records" / ".tmp-half-written").write_bytes(b"")
    assert store.list("records/") == ["records/a.json", "records/b.json", "records/sub/deep/c.bin"]
    assert store.list("records/a") == ["records/a.json"]
    assert store.list("records/sub") == ["records/sub/deep/c.bin"]
    assert store.list("records") == [
        "records/a.json", "records/b.json", "records/sub/deep/c.bin", "records2/e.json"
    ]  # fmt: skip
    assert store.list("missing/") == []
    store.delete("records/a.json")
    assert store.list("records/") == ["records/b.json", "records/sub/deep/c.bin"]


def test_a_file_given_up_is_renamed_into_place_and_a_lent_one_copied(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    lent, given = tmp_path / "lent.bin", tmp_path / "given.bin"
    lent.write_bytes(b"lent")
    given.write_bytes(b"given")
    inode = given.stat().st_ino
    store.put_file("models/a/lent.bin", lent)
    store.put_file("models/a/given.bin", given, move=True)
    assert lent.read_bytes() == b"lent" and not given.exists()
    assert store.get_bytes("models/a/lent.bin") == b"lent"
    assert store.path_of("models/a/given.bin").stat().st_ino == inode  # not a copy
    modes = {store.path_of(f"models/a/{n}.bin").stat().st_mode & 0o777 for n in ("lent", "given")}
    assert modes == {0o600}  # private, whichever way the object came in
    assert store.list("models/") == ["models/a/given.bin", "models/a/lent.bin"]


def test_a_file_given_up_from_another_file_system_is_copied_then_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another file system is simulated: ``os.replace`` of the given file fails with EXDEV as
    across a mount (the temporary copy the store then renames is on its own file system)."""
    store = LocalStore(tmp_path / "store")
    given = tmp_path / "given.bin"
    given.write_bytes(b"given")
    replace = os.replace

    def across_mounts(source, target) -> None:
        if Path(source) == given:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(source, target)

    monkeypatch.setattr(os, "replace", across_mounts)
    store.put_file("models/b/given.bin", given, move=True)
    assert not given.exists() and store.get_bytes("models/b/given.bin") == b"given"
    assert store.list("models/") == ["models/b/given.bin"]  # no temporary left over
