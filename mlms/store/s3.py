"""An S3 bucket as the object store, through the ``minio`` client (MinIO, AWS S3, moto, ...).

The bucket is created on first use. Files go up in parts of ``part_size`` bytes (multipart
upload), so memory stays at a few parts whatever the file's size; downloads are streamed to a
temporary file that replaces the target at the end. Checksums are not this layer's business:
``mlms.assets.manager`` hashes every asset it loads. Every minio/urllib3 exception becomes a
``StoreError`` (the store answered: no such key, access denied, ...) or ``Unavailable`` (it did
not answer, or its TLS certificate did not verify), naming the endpoint, bucket and key.

Over TLS (``secure``) the endpoint's certificate is verified against ``ca_file`` (a PEM
bundle; ``store_from_url`` takes it from AWS_CA_BUNDLE, else MLMS_TLS_CA), or the system's CAs
when none is given; there is no switch to skip verification.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error, ServerError

from mlms.client_tls import handshake_failure
from mlms.errors import InvalidArgument, StoreError, Unavailable
from mlms.reasons import short_reason
from mlms.store.base import validate_key

T = TypeVar("T")

#: Bytes per uploaded part; S3 wants at least 5 MiB for every part but the last.
PART_SIZE = 16 << 20
#: Parts uploaded at once (each one held in memory while it is sent).
PARALLEL_PARTS = 2
CHUNK = 1 << 20
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_MISSING = {"NoSuchKey", "NoSuchBucket", "NoSuchObject"}
_CREDENTIALS = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}


class S3Store:
    def __init__(
        self,
        endpoint: str,
        bucket: str,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        secure: bool = False,
        ca_file: str | None = None,
        region: str = "us-east-1",
        part_size: int = PART_SIZE,
    ) -> None:
        """``endpoint`` is ``host:port``; no request is made until the first operation."""
        if ca_file is not None and not secure:
            raise InvalidArgument(
                f"a CA bundle ({ca_file!r}) for S3 endpoint {endpoint} without TLS: expected "
                "secure=True (an s3+https:// store URL)"
            )
        if not _BUCKET.fullmatch(bucket):
            raise InvalidArgument(
                f"invalid S3 bucket name {bucket!r}: expected 3-63 lowercase letters, digits, "
                "'-' or '.', starting and ending with a letter or digit"
            )
        self.endpoint = endpoint
        self.bucket = bucket
        self.part_size = part_size
        self._secure = secure
        self._ca_file = ca_file
        # A short connect timeout and few retries: an unreachable store must fail in seconds,
        # not after minio's default of minutes.
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=3.0, read=120.0),
            retries=urllib3.Retry(
                total=2,
                connect=1,
                other=0,  # TLS failures (an untrusted certificate) do not pass by retrying
                backoff_factor=0.2,
                status_forcelist=[500, 502, 503, 504],
            ),
            maxsize=8,
            cert_reqs="CERT_REQUIRED",
            ca_certs=ca_file,  # None: the system's CAs
        )
        self._client = Minio(
            endpoint,
            access_key=access_key,
            secret_key=secret_key if access_key else None,
            secure=secure,
            region=region,  # given, so that minio does not ask the server for the location
            http_client=http,
        )
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{'s3+https' if self._secure else 's3'}://{self.endpoint}/{self.bucket}"

    def put_bytes(self, key: str, data: bytes) -> None:
        validate_key(key)
        self._ensure_bucket()
        self._call(
            "put",
            key,
            lambda: self._client.put_object(self.bucket, key, io.BytesIO(data), len(data)),
        )

    def put_file(self, key: str, path: Path, *, move: bool = False) -> None:
        validate_key(key)
        if not Path(path).is_file():
            raise StoreError(f"cannot upload {str(path)!r} to {self.url}: expected a file")
        self._ensure_bucket()
        self._call(
            "upload",
            key,
            lambda: self._client.fput_object(
                self.bucket,
                key,
                str(path),
                part_size=self.part_size,
                num_parallel_uploads=PARALLEL_PARTS,
            ),
        )
        if move:
            Path(path).unlink()

    def get_bytes(self, key: str) -> bytes:
        with self._object(key) as response:
            return self._call("read", key, response.read)

    def get_file(self, key: str, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._object(key) as response:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
                try:
                    self._call("download", key, lambda: _copy(response.stream(CHUNK), tmp))
                except BaseException:
                    tmp.close()
                    os.unlink(tmp.name)
                    raise
        os.replace(tmp.name, path)

    def exists(self, key: str) -> bool:
        validate_key(key)
        try:
            self._call("stat", key, lambda: self._client.stat_object(self.bucket, key))
        except _Missing:
            return False
        return True

    def list(self, prefix: str) -> list[str]:
        def names() -> list[str]:
            objects = self._client.list_objects(self.bucket, prefix=prefix, recursive=True)
            return sorted(o.object_name for o in objects if o.object_name is not None)

        try:
            return self._call("list", prefix, names)
        except _Missing:  # no bucket yet: nothing was ever stored
            return []

    def delete(self, key: str) -> None:
        validate_key(key)
        with contextlib.suppress(_Missing):  # no bucket: nothing to delete
            self._call("delete", key, lambda: self._client.remove_object(self.bucket, key))

    def _ensure_bucket(self) -> None:
        """Create the bucket on the first write (once per store object)."""
        if self._bucket_ready:
            return
        client = self._client
        with self._bucket_lock:
            if not self._bucket_ready:
                exists = self._call("bucket check", "", lambda: client.bucket_exists(self.bucket))
                if not exists:
                    try:
                        self._call("bucket create", "", lambda: client.make_bucket(self.bucket))
                    except StoreError as exc:  # created by another process meanwhile
                        if "BucketAlreadyOwnedByYou" not in str(exc):
                            raise
                self._bucket_ready = True

    @contextlib.contextmanager
    def _object(self, key: str) -> Iterator[urllib3.BaseHTTPResponse]:
        validate_key(key)
        response = self._call("get", key, lambda: self._client.get_object(self.bucket, key))
        try:
            yield response
        finally:
            response.close()
            response.release_conn()

    def _call(self, what: str, key: str, call: Callable[[], T]) -> T:
        where = f"{self.url}/{key}" if key else self.url
        try:
            return call()
        except S3Error as exc:
            if exc.code in _MISSING:
                raise _Missing(f"no object {key!r} in store {self.url} ({exc.code})") from exc
            hint = (
                "; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                if exc.code in _CREDENTIALS
                else ""
            )
            raise StoreError(
                f"store {what} of {where} failed: {exc.code}: {exc.message}{hint}"
            ) from exc
        except ServerError as exc:
            raise Unavailable(
                f"S3 endpoint {self.endpoint} failed {what} of {where}: HTTP {exc.status_code}"
            ) from exc
        except (urllib3.exceptions.HTTPError, MinioException) as exc:
            tls = handshake_failure(str(exc)) if self._secure else None
            if tls is not None:
                trusted = self._ca_file or "the system's CAs"
                raise Unavailable(
                    f"TLS to S3 endpoint {self.endpoint} failed ({what} of {where}): {tls} "
                    f"(trusting {trusted}; AWS_CA_BUNDLE, MLMS_TLS_CA)"
                ) from exc
            raise Unavailable(
                f"S3 endpoint {self.endpoint} is unreachable ({what} of {where}): "
                f"{short_reason(exc)}"
            ) from exc


class _Missing(StoreError):
    """An absent key or bucket (a ``StoreError`` for callers; some methods expect it)."""


def _copy(chunks: Iterator[bytes], out) -> None:
    for chunk in chunks:
        out.write(chunk)
