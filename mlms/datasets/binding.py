"""A stored data set read as a given model's inputs and labels.

``bind`` checks, before anything runs, that the data set fits the model: its task against the
model's, its kind against the model's input layout, its arrays against the input's name and
shape, its labels against the model's labels (class names by name; integer labels below the
number of outputs). ``truth`` and ``inputs`` then turn each streamed batch into its task's truth
(class indices of the model, ``mlms.datasets.truth`` for the others) and the raw form
``preprocess`` finishes (decoded images, arrays, token ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlms.catalog.zoo import labels_of
from mlms.datasets.index import DatasetIndex
from mlms.datasets.truth import image_truths, masks, sequence_lengths
from mlms.errors import InvalidArgument
from mlms.manifest import InputSpec, ModelManifest

#: The token id short sequences are padded with where the model brings no tokenizer ([PAD]
#: of BERT's vocabularies).
PAD_ID = 0
#: Class names a message lists before it gives only their count.
NAMED = 5


@dataclass(frozen=True)
class BoundDataset:
    index: DatasetIndex
    sha256: str
    manifest: ModelManifest
    spec: InputSpec
    #: The model's class names, in output order (empty where the model has none).
    model_labels: tuple[str, ...]
    tokenizer: Any = None
    #: The array that feeds the model's input (arrays kind): the one named like the input, or
    #: the data set's only array.
    array: str = ""

    @property
    def described(self) -> str:
        """What the record says the input was."""
        return f"dataset:{self.index.name}@{self.index.version}"

    def truth(self, batch: Any, inputs: np.ndarray) -> Any:
        """The batch's truth for its task (``mlms.datasets.truth``); ``inputs``: the batch as
        the model takes it."""
        task = self.index.task
        if task == "detection":
            return image_truths(batch)
        if task == "segmentation":
            return masks(batch, self.spec)
        if task == "language_modeling":
            return inputs, sequence_lengths(batch, inputs, self.tokenizer)
        if task == "translation":
            return inputs, batch.column("reference").to_pylist()
        return self.labels(batch)

    def labels(self, batch: Any) -> np.ndarray:
        """The batch's labels as the model's class indices."""
        import pyarrow.compute as pc

        column = batch.column("label")
        if self.index.label_names is None:
            return column.to_numpy(zero_copy_only=False).astype(np.int64)
        mapped = pc.index_in(column, value_set=_arrow_strings(self.model_labels))
        return mapped.to_numpy(zero_copy_only=False).astype(np.int64)

    def inputs(
        self,
        batch: Any,
        preprocess: Callable[[Sequence[np.ndarray]], np.ndarray],
        pool: Executor,
        chunks: int,
    ) -> np.ndarray:
        """The batch as ``predict`` takes it: images decoded and preprocessed in ``chunks``
        parts on ``pool``; arrays cast to the input's dtype; token ids padded or cut to the
        input's length."""
        kind = self.index.kind
        if kind == "images":
            encoded = batch.column("image").to_pylist()
            size = -(-len(encoded) // max(1, chunks))
            parts = [encoded[i : i + size] for i in range(0, len(encoded), size)]
            done = pool.map(lambda part: preprocess([_decode(data) for data in part]), parts)
            return np.concatenate(list(done))
        if kind == "arrays":
            column = batch.column(self.array or self.spec.name)
            values = column.flatten().to_numpy(zero_copy_only=False)
            # A copy: Arrow's buffers are read-only, and frameworks may write to their inputs.
            array = np.array(values.reshape(len(column), *self.spec.shape), self.spec.dtype)
            return self._token_ids(array) if self.spec.layout == "tokens" else array
        if "text" in batch.schema.names:
            texts = batch.column("text").to_pylist()
            encoded = self.tokenizer(
                texts,
                padding="max_length",
                truncation=True,
                max_length=self.spec.shape[0],
                return_tensors="np",
            )
            return self._token_ids(np.asarray(encoded["input_ids"]))
        rows = batch.column("input_ids").to_pylist()
        length = self.spec.shape[0]
        array = np.full((len(rows), length), PAD_ID, np.int64)
        for row, ids in enumerate(rows):
            cut = ids[:length]
            array[row, : len(cut)] = cut
        return self._token_ids(array)

    def _token_ids(self, array: np.ndarray) -> np.ndarray:
        vocab = self.spec.vocab_size or 0
        if array.size and (int(array.min()) < 0 or int(array.max()) >= vocab):
            bad = int(array.max()) if int(array.max()) >= vocab else int(array.min())
            raise InvalidArgument(
                f"data set {self.index.name!r} has token id {bad}: model "
                f"{self.manifest.name!r} takes ids 0 to {vocab - 1}"
            )
        return array.astype(np.int64, copy=False)


def bind(
    index: DatasetIndex, sha256: str, manifest: ModelManifest, spec: InputSpec
) -> BoundDataset:
    """The data set as inputs of ``manifest`` (``spec``: its input, sequence length applied)."""
    what = f"data set {index.name!r}"
    _check_task(index, manifest)
    tokens = spec.layout == "tokens"
    if index.kind == "images" and tokens:
        raise InvalidArgument(
            f"{what} holds images; model {manifest.name!r} takes token ids ({spec.name!r})"
        )
    if index.kind == "text" and not tokens:
        raise InvalidArgument(
            f"{what} holds text; model {manifest.name!r} takes {spec.layout} images of shape "
            f"{spec.shape}"
        )
    array = _check_arrays(index, manifest, spec) if index.kind == "arrays" else ""
    tokenizer = None
    text = any(c.name == "text" for c in index.columns)
    # A translation's tokens become text again for BLEU, whatever the data set holds.
    if index.kind == "text" and (text or index.task == "translation"):
        tokenizer = _tokenizer(index, manifest)
    model_labels = tuple(labels_of(manifest))
    if index.task == "classification":
        _check_labels(index, manifest, model_labels)
    if index.task == "segmentation" and (index.label_max or 0) >= len(model_labels):
        raise InvalidArgument(
            f"{what} has masks with class {index.label_max}: model {manifest.name!r} has "
            f"{len(model_labels)} classes, so classes 0 to {len(model_labels) - 1} (and "
            "255 for pixels of no class)"
        )
    return BoundDataset(index, sha256, manifest, spec, model_labels, tokenizer, array)


#: The data set task each model task is scored on, and what the data set is for a message.
SCORED = {
    "image_classification": "classification",
    "text_classification": "classification",
    "object_detection": "detection",
    "semantic_segmentation": "segmentation",
    "text_generation": "language_modeling",
    "translation": "translation",
}
SOURCES = {
    "classification": "labelled classes",
    "detection": "a COCO-format folder",
    "segmentation": "image and class-mask pairs",
    "language_modeling": "JSONL of plain text or token ids",
    "translation": "JSONL with a 'reference' text",
}


def _check_task(index: DatasetIndex, manifest: ModelManifest) -> None:
    """A data set scores the models of its task only."""
    wanted = SCORED[manifest.task]
    if index.task != wanted:
        raise InvalidArgument(
            f"data set {index.name!r} is {_a(index.task)} data set ({SOURCES[index.task]}): "
            f"model {manifest.name!r} is {_a(manifest.task)} model; expected {_a(wanted)} data "
            f"set ({SOURCES[wanted]})"
        )


def _a(task: str) -> str:
    """``object_detection`` -> ``an object detection``."""
    words = task.replace("_", " ")
    return f"{'an' if words[0] in 'aeiou' else 'a'} {words}"


def _check_arrays(index: DatasetIndex, manifest: ModelManifest, spec: InputSpec) -> str:
    """The array that feeds ``spec``: the one of its name, or the only one (a model exported
    from another framework names its input its own way: ``x``, ``input``, ``image``)."""
    columns = {c.name: c for c in index.columns}
    have = ", ".join(f"{c.name!r} {c.shape} {c.dtype}" for c in index.columns)
    column = columns.get(spec.name)
    if column is None and len(index.columns) == 1:
        column = index.columns[0]
    if column is None:
        raise InvalidArgument(
            f"data set {index.name!r} has arrays {have}: model {manifest.name!r} takes input "
            f"{spec.name!r} of shape {spec.shape} {spec.dtype}; expected an array named "
            f"{spec.name!r}"
        )
    if column.shape != spec.shape:
        hint = (
            f" (--seq-len {column.shape[0]} evaluates at that length)"
            if spec.layout == "tokens" and len(column.shape) == 1
            else ""
        )
        raise InvalidArgument(
            f"data set {index.name!r} array {column.name!r} has samples of shape {column.shape}: "
            f"model {manifest.name!r} expects {spec.shape}{hint}"
        )
    integer = np.dtype(column.dtype).kind in "iu"
    if spec.layout == "tokens" and not integer:
        raise InvalidArgument(
            f"data set {index.name!r} array {column.name!r} has dtype {column.dtype}: model "
            f"{manifest.name!r} takes integer token ids"
        )
    return column.name


def _check_labels(index: DatasetIndex, manifest: ModelManifest, model: tuple[str, ...]) -> None:
    what = f"data set {index.name!r}"
    if index.label_names is not None:
        if not model:
            raise InvalidArgument(
                f"{what} has class names as labels; model {manifest.name!r} names no classes: "
                "expected integer labels"
            )
        unknown = sorted(set(index.label_names) - set(model))
        if unknown:
            listed = ", ".join(repr(n) for n in unknown[:NAMED])
            more = f" and {len(unknown) - NAMED} more" if len(unknown) > NAMED else ""
            examples = ", ".join(repr(n) for n in model[:3])
            raise InvalidArgument(
                f"{what} has labels model {manifest.name!r} does not have: {listed}{more} "
                f"(its {len(model)} labels are {examples}, ...)"
            )
        return
    if model and (index.label_max or 0) >= len(model):
        raise InvalidArgument(
            f"{what} has label {index.label_max}: model {manifest.name!r} has {len(model)} "
            f"outputs, so labels 0 to {len(model) - 1}"
        )


def _tokenizer(index: DatasetIndex, manifest: ModelManifest) -> Any:
    """The tokenizer of a model whose manifest names its folder (attribute ``tokenizer``)."""
    folder = manifest.attributes.get("tokenizer")
    if not isinstance(folder, str) or not Path(folder).is_dir():
        raise InvalidArgument(
            f"data set {index.name!r} holds text; model {manifest.name!r} brings no tokenizer "
            "(a 'tokenizer' folder among its attributes): add the data set with 'input_ids' "
            "instead of 'text'"
        )
    from mlms.assets.transformers_import import import_transformers

    try:
        return import_transformers().AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InvalidArgument(
            f"model {manifest.name!r}: cannot load the tokenizer in {folder!r}: {exc}"
        ) from exc


def _decode(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB") if image.mode not in ("L", "RGB") else image)


def _arrow_strings(values: tuple[str, ...]) -> Any:
    import pyarrow as pa

    return pa.array(list(values), pa.string())
