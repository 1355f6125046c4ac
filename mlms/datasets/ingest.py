"""``mlms datasets add``: read a labelled data set from files and store it in shards.

Sources: an image folder (one subfolder per class, or a labels CSV of ``file,label``), a
COCO-format folder (``mlms.datasets.coco_folder``), a folder of image and class-mask pairs
(``mlms.datasets.mask_pairs``), a ``.npz`` or Parquet file of input arrays plus a ``label``
array, JSONL lines of ``text`` or ``input_ids`` with a ``label`` (classification), a
``reference`` text (translation) or nothing more (language modelling). Rows stream from the
source into Parquet shards of at most ``SHARD_SAMPLES`` samples or ``SHARD_BYTES`` bytes, each
uploaded as it fills: a data set larger than memory is added in bounded memory (a ``.npz``
holds its arrays whole, one at a time, as numpy reads them).

Nothing is stored half: the index is written last, and any failure (an unreadable image, a bad
line) deletes the shards this add uploaded before the error is raised.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.manager import sha256_of
from mlms.datasets.coco_folder import coco_rows, is_coco_folder, read_coco_folder
from mlms.datasets.index import (
    DEFAULT_VERSION,
    INDEX,
    Column,
    DatasetIndex,
    DatasetTask,
    Shard,
    folder,
)
from mlms.datasets.mask_pairs import MaskPairs, mask_layout
from mlms.datasets.rows import ROW_GROUP, Rows, decoded_image, short
from mlms.errors import AlreadyExists, InvalidArgument, MlmsError
from mlms.store.base import ObjectStore

SHARD_SAMPLES = 4096
SHARD_BYTES = 32 * 2**20
#: Unreadable files a message names before it gives only their count.
NAMED = 5
LABEL = "label"
IMAGE = "image"
REFERENCE = "reference"
#: The truth a task keeps beside its inputs (``mlms.datasets.index``), with its Arrow type.
TRUTH_COLUMNS = {
    "image_id": "int64",
    "width": "int64",
    "height": "int64",
    "annotations": "string",
    REFERENCE: "string",
}


def add_dataset(
    store: ObjectStore,
    path: Path,
    name: str,
    *,
    version: str = DEFAULT_VERSION,
    replace: bool = False,
    labels_csv: Path | None = None,
    workers: int | None = None,
) -> tuple[DatasetIndex, str]:
    """Store the data set at ``path`` as ``name@version``; its index and the index's sha256."""
    prefix = folder(name, version)
    if store.exists(prefix + INDEX) and not replace:
        raise AlreadyExists(
            f"data set {name!r} version {version!r} exists already in {store.url}; "
            "add --replace to overwrite it, or give another --version"
        )
    source = _open(path, labels_csv, workers or min(8, os.cpu_count() or 1))
    kind, rows = source.kind, source.rows
    writer = _ShardWriter(store, prefix, kind)
    try:
        bad: list[str] = []
        for chunk in rows:
            bad.extend(chunk.bad)
            if not bad:
                writer.add(chunk.columns)
        if bad:
            shown = ", ".join(repr(b) for b in bad[:NAMED])
            more = f" and {len(bad) - NAMED} more" if len(bad) > NAMED else ""
            raise InvalidArgument(
                f"{len(bad)} unreadable image{'s' if len(bad) > 1 else ''} in {str(path)!r}: "
                f"{shown}{more} (expected image files that PIL decodes, e.g. PNG or JPEG)"
            )
        shards = writer.finish()
        if not shards:
            raise InvalidArgument(f"{str(path)!r} holds no samples: expected at least one")
        index = DatasetIndex(
            name=name,
            version=version,
            kind=kind,
            task=source.task,
            categories=source.categories,
            samples=sum(s.samples for s in shards),
            label_names=sorted(writer.names) if writer.names else None,
            label_max=_label_max(source, writer),
            columns=writer.columns(),
            shards=shards,
            source=Path(path).name,
            created_at=datetime.now(UTC),
        )
        data = index.model_dump_json(indent=1).encode()
        store.put_bytes(prefix + INDEX, data)
    except BaseException:
        writer.discard()
        raise
    # Shards of a replaced version that the new index no longer names.
    kept = {s.key for s in shards}
    for key in store.list(prefix + "shards/"):
        if key not in kept:
            store.delete(key)
    return index, hashlib.sha256(data).hexdigest()


