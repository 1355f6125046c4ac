"""The local-folder store's listing: the keys under a prefix, sorted, however deep; never its
own temporaries."""

from __future__ import annotations

from pathlib import Path

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
