"""The object store named by a URL (``--store``, ``MLMS_STORE``).

    s3://HOST:PORT/BUCKET        an S3 server over HTTP (MinIO, moto, ...)
    s3+https://HOST:PORT/BUCKET  the same over TLS
    file:///PATH or a plain path a local folder
    (empty)                      the embedded default, $MLMS_HOME/store

S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Over TLS the endpoint's
certificate must chain to the CA bundle in AWS_CA_BUNDLE (the variable AWS's own tools read),
else MLMS_TLS_CA (the fleet's CA), else the system's CAs; a bundle that is missing or not PEM
fails here, naming the variable.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mlms.config import mlms_home
from mlms.errors import InvalidArgument
from mlms.store.base import ObjectStore

_EXPECTED = "expected s3://HOST:PORT/BUCKET, s3+https://HOST:PORT/BUCKET, file:///PATH or a folder"
_S3_SCHEMES = {"s3": False, "s3+http": False, "s3+https": True}  # scheme -> TLS
CA_VARIABLES = ("AWS_CA_BUNDLE", "MLMS_TLS_CA")


def default_store() -> ObjectStore:
    """The embedded default: the local folder ``$MLMS_HOME/store``."""
    from mlms.store.local import LocalStore

    return LocalStore(mlms_home() / "store")


def store_from_url(url: str | None = None) -> ObjectStore:
    from mlms.store.local import LocalStore

    if url is None or not url.strip():
        return default_store()
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme in _S3_SCHEMES:
        return _s3(url, parts, secure=_S3_SCHEMES[parts.scheme])
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise InvalidArgument(f"invalid store URL {url!r}: {_EXPECTED}")
        return LocalStore(Path(unquote(parts.path)))
    if "://" in url:
        raise InvalidArgument(f"invalid store URL {url!r}: {_EXPECTED}")
    return LocalStore(Path(url))


def _s3(url: str, parts, *, secure: bool) -> ObjectStore:
    from mlms.client_tls import pem_from_env
    from mlms.store.s3 import S3Store

    bucket = parts.path.strip("/")
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        port = None
    if not parts.hostname or port is None or not bucket or "/" in bucket or parts.query:
        raise InvalidArgument(f"invalid store URL {url!r}: {_EXPECTED}")
    ca = pem_from_env(CA_VARIABLES) if secure else None
    return S3Store(
        f"{parts.hostname}:{port}",
        bucket,
        access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
        secure=secure,
        ca_file=ca[1] if ca else None,
    )
