"""Models users add through the server: ``AddModel``'s upload checked and stored.

The header comes first; the bytes that follow are written to a temporary file, never past the
size the header declared nor the server's limit, and hashed on the way; a mismatch with the
header's sha256 stores nothing. The artifact is then added as ``mlms models add`` adds a local
file (``mlms.assets.model_store``), named by the upload's file name, never by a path on the server.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mlms.assets.file_models import ModelOptions
from mlms.assets.model_store import add_model
from mlms.assets.packing import unpack
from mlms.catalog import zoo
from mlms.errors import InvalidArgument
from mlms.manifest import ModelManifest
from mlms.protos.mlms.v2 import evaluator_pb2
from mlms.rpc.convert import from_proto
from mlms.store.base import ObjectStore

#: The largest artifact a server takes unless configured otherwise.
DEFAULT_MAX_UPLOAD_BYTES = 8 << 30
_FILENAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_. -]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def receive_model(
    parts: Iterable[evaluator_pb2.ModelUpload], store: ObjectStore, limit: int
) -> ModelManifest:
    stream = iter(parts)
    first = next(stream, None)
    if first is None or first.WhichOneof("part") != "header":
        raise InvalidArgument("AddModel: expected a header as the first message, then chunks")
    header = first.header
    options = from_proto(header, _HeaderOptions, "model upload header")
    filename = header.filename
    if not _FILENAME.fullmatch(filename) or ".." in filename:
        raise InvalidArgument(
            f"upload file name {filename!r}: expected a plain file or folder name such as "
            "'model.onnx' (no path separators)"
        )
    if not _SHA256.fullmatch(header.sha256):
        raise InvalidArgument(
            f"upload sha256 {header.sha256!r}: expected 64 lowercase hexadecimal digits"
        )
    if header.size > limit:
        raise InvalidArgument(
            f"upload of {header.size:,} bytes: over this server's limit of {limit:,} bytes"
        )
    with tempfile.TemporaryDirectory(prefix="mlms-upload-") as tmp:
        received = Path(tmp) / "received"
        digest = hashlib.sha256()
        size = 0
        with open(received, "wb") as out:
            for part in stream:
                chunk = part.chunk
                if part.WhichOneof("part") != "chunk":
                    raise InvalidArgument("AddModel: a second header after the first")
                size += len(chunk)
                if size > header.size:
                    raise InvalidArgument(
                        f"upload longer than the {header.size:,} bytes its header declared"
                        + (f" (this server's limit is {limit:,} bytes)" if size > limit else "")
                    )
                digest.update(chunk)
                out.write(chunk)
        if size != header.size:
            raise InvalidArgument(
                f"upload of {size:,} bytes ended short of the {header.size:,} its header "
                "declared; nothing was stored"
            )
        if digest.hexdigest() != header.sha256:
            raise InvalidArgument(
                f"upload sha256 mismatch: the header says {header.sha256}, the bytes received "
                f"hash to {digest.hexdigest()}; nothing was stored"
            )
        artifact = Path(tmp) / "artifact" / filename
        if header.archive:
            unpack(received, artifact)
        else:
            artifact.parent.mkdir()
            received.rename(artifact)
        return add_model(
            store,
            artifact,
            options.model_options(),
            replace=header.replace,
            source=filename,
            taken=frozenset(m.name for m in zoo.all_models()),
            sha256=None if header.archive else header.sha256,
        )


class _HeaderOptions(ModelOptions):
    """The upload header's fields that say what the model is (the rest: the bytes)."""

    model_config = ModelOptions.model_config | {"extra": "ignore"}
    replace: bool = False
    filename: str = ""
    archive: bool = False
    size: int = 0
    sha256: str = ""

    def model_options(self) -> ModelOptions:
        return ModelOptions.model_validate(self.model_dump(include=set(ModelOptions.model_fields)))
