"""The files commands write (``-o``, ``--plot``), in one place for every command.

``writable(path)`` is called before the work that fills the file (fetching spans, building a
report, running evaluations), so that a path that cannot be written fails at once rather than
after minutes of work. ``write_file(path, write)`` then lets ``write`` fill a temporary file
beside ``path`` and renames it into place: a failure (disk full, a vanished folder) leaves
neither a partial file nor a traceback, only one ``InvalidArgument`` line naming the path and
the reason. Devices and pipes (``-o /dev/stdout``) get the finished file copied into them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from mlms.errors import InvalidArgument


def writable(path: Path) -> Path:
    """``path``, if a file can be written there; else one line saying why not (in the words
    the OS would use when the write fails)."""
    folder = path.absolute().parent
    if path.is_dir():
        _refuse(path, f"{os.strerror(errno.EISDIR)}; expected a file name")
    if not folder.exists():
        _refuse(path, f"{os.strerror(errno.ENOENT)} (no folder {folder})")
    if not folder.is_dir():
        _refuse(path, f"{os.strerror(errno.ENOTDIR)} ({folder} is a file)")
    if not os.access(path if path.exists() else folder, os.W_OK):
        _refuse(path, os.strerror(errno.EACCES))
    return path


def write_file(path: Path, write: Callable[[Path], object]) -> None:
    """``write(p)`` writes the whole file at ``p``: a temporary one beside ``path`` (same suffix,
    for writers that pick the format by it), renamed to ``path`` once complete."""
    writable(path)
    if path.exists() and not path.is_file():
        # A device or a pipe: copied into, never handed to ``write`` (pyarrow removes the
        # path it failed to write, and root may remove /dev/full).
        with tempfile.TemporaryDirectory(prefix="mlms-") as folder:
            staged = Path(folder) / f"output{path.suffix}"
            _written(path, lambda: write(staged))
            _written(path, lambda: _copy(staged, path))
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial{path.suffix}")
    try:
        _written(path, lambda: (write(partial), os.replace(partial, path)))
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _copy(source: Path, target: Path) -> None:
    with open(source, "rb") as reader, open(target, "wb") as writer:
        shutil.copyfileobj(reader, writer)


def _written(path: Path, work: Callable[[], object]) -> None:
    try:
        work()
    except OSError as exc:  # pyarrow's and matplotlib's errors are OSErrors too
        reason = os.strerror(exc.errno) if exc.errno else " ".join(str(exc).split())
        _refuse(path, reason)


def _refuse(path: Path, reason: str) -> NoReturn:
    raise InvalidArgument(f"cannot write {path}: {reason}")
