"""The ``traceEvents`` array of a Kineto trace, as arrays DuckDB parses side by side.

Why: a Kineto trace is one JSON object whose event array holds millions of events (a million
kernels make about 1.5 GB of JSON). DuckDB parses a single object of that size in memory at
once (9 GB and 30 s here), but streams a top-level array element by element, one thread per
file. So the array's byte range is found in the file (the ``[`` after ``"traceEvents":`` and
the ``]`` that closes it) and cut into ``PARTS`` ranges at Kineto's separator between two
events (``},`` newline, two spaces, ``{``: a raw newline is never inside a JSON string, so the
separator is always structure); DuckDB reads each range, framed as an array, through an fsspec
file system straight from the file, one thread each, rows in file order. The file is mapped
into memory: the hash and the search for the array read the page cache in place, and DuckDB gets
each range in pieces of ``READ`` bytes, each copied once into memory that the next reuses (a
trace's hundreds of megabytes copied at once into fresh pages made half an import's page
faults). A file laid out otherwise (no separator) is one range. A gzipped trace is first
gunzipped to a temporary file; the trace id hashes the file as given. What lies around the
array (device properties, versions, the clock base) is small and parsed with ``json``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import mmap
import os
import re
import shutil
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

from mlms.errors import InvalidArgument, NotFound

PARTS = max(1, min(os.cpu_count() or 1, 8))  # arrays DuckDB parses side by side
PIECE = 8 << 20  # bytes of a gzipped trace gunzipped (and hashed) at a time
WINDOW = 1 << 20  # how far back from a cut to look for a separator, and the tail searched
HEAD = 64 << 20  # where "traceEvents" must start
READ = 1 << 20  # the most bytes a part hands DuckDB per read
PROTOCOL = "mlmskineto"
SEPARATOR = b"},\n  {"
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_LEADING = re.compile(rb"[ \t\r\n]*")
_SPACE = re.compile(r"[ \t\r\n]*")
_WHITESPACE = b" \t\r\n"
_DECODER = json.JSONDecoder()


class TraceText:
    """The text of a trace, read by byte ranges (the file itself, or its gunzipped copy in a
    temporary folder), with the sha256 of the file as given, computed alongside the parse.
    A context manager: leaving it removes the copy."""

    def __init__(self, source: Path | bytes, label: str) -> None:
        self.label = label
        self._source = source
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._file: io.BufferedReader | None = None
        #: The text: the bytes given, else the file mapped (nothing for an empty file).
        self._data: bytes | mmap.mmap = source if isinstance(source, bytes) else b""
        self._digest = hashlib.sha256()
        self._hasher: threading.Thread | None = None
        self.size = 0

    def __enter__(self) -> TraceText:
        try:
            if isinstance(self._source, bytes):
                if self._source.startswith(b"\x1f\x8b"):
                    self._digest.update(self._source)
                    self._open_gunzipped(io.BytesIO(self._source))
                else:
                    self._hash_in_background()
            else:
                self._open_path(self._source)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.size = len(self._data)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._hasher is not None:
            self._hasher.join()
        if isinstance(self._data, mmap.mmap):
            self._data.close()
        if self._file is not None:
            self._file.close()
        if self._folder is not None:
            self._folder.cleanup()

    def spill_folder(self) -> Path:
        """A temporary folder that lives as long as this text (for DuckDB to spill to)."""
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="mlms-kineto-")
        return Path(self._folder.name)

    def read(self, offset: int, count: int) -> bytes:
        return self._data[offset : offset + count]

    def view(self, offset: int, count: int) -> memoryview:
        """``count`` bytes from ``offset`` without copying them; release it (``with``) before
        the text closes."""
        return memoryview(self._data)[offset : offset + count]

    def sha256(self) -> str:
        if self._hasher is not None:
            self._hasher.join()
        return self._digest.hexdigest()

    def _open_path(self, path: Path) -> None:
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed in __exit__
        except FileNotFoundError as exc:
            raise NotFound(
                f"no trace file {self.label}: expected a Kineto trace (.json or .json.gz)"
            ) from exc
        except IsADirectoryError as exc:
            raise InvalidArgument(
                f"{self.label} is a folder: expected a Kineto trace file (.json or .json.gz)"
            ) from exc
        except OSError as exc:
            raise InvalidArgument(f"cannot read {self.label}: {exc}") from exc
        if handle.read(2) != b"\x1f\x8b":
            self._map(handle)
            self._hash_in_background()
            return
        with handle:
            handle.seek(0)
            self._open_gunzipped(_Hashing(handle, self._digest))

    def _open_gunzipped(self, compressed: Any) -> None:
        copy = self.spill_folder() / "trace.json"
        try:
            with gzip.GzipFile(fileobj=compressed) as text, open(copy, "wb") as out:
                shutil.copyfileobj(text, out, PIECE)
        except (OSError, EOFError, zlib.error) as exc:
            raise InvalidArgument(f"{self.label} is not a readable gzip file: {exc}") from exc
        self._map(open(copy, "rb"))  # noqa: SIM115 - closed in __exit__

    def _map(self, handle: io.BufferedReader) -> None:
        self._file = handle
        if os.fstat(handle.fileno()).st_size:
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def _hash_in_background(self) -> None:
        """Hash the data or the file on a thread, beside the parse (hashlib lets go of the
        GIL)."""

        def run() -> None:
            self._digest.update(self._data)

        self._hasher = threading.Thread(target=run, name="kineto-hash", daemon=True)
        self._hasher.start()


class _Hashing(io.RawIOBase):
    """A file read through, hashing what passes (the gzip file as given)."""

    def __init__(self, handle: io.BufferedReader, digest: Any) -> None:
        self._handle = handle
        self._digest = digest

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        count = self._handle.readinto(target)
        self._digest.update(memoryview(target)[:count])
        return count


class EventParts:
    """The trace's event array as ``PARTS`` JSON arrays of whole events, and the trace
    object's other members (``metadata``)."""

    def __init__(self, text: TraceText) -> None:
        self.label = text.label
        self._text = text
        key, start = _array_start(text)
        tail_start = max(start + 1, text.size - WINDOW)
        tail = text.read(tail_start, text.size - tail_start)
        is_object = key != start
        end = _array_end(tail, is_object=is_object)
        if end is None:
            raise InvalidArgument(
                f"{self.label} is not a complete Kineto trace: its traceEvents array does not "
                "end (a truncated file?)"
            )
        end += tail_start
        prefix = text.read(0, key) if is_object else b""
        self.metadata = _metadata(prefix, text.read(end + 1, text.size - end - 1), self.label)
        self._ranges = self._split(start + 1, end)

    def paths(self) -> list[str]:
        """The paths DuckDB reads the parts under (``file_system``), in file order."""
        return [f"{PROTOCOL}://part{index}.json" for index in range(len(self._ranges))]

    def part(self, index: int) -> _Part:
        first, last = self._ranges[index]
        # An empty range (no events) is left out: read as nothing, it would end the part early
        events: list[bytes | tuple[int, int]] = [(first, last)] if first < last else []
        return _Part(self._text, [b"[", *events, b"]"])

    def _split(self, first: int, end: int) -> list[tuple[int, int]]:
        """[first, end) as ``PARTS`` ranges of whole events, cut at separators (the comma
        between two parts' events belongs to neither); fewer where there are none."""
        ranges = []
        for index in range(1, PARTS):
            target = first + (end - first) // (PARTS - index + 1)
            if target - first < WINDOW:
                break
            cut = self._text.read(target - WINDOW, WINDOW).rfind(SEPARATOR)
            if cut < 0:
                break
            cut += target - WINDOW
            ranges.append((first, cut + 1))
            first = cut + 2
        ranges.append((first, end))
        return ranges


