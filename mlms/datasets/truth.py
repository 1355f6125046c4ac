"""Each data set task's truth for one streamed batch, as ``mlms.accuracy`` scores it.

- detection: one ``ImageTruth`` per image (id, size, its annotations' JSON);
- segmentation: the masks through the pipeline's resize and centre crop (nearest neighbour),
  (rows, height, width) class indices at the model input's size;
- language modelling: the batch's token ids and each sequence's length (padding unscored);
- translation: the token ids and the reference texts.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlms.manifest import InputSpec


@dataclass(frozen=True)
class ImageTruth:
    """One image of a COCO-format data set: its id, size and annotations (JSON)."""

    image_id: int
    width: int
    height: int
    annotations: str


def image_truths(batch: Any) -> list[ImageTruth]:
    columns = [batch.column(n).to_pylist() for n in ("image_id", "width", "height", "annotations")]
    return [ImageTruth(*row) for row in zip(*columns, strict=True)]


def masks(batch: Any, spec: InputSpec) -> np.ndarray:
    from PIL import Image

    from mlms.tasks.preprocess import geometry

    steps = spec.preprocessing
    found = []
    for data in batch.column("mask").to_pylist():
        with Image.open(io.BytesIO(data)) as mask:
            # Palette images hold their class indices as the pixel values: no conversion.
            picture = geometry(mask, steps, Image.Resampling.NEAREST)
            found.append(np.asarray(picture, dtype=np.uint8))
    return np.stack(found)


def sequence_lengths(batch: Any, tokens: np.ndarray, tokenizer: Any) -> np.ndarray:
    """Each sequence's length in ``tokens`` (the model's input, padded or cut)."""
    limit = tokens.shape[1]
    if "text" in batch.schema.names:
        texts = batch.column("text").to_pylist()
        encoded = tokenizer(texts, truncation=True, max_length=limit)
        return np.array([len(ids) for ids in encoded["input_ids"]], np.int64)
    rows = batch.column("input_ids").to_pylist()
    return np.array([min(len(ids), limit) for ids in rows], np.int64)
