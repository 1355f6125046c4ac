"""Assets: built locally, stored with their sha256, verified on every load; URL downloads."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from mlms.assets.keys import asset_prefix
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.errors import AssetError, ChecksumMismatch
from mlms.manifest import ModelManifest
from mlms.store.local import LocalStore


@pytest.fixture
def web_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on loopback serving a folder."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _with_url(manifest: ModelManifest, url: str, sha256: str) -> ModelManifest:
    data = manifest.model_dump()
    data["sources"] = [
        {
            "kind": "url",
            "framework": "onnxruntime",
            "url": url,
            "sha256": sha256,
            "filename": "model.onnx",
        },
        *data["sources"],
    ]
    return ModelManifest.model_validate(data)


def test_built_asset_is_stored_with_its_checksum(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    manager = AssetManager(store, tmp_path / "cache")
    manifest = get_model("digits_cnn")
    asset = manager.ensure(manifest, "onnxruntime")
    info = json.loads(store.get_bytes(f"{asset_prefix(manifest, 'onnxruntime')}/asset.json"))
    assert info["sha256"] == hashlib.sha256(asset.path.read_bytes()).hexdigest() == asset.sha256
    # The torch weights are the canonical ones every other framework is exported from.
    assert store.exists(f"{asset_prefix(manifest, 'torch')}/asset.json")
    assert manager.ensure(manifest, "onnxruntime").sha256 == asset.sha256

    asset.path.write_bytes(asset.path.read_bytes()[:-1] + b"\0")
    with pytest.raises(ChecksumMismatch, match=r"model\.onnx.*expected sha256"):
        manager.load(manifest, "onnxruntime")


def test_url_source_is_downloaded_once_and_verified(tmp_path: Path, web_root) -> None:
    root, base = web_root
    payload = b"pretend onnx bytes" * 1000
    (root / "model.onnx").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    manifest = _with_url(get_model("digits_cnn"), f"{base}/model.onnx", digest)
    store = LocalStore(tmp_path / "store")
    manager = AssetManager(store, tmp_path / "cache")
    asset = manager.ensure(manifest, "onnxruntime")
    assert asset.path.read_bytes() == payload and asset.source.startswith("url:")
    (root / "model.onnx").unlink()  # a second ensure must not fetch again
    assert manager.ensure(manifest, "onnxruntime").sha256 == digest


def test_url_with_wrong_checksum_stores_nothing(tmp_path: Path, web_root) -> None:
    root, base = web_root
    (root / "model.onnx").write_bytes(b"tampered")
    manifest = _with_url(get_model("digits_cnn"), f"{base}/model.onnx", "0" * 64)
    store = LocalStore(tmp_path / "store")
    with pytest.raises(ChecksumMismatch, match="expected sha256 0000"):
        AssetManager(store, tmp_path / "cache").ensure(manifest, "onnxruntime")
    assert store.list("models/") == []


def test_unreachable_url_is_an_asset_error(tmp_path: Path, web_root) -> None:
    _root, base = web_root
    manifest = _with_url(get_model("digits_cnn"), f"{base}/missing.onnx", "0" * 64)
    with pytest.raises(AssetError, match="cannot download"):
        AssetManager(LocalStore(tmp_path / "s"), tmp_path / "c").ensure(manifest, "onnxruntime")