class _Part:
    """One part array, as the file object DuckDB reads (front to back, once)."""

    def __init__(self, text: TraceText, segments: list[bytes | tuple[int, int]]) -> None:
        self._text = text
        self._segments = list(segments)
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` (and ``READ``) bytes of the next segment alone: DuckDB reads on after
        a short read, and a range of the file is never joined to the bracket before it into a
        copy."""
        if size < 0:
            return b"".join(iter(lambda: self.read(READ), b""))
        if size == 0 or not self._segments:
            return b""
        wanted = min(size, READ)
        segment = self._segments[0]
        if isinstance(segment, bytes):
            data = segment[:wanted]
            rest: bytes | tuple[int, int] = segment[len(data) :]
        else:
            first, last = segment
            data = self._text.read(first, min(wanted, last - first))
            rest = (first + len(data), last)
        if rest and (isinstance(rest, bytes) or rest[0] < rest[1]):
            self._segments[0] = rest
        else:
            self._segments.pop(0)
        self._position += len(data)
        return data

    def readinto(self, target: Any) -> int:
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = {0: offset, 1: self._position + offset}.get(whence)
        if target != self._position:
            raise io.UnsupportedOperation("a trace part is read front to back once")
        return self._position

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing to release: the trace text owns the file."""

    def __enter__(self) -> _Part:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def file_system(events: EventParts) -> Any:
    """An fsspec file system whose files are the parts of ``events`` (``register_filesystem``)."""
    from fsspec import AbstractFileSystem

    class _Parts(AbstractFileSystem):
        protocol = PROTOCOL

        def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> _Part:
            return events.part(int(re.search(r"part(\d+)", path).group(1)))

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            # An upper bound: a part ends where its array does; DuckDB reads until then.
            return {"name": path, "size": 1 << 50, "type": "file"}

        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
            return [self.info(path)] if detail else [path]

    return _Parts(skip_instance_cache=True)


def _array_start(text: TraceText) -> tuple[int, int]:
    """Offsets of the ``"traceEvents"`` key and of the array's ``[`` (both that of the ``[``
    for a file that is a bare array)."""
    with text.view(0, min(text.size, HEAD)) as head:  # searched in place, not copied
        start = _LEADING.match(head).end()
        opening = bytes(head[start : start + 20])
        if opening[:1] == b"[":
            return start, start
        if opening[:1] != b"{":
            raise InvalidArgument(
                f"{text.label} is not JSON (it starts with {opening!r}): expected a Kineto trace"
            )
        match = _START.search(head)
        if match:
            return match.start(), match.end() - 1
        if text.size <= HEAD:
            try:
                json.loads(bytes(head))
            except (ValueError, UnicodeDecodeError):
                raise InvalidArgument(
                    f"{text.label} is not valid JSON: expected a Kineto trace (a JSON object "
                    "with a traceEvents array)"
                ) from None
    raise InvalidArgument(
        f"{text.label} has no traceEvents array: expected a Kineto trace as written by "
        "torch.profiler's export_chrome_trace"
    )


def _array_end(tail: bytes, *, is_object: bool) -> int | None:
    """Offset in ``tail`` (the file's last bytes) of the ``]`` that closes the events array:
    the first ``]`` after which the rest reads as the enclosing object's remaining members
    (or as nothing, for a bare array)."""
    # One character per undecodable byte (the tail may start inside a UTF-8 sequence), so
    # that character offsets map back to byte offsets.
    text = tail.decode("utf-8", errors="surrogateescape")
    position = text.find("]")
    while position >= 0:
        if _closes_array(text, position + 1, is_object):
            return len(text[:position].encode("utf-8", errors="surrogateescape"))
        position = text.find("]", position + 1)
    return None


def _closes_array(text: str, index: int, is_object: bool) -> bool:
    """Whether ``text[index:]`` is what may follow the array: nothing (a bare array) or the
    enclosing object's remaining members and its ``}``."""
    index = _skip(text, index)
    if not is_object:
        return index == len(text)
    try:
        while index < len(text) and text[index] == ",":
            key, index = _DECODER.raw_decode(text, _skip(text, index + 1))
            index = _skip(text, index)
            if not isinstance(key, str) or text[index : index + 1] != ":":
                return False
            _, index = _DECODER.raw_decode(text, _skip(text, index + 1))
            index = _skip(text, index)
    except ValueError:
        return False
    return text[index : index + 1] == "}" and _skip(text, index + 1) == len(text)


def _skip(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()


def _metadata(prefix: bytes, suffix: bytes, label: str) -> dict[str, Any]:
    """The trace object's members other than ``traceEvents``."""
    if not prefix.strip(_WHITESPACE):
        return {}
    try:
        document = json.loads(prefix + b'"traceEvents": []' + suffix)
    except ValueError as exc:
        raise InvalidArgument(f"{label} is not valid JSON around its traceEvents: {exc}") from exc
    document.pop("traceEvents", None)
    return document
