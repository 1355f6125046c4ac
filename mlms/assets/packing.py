"""An artifact as the bytes of an upload: a file as it is, a folder as an uncompressed tar of
its files (sorted, hidden ones left out), and back on the receiving side, where the tar is
unpacked with tarfile's ``data`` filter (no absolute paths, no ``..``, no links leaving it)."""

from __future__ import annotations

import contextlib
import hashlib
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mlms.errors import InvalidArgument

CHUNK = 1 << 20


@dataclass(frozen=True)
class Packed:
    path: Path  # the bytes to send
    archive: bool  # a tar of a folder
    size: int
    sha256: str


@contextlib.contextmanager
def packed(path: Path) -> Iterator[Packed]:
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise InvalidArgument(f"model file {str(path)!r} does not exist")
    with contextlib.ExitStack() as stack:
        archive = path.is_dir()
        if archive:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            sent = folder / f"{path.name}.tar"
            with tarfile.open(sent, "w", format=tarfile.PAX_FORMAT) as tar:
                for item in sorted(path.rglob("*")):
                    relative = item.relative_to(path)
                    if item.is_file() and not any(p.startswith(".") for p in relative.parts):
                        tar.add(item, arcname=relative.as_posix(), recursive=False)
        else:
            sent = path
        digest = hashlib.sha256()
        with open(sent, "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        yield Packed(sent, archive, sent.stat().st_size, digest.hexdigest())


def chunks(path: Path, size: int = CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(size):
            yield chunk


def unpack(archive: Path, folder: Path) -> None:
    """Extract the tar at ``archive`` into ``folder``; one line naming what is wrong with it."""
    folder.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:") as tar:
            tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise InvalidArgument(
            f"the uploaded folder is not a readable tar archive of files: {exc}"
        ) from None
