"""The S3 object store over HTTP against a real S3 server (moto's, from the ``s3`` fixture):
the ObjectStore contract, multipart streaming of large files, errors, URLs, and model assets
kept in S3 and verified by sha256 on every load."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from minio import Minio

from mlms.assets.keys import asset_prefix
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.errors import ChecksumMismatch, InvalidArgument, StoreError, Unavailable
from mlms.store.base import ObjectStore
from mlms.store.factory import store_from_url
from mlms.store.local import LocalStore
from mlms.store.s3 import S3Store
from tests.processes import free_port
from tests.services import S3Server

MIB = 1 << 20


@pytest.fixture
def store(s3: S3Server) -> S3Store:
    made = store_from_url(s3.url)
    assert isinstance(made, S3Store)
    return made


def _observer(s3: S3Server) -> Minio:
    """A plain minio client, to look at the bucket without going through S3Store."""
    return Minio(
        s3.endpoint,
        access_key=s3.env["AWS_ACCESS_KEY_ID"],
        secret_key=s3.env["AWS_SECRET_ACCESS_KEY"],
        secure=False,
        region="us-east-1",
    )


def test_object_store_contract(store: S3Store, tmp_path: Path) -> None:
    assert isinstance(store, ObjectStore)
    prefix = f"contract-{uuid.uuid4().hex[:8]}"
    assert store.list(f"{prefix}/") == []
    assert not store.exists(f"{prefix}/a.json")

    store.put_bytes(f"{prefix}/a.json", b'{"a": 1}')
    source = tmp_path / "b.bin"
    source.write_bytes(os.urandom(1000))
    store.put_file(f"{prefix}/sub/b.bin", source)
    store.put_bytes(f"{prefix}/a.json", b'{"a": 2}')  # overwrite

    assert store.get_bytes(f"{prefix}/a.json") == b'{"a": 2}'
    assert store.exists(f"{prefix}/sub/b.bin")
    assert store.list(f"{prefix}/") == [f"{prefix}/a.json", f"{prefix}/sub/b.bin"]
    assert store.list(f"{prefix}/sub") == [f"{prefix}/sub/b.bin"]

    target = tmp_path / "down" / "b.bin"
    store.get_file(f"{prefix}/sub/b.bin", target)
    assert target.read_bytes() == source.read_bytes()
    assert [p.name for p in target.parent.iterdir()] == ["b.bin"]  # no temporary left over
    given = tmp_path / "given.bin"
    given.write_bytes(b"given")
    store.put_file(f"{prefix}/given.bin", given, move=True)  # uploaded, then gone here
    assert not given.exists() and store.get_bytes(f"{prefix}/given.bin") == b"given"
    store.delete(f"{prefix}/given.bin")

    store.delete(f"{prefix}/a.json")
    store.delete(f"{prefix}/a.json")  # absent: fine
    assert store.list(f"{prefix}/") == [f"{prefix}/sub/b.bin"]
    assert store.url == f"s3://{store.endpoint}/{store.bucket}"


def test_bucket_is_created_on_first_write(s3: S3Server) -> None:
    bucket = f"fresh-{uuid.uuid4().hex[:12]}"
    store = store_from_url(f"s3://{s3.endpoint}/{bucket}")
    observer = _observer(s3)
    assert store.list("") == [] and not store.exists("x/y")  # reads do not create it
    assert not observer.bucket_exists(bucket)
    store.put_bytes("x/y", b"1")
    assert observer.bucket_exists(bucket)
    assert store_from_url(f"s3://{s3.endpoint}/{bucket}").get_bytes("x/y") == b"1"


def test_large_file_is_uploaded_in_parts(s3: S3Server, tmp_path: Path) -> None:
    """A 12 MiB file with 5 MiB parts goes up as a 3-part multipart upload (the ETag of a
    multipart object ends in -<parts>), so no more than a few parts are ever in memory."""
    store = S3Store(
        s3.endpoint,
        s3.bucket,
        access_key=s3.env["AWS_ACCESS_KEY_ID"],
        secret_key=s3.env["AWS_SECRET_ACCESS_KEY"],
        part_size=5 * MIB,
    )
    source = tmp_path / "large.bin"
    with open(source, "wb") as out:
        for _ in range(12):
            out.write(os.urandom(MIB))
    key = f"large/{uuid.uuid4().hex[:8]}.bin"
    store.put_file(key, source)
    stat = _observer(s3).stat_object(s3.bucket, key)
    assert stat.size == 12 * MIB
    assert stat.etag.endswith("-3"), f"expected a 3-part upload, got ETag {stat.etag}"
    target = tmp_path / "back.bin"
    store.get_file(key, target)
    digest = hashlib.sha256
    assert digest(target.read_bytes()).digest() == digest(source.read_bytes()).digest()


_UPLOADER = """
import sys, tracemalloc
from pathlib import Path
from mlms.store.s3 import S3Store
store = S3Store(sys.argv[1], sys.argv[2], part_size=5 << 20)
store.put_bytes("warm/up", b"x")  # imports and connections, before measuring
tracemalloc.start()
store.put_file("large/streamed.bin", Path(sys.argv[3]))
print(tracemalloc.get_traced_memory()[1])
"""


def test_upload_memory_stays_at_a_few_parts(s3: S3Server, tmp_path: Path) -> None:
    """Uploading a 64 MiB file in 5 MiB parts peaks at a few parts of Python memory, not the
    file: traced in a process of its own (the S3 server lives in this one)."""
    source = tmp_path / "streamed.bin"
    with open(source, "wb") as out:
        for _ in range(64):
            out.write(os.urandom(MIB))
    peak = int(
        subprocess.run(
            [sys.executable, "-c", _UPLOADER, s3.endpoint, s3.bucket, str(source)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        ).stdout
    )
    print(f"upload of 64 MiB in 5 MiB parts peaked at {peak / MIB:.1f} MiB of Python memory")
    assert peak < 40 * MIB  # reading the file whole would take 64
    assert _observer(s3).stat_object(s3.bucket, "large/streamed.bin").size == 64 * MIB


def test_missing_keys_are_store_errors(store: S3Store, tmp_path: Path) -> None:
    key = f"missing/{uuid.uuid4().hex[:8]}.json"
    with pytest.raises(StoreError, match=f"no object '{key}' in store {store.url}"):
        store.get_bytes(key)
    target = tmp_path / "never.json"
    with pytest.raises(StoreError, match=key):
        store.get_file(key, target)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match="expected a file"):
        store.put_file("a/b", tmp_path / "no-such-file")
    with pytest.raises(StoreError, match="invalid store key"):
        store.get_bytes("../escape")


def test_unreachable_endpoint_is_unavailable(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    store = store_from_url(f"s3://{endpoint}/mlms")
    for call in (lambda: store.get_bytes("a/b"), lambda: store.put_bytes("a/b", b"1")):
        start = time.monotonic()
        with pytest.raises(Unavailable, match=f"S3 endpoint {endpoint} is unreachable") as caught:
            call()
        assert str(caught.value).endswith("Connection refused")  # the cause, on one line
        assert time.monotonic() - start < 10


def test_store_urls(s3: S3Server, tmp_path: Path, mlms_home: Path) -> None:
    assert store_from_url(s3.url).url == s3.url
    secure = store_from_url("s3+https://storage.example:9000/models")
    assert isinstance(secure, S3Store) and secure.url == "s3+https://storage.example:9000/models"
    assert store_from_url(f"file://{tmp_path}/a").url == (tmp_path / "a").as_uri()
    assert isinstance(store_from_url(str(tmp_path / "b")), LocalStore)
    default = store_from_url(None)
    assert isinstance(default, LocalStore) and default.root == (mlms_home / "store").resolve()
    assert store_from_url("").url == default.url


@pytest.mark.parametrize(
    "url",
    [
        "s3://127.0.0.1/mlms",
        "s3://127.0.0.1:9000",
        "s3://127.0.0.1:9000/",
        "s3://127.0.0.1:9000/a/b",
        "s3://127.0.0.1:port/mlms",
        "ftp://127.0.0.1/x",
        "file://otherhost/x",
    ],
)
def test_bad_store_url(url: str) -> None:
    with pytest.raises(
        InvalidArgument, match=r"invalid store URL .*expected s3://HOST:PORT/BUCKET"
    ):
        store_from_url(url)


def test_assets_in_s3_are_cached_and_verified(store: S3Store, tmp_path: Path) -> None:
    manifest = get_model("squeezenet1_1")  # seeded, not trained: quick to build
    built = AssetManager(store, tmp_path / "cache").ensure(manifest, "torch")
    prefix = asset_prefix(manifest, "torch")
    info = json.loads(store.get_bytes(f"{prefix}/asset.json"))
    assert info["sha256"] == built.sha256
    assert store.exists(f"{prefix}/{info['file']}")

    # Loaded again from the local cache: the cached file is not fetched a second time.
    before = built.path.stat()
    again = AssetManager(store, tmp_path / "cache").load(manifest, "torch")
    after = again.path.stat()
    assert (again.sha256, after.st_ino, after.st_mtime_ns) == (
        built.sha256,
        before.st_ino,
        before.st_mtime_ns,
    )

    # A damaged cache copy is fetched again from S3.
    built.path.write_bytes(b"damaged")
    assert AssetManager(store, tmp_path / "cache").load(manifest, "torch").sha256 == built.sha256

    # A corrupted object in S3 is refused, wherever it is loaded.
    store.put_bytes(f"{prefix}/{info['file']}", b"corrupted weights")
    with pytest.raises(ChecksumMismatch, match=f"expected sha256 {info['sha256']}"):
        AssetManager(store, tmp_path / "fresh-cache").load(manifest, "torch")
    for key in store.list(f"{prefix}/"):  # leave the bucket without a broken asset
        store.delete(key)


@pytest.mark.parametrize("bucket", ["b", "Upper", "-dash", "a_b"])
def test_bad_bucket_name(bucket: str) -> None:
    with pytest.raises(InvalidArgument, match=f"invalid S3 bucket name '{bucket}'"):
        store_from_url(f"s3://127.0.0.1:9000/{bucket}")