@dataclass
class _Source:
    """A source's rows and what its index says beyond them."""

    kind: str
    rows: Iterator[Rows]
    task: DatasetTask = "classification"
    categories: dict[int, str] | None = None
    #: The largest class index of a task whose truth is not a ``label`` column, known once
    #: the rows are read.
    label_max: Callable[[], int | None] = lambda: None


def _label_max(source: _Source, writer: _ShardWriter) -> int | None:
    if source.task != "classification":
        return source.label_max()
    return writer.label_max if not writer.names else None


def _open(path: Path, labels_csv: Path | None, workers: int) -> _Source:
    path = Path(path)
    if path.is_dir():
        return _folder(path, labels_csv, workers)
    if labels_csv is not None:
        raise InvalidArgument(f"--labels {str(labels_csv)!r}: only an image folder takes one")
    if not path.is_file():
        raise InvalidArgument(f"{str(path)!r}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _Source("arrays", _npz_rows(path))
    if suffix == ".parquet":
        return _Source("arrays", _parquet_rows(path))
    if suffix in (".jsonl", ".ndjson"):
        task = _jsonl_task(path)
        return _Source("text", _jsonl_rows(path, task), task)
    raise InvalidArgument(
        f"{str(path)!r}: unknown data set format {suffix or '(no suffix)'!r}; expected an image "
        "folder, a .npz or .parquet file of arrays, or a .jsonl file of text"
    )


def _folder(path: Path, labels_csv: Path | None, workers: int) -> _Source:
    """An image folder of classes, a COCO-format folder, or image and mask pairs."""
    task = "detection" if is_coco_folder(path) else "segmentation" if mask_layout(path) else ""
    if task and labels_csv is not None:
        raise InvalidArgument(
            f"--labels {str(labels_csv)!r}: {str(path)!r} is a {task} folder, whose labels are "
            "its annotations; only a folder of classes takes --labels"
        )
    if task == "detection":
        coco = read_coco_folder(path)
        return _Source("images", coco_rows(coco, workers), "detection", coco.categories)
    if task == "segmentation":
        pairs = MaskPairs(path, workers)
        return _Source("images", pairs.rows(), "segmentation", label_max=lambda: pairs.label_max)
    return _Source("images", _image_rows(path, labels_csv, workers))


# -- image folders ------------------------------------------------------------------------------


def _image_files(root: Path, labels_csv: Path | None) -> tuple[list[tuple[Path, str]], bool]:
    """(file, label) for every image, in a stable order; and whether the labels are class
    indices (a labels CSV of integers) rather than class names."""
    labels_csv = labels_csv or (root / "labels.csv" if (root / "labels.csv").is_file() else None)
    if labels_csv is not None:
        files = _csv_files(root, Path(labels_csv))
        return files, all(label.isdigit() for _, label in files)
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise InvalidArgument(
            f"image folder {str(root)!r} has no class subfolders and no labels.csv: expected "
            "one subfolder per class (e.g. cat/1.jpg) or a labels.csv of file,label"
        )
    files = [
        (file, cls.name)
        for cls in classes
        for file in sorted(cls.rglob("*"))
        if file.is_file() and not file.name.startswith(".")
    ]
    return files, False


def _csv_files(root: Path, labels_csv: Path) -> list[tuple[Path, str]]:
    try:
        with open(labels_csv, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or not {"file", LABEL} <= set(reader.fieldnames):
                raise InvalidArgument(
                    f"labels CSV {str(labels_csv)!r} has columns {reader.fieldnames}: expected "
                    "a header with 'file' and 'label'"
                )
            rows = [(row["file"], row[LABEL]) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InvalidArgument(f"cannot read labels CSV {str(labels_csv)!r}: {exc}") from exc
    files = []
    base = root.resolve()
    for number, (name, label) in enumerate(rows, start=2):
        file = (root / (name or "")).resolve()
        if not name or not label or not file.is_relative_to(base) or not file.is_file():
            raise InvalidArgument(
                f"labels CSV {str(labels_csv)!r} line {number}: file {name!r} with label "
                f"{label!r}: expected a file inside {str(root)!r} and a label"
            )
        files.append((file, label))
    return files


def _image_rows(root: Path, labels_csv: Path | None, workers: int) -> Iterator[Rows]:
    files, numeric = _image_files(root, labels_csv)
    labels = [label for _, label in files]
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(files), ROW_GROUP):
            part = files[start : start + ROW_GROUP]
            read = list(pool.map(_checked_image, (file for file, _ in part)))
            bad = [
                str(file.relative_to(root))
                for (file, _), data in zip(part, read, strict=True)
                if not data
            ]
            chunk = labels[start : start + ROW_GROUP]
            yield Rows({IMAGE: read, LABEL: [int(x) for x in chunk] if numeric else chunk}, bad)


def _checked_image(path: Path) -> bytes | None:
    """The file's bytes if PIL decodes the whole image, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if decoded_image(data) is not None else None


# -- arrays -------------------------------------------------------------------------------------


def _npz_rows(path: Path) -> Iterator[Rows]:
    try:
        archive = np.load(path, allow_pickle=False)
        arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InvalidArgument(f"cannot read {str(path)!r} as a .npz file: {exc}") from exc
    _require_label(arrays, path)
    count = len(arrays[LABEL])
    for name, array in arrays.items():
        if array.ndim == 0 or len(array) != count:
            raise InvalidArgument(
                f"{str(path)!r}: array {name!r} has shape {list(array.shape)}, expected "
                f"{count} samples like 'label'"
            )
    for start in range(0, count, ROW_GROUP):
        yield Rows({name: array[start : start + ROW_GROUP] for name, array in arrays.items()})


def _parquet_rows(path: Path) -> Iterator[Rows]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        source = pq.ParquetFile(path)
        names = source.schema_arrow.names
        _require_label(dict.fromkeys(names), path)
        for batch in source.iter_batches(batch_size=ROW_GROUP):
            yield Rows({name: _numpy(batch.column(name), name, path) for name in names})
    except (OSError, pa.ArrowException) as exc:
        raise InvalidArgument(f"cannot read {str(path)!r} as Parquet: {exc}") from exc


def _numpy(column: Any, name: str, path: Path) -> np.ndarray:
    """A (nested) list column of equal-length lists as one array: samples x shape."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows, shape, values = len(column), [], column
    while (
        pa.types.is_list(values.type)
        or pa.types.is_large_list(values.type)
        or (pa.types.is_fixed_size_list(values.type))
    ):
        lengths = pc.list_value_length(values)
        low, high = pc.min(lengths).as_py(), pc.max(lengths).as_py()
        if low != high or values.null_count:
            raise InvalidArgument(
                f"{str(path)!r}: column {name!r} holds lists of {low} to {high} values: "
                "expected every sample of one shape"
            )
        shape.append(low or 0)
        values = values.flatten()
    if values.null_count:
        raise InvalidArgument(f"{str(path)!r}: column {name!r} has missing values")
    return values.to_numpy(zero_copy_only=False).reshape(rows, *shape)


def _require_label(arrays: dict[str, Any], path: Path) -> None:
    if LABEL not in arrays:
        raise InvalidArgument(
            f"{str(path)!r} has arrays {sorted(arrays)}: expected a 'label' array beside "
            "arrays named like the model's inputs"
        )
    if len(arrays) < 2:
        raise InvalidArgument(
            f"{str(path)!r} has only a 'label' array: expected arrays named like the model's "
            "inputs beside it"
        )


# -- text ---------------------------------------------------------------------------------------


#: A JSONL data set's truth field for each task it can be, in the order they are looked for.
TRUTH_FIELDS = {"classification": LABEL, "translation": REFERENCE, "language_modeling": None}


def _jsonl_task(path: Path) -> DatasetTask:
    """What the first line's fields make the file: a ``label`` classification, a
    ``reference`` translation, else language modelling."""
    for number, line in _jsonl_lines(path):
        item = _parsed(line, number, path)
        # A line that is no object is named by _json_line as the rows are read.
        fields = item if isinstance(item, dict) else {}
        tasks = (t for t, f in TRUTH_FIELDS.items() if f is None or f in fields)
        return next(tasks)  # type: ignore[return-value]
    raise InvalidArgument(f"{str(path)!r} holds no samples: expected at least one")


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's non-empty lines with their numbers."""
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InvalidArgument(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, line
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"{str(path)!r} is not UTF-8 text: {exc.reason}") from None


def _jsonl_rows(path: Path, task: DatasetTask) -> Iterator[Rows]:
    truth = TRUTH_FIELDS[task]
    field_name: str | None = None
    rows: dict[str, list[Any]] = {}
    for number, line in _jsonl_lines(path):
        item = _json_line(line, number, path, truth)
        which = "text" if "text" in item else "input_ids"
        field_name = field_name or which
        value = item.get(field_name)
        if which != field_name or not _text_value(field_name, value):
            raise InvalidArgument(
                f"{str(path)!r} line {number}: expected {field_name!r} as "
                f"{'a string' if field_name == 'text' else 'a list of token ids (>= 0)'} "
                f"like the lines before, got {short(value)}"
            )
        rows.setdefault(field_name, []).append(value)
        if truth is not None:
            rows.setdefault(truth, []).append(item[truth])
        if len(rows[field_name]) == ROW_GROUP:
            yield Rows(rows)
            rows = {}
    if rows:
        yield Rows(rows)


def _parsed(line: str, number: int, path: Path) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"{str(path)!r} line {number}: not JSON ({exc})") from None


def _json_line(line: str, number: int, path: Path, truth: str | None) -> dict[str, Any]:
    """One line's object, with ``text`` or ``input_ids`` and the ``truth`` field where given
    (a ``reference`` a string); its task's fields named where they are missing."""
    item = _parsed(line, number, path)
    if (
        not isinstance(item, dict)
        or not ("text" in item or "input_ids" in item)
        or (truth is not None and truth not in item)
        or (truth is None and (LABEL in item or REFERENCE in item))
    ):
        wanted = (
            f" and {truth!r}" if truth else ", alone like the lines before" if number > 1 else ""
        )
        raise InvalidArgument(
            f"{str(path)!r} line {number}: expected an object with 'text' or 'input_ids'"
            f"{wanted} ('label': classification, 'reference': translation, neither: language "
            f"modelling), got {short(item)}"
        )
    if truth == REFERENCE and not isinstance(item[REFERENCE], str):
        raise InvalidArgument(
            f"{str(path)!r} line {number}: 'reference' is {short(item[REFERENCE])}: expected "
            "the reference translation as a string"
        )
    return item


def _text_value(field_name: str, value: Any) -> bool:
    if field_name == "text":
        return isinstance(value, str)
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )


# -- shards -------------------------------------------------------------------------------------


class _ShardWriter:
    """Parquet shards of the rows added, uploaded as each fills; remembers what it uploaded
    so that a failed add can take it back."""

    def __init__(self, store: ObjectStore, prefix: str, kind: str) -> None:
        self._store, self._prefix, self._kind = store, prefix, kind
        self._pending: list[Any] = []  # pyarrow RecordBatches
        self._rows = self._bytes = 0
        self._shapes: dict[str, tuple[list[int], str]] = {}
        self._uploaded: list[str] = []
        self.shards: list[Shard] = []
        self.names: set[str] = set()
        self.label_max = 0
        self._label_kind: str | None = None

    def add(self, columns: dict[str, Any]) -> None:
        import pyarrow as pa

        batch = pa.RecordBatch.from_pydict(
            {name: self._arrow(name, values) for name, values in columns.items()}
        )
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= SHARD_SAMPLES or self._bytes >= SHARD_BYTES:
            self._flush()

    def _arrow(self, name: str, values: Any) -> Any:
        import pyarrow as pa

        if name == LABEL:
            return self._labels(values)
        if name in TRUTH_COLUMNS:
            return pa.array(values, getattr(pa, TRUTH_COLUMNS[name])())
        if self._kind == "images":
            return pa.array(values, pa.binary())
        if self._kind == "text":
            self._shapes.setdefault(name, ([], "string" if name == "text" else "int64"))
            return pa.array(values, pa.string() if name == "text" else pa.list_(pa.int64()))
        array = np.ascontiguousarray(values)
        if array.dtype.kind not in "fiub":
            raise InvalidArgument(
                f"array {name!r} has dtype {array.dtype}: expected numbers (float or int)"
            )
        shape, dtype = list(array.shape[1:]), str(array.dtype)
        known = self._shapes.setdefault(name, (shape, dtype))
        if known != (shape, dtype):
            raise InvalidArgument(
                f"array {name!r} changes from shape {known[0]} {known[1]} to {shape} {dtype}"
            )
        flat = pa.array(array.reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, max(1, math.prod(shape)))

    def _labels(self, values: Any) -> Any:
        import pyarrow as pa

        array = np.asarray(values)
        if array.dtype == object and all(isinstance(v, str) for v in array.flat):
            array = array.astype(str)
        kind = "names" if array.dtype.kind in "US" else "ints" if array.dtype.kind in "iu" else ""
        if array.dtype.kind == "f" and np.all(array == np.round(array)):
            array, kind = array.astype(np.int64), "ints"
        if not kind or array.ndim != 1:
            raise InvalidArgument(
                f"labels of dtype {array.dtype} and shape {list(array.shape)}: expected one "
                "integer class index or one class name per sample"
            )
        if self._label_kind not in (None, kind):
            raise InvalidArgument("labels mix integers and names: expected one or the other")
        self._label_kind = kind
        if kind == "names":
            self.names.update(array.astype(str).tolist())
            return pa.array(array.astype(str).tolist(), pa.string())
        if array.size and int(array.min()) < 0:
            raise InvalidArgument(
                f"label {int(array.min())}: expected class indices from 0 (or class names)"
            )
        self.label_max = max(self.label_max, int(array.max(initial=0)))
        return pa.array(array.astype(np.int64))

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending)
        self._pending, self._rows, self._bytes = [], 0, 0
        with tempfile.TemporaryDirectory(prefix="mlms-shard-") as tmp:
            local = Path(tmp) / "shard.parquet"
            # Encoded images do not compress further; arrays and text do.
            compression = "none" if self._kind == "images" else "zstd"
            pq.write_table(table, local, row_group_size=ROW_GROUP, compression=compression)
            sha256, size = sha256_of(local), local.stat().st_size
            key = f"{self._prefix}shards/{sha256}.parquet"
            if not self._store.exists(key):  # the same content may be stored already
                self._store.put_file(key, local, move=True)
                self._uploaded.append(key)
            self.shards.append(Shard(key=key, sha256=sha256, samples=table.num_rows, bytes=size))

    def finish(self) -> list[Shard]:
        self._flush()
        return self.shards

    def columns(self) -> list[Column]:
        return [Column(name=n, shape=s, dtype=d) for n, (s, d) in self._shapes.items()] or [
            Column(name=IMAGE, dtype="binary")
        ]

    def discard(self) -> None:
        for key in self._uploaded:
            # The error being raised already says what failed.
            with contextlib.suppress(MlmsError):
                self._store.delete(key)
