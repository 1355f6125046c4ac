"""The model's input pipeline, shared by every framework so that all see the same tensor.

Raw samples are uint8 images (H, W, C); the result is one float32 array per sample in the
manifest's layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from mlms.errors import InvalidArgument
from mlms.manifest import InputSpec, Preprocessing


def read_image(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except (FileNotFoundError, UnidentifiedImageError, OSError) as exc:
        raise InvalidArgument(f"cannot read image {str(path)!r}: {exc}") from exc


def preprocess(images: Sequence[np.ndarray], spec: InputSpec) -> np.ndarray:
    """Resize the shorter side, centre-crop, scale, normalise; stack into a batch."""
    return np.stack([_one(image, spec) for image in images]).astype(spec.dtype, copy=False)


def resized_size(steps: Preprocessing, width: int, height: int) -> tuple[int, int]:
    """An image's size after the shorter-side resize (before the crop)."""
    if not steps.resize:
        return width, height
    ratio = steps.resize / min(width, height)
    return max(1, round(width * ratio)), max(1, round(height * ratio))


def crop_offset(steps: Preprocessing, width: int, height: int) -> tuple[int, int]:
    """Where the centre crop starts (left, top) in an image of the resized size."""
    if not steps.crop:
        return 0, 0
    return (width - steps.crop) // 2, (height - steps.crop) // 2


def geometry(picture: Image.Image, steps: Preprocessing, resample: Image.Resampling) -> Image.Image:
    """The resize and centre crop of the pipeline: an input image bilinear, a class mask
    nearest, so that a mask stays on its image's pixels."""
    size = resized_size(steps, *picture.size)
    if size != picture.size:
        picture = picture.resize(size, resample)
    if steps.crop:
        left, top = crop_offset(steps, *picture.size)
        picture = picture.crop((left, top, left + steps.crop, top + steps.crop))
    return picture


def _one(image: np.ndarray, spec: InputSpec) -> np.ndarray:
    steps = spec.preprocessing
    mode = "L" if steps.color == "L" else "RGB"
    picture = Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image)
    picture = geometry(picture.convert(mode), steps, Image.Resampling.BILINEAR)
    array = np.asarray(picture, dtype=np.float32)
    if array.ndim == 2:
        array = array[..., None]
    if steps.color == "BGR":
        array = array[..., ::-1]
    array = array / steps.scale
    if steps.mean:
        array = (array - np.asarray(steps.mean, np.float32)) / np.asarray(steps.std, np.float32)
    if spec.layout == "CHW":
        array = array.transpose(2, 0, 1)
    expected = tuple(spec.shape)
    if array.shape != expected:
        raise InvalidArgument(
            f"preprocessed image has shape {array.shape}, the model expects {expected}"
        )
    return np.ascontiguousarray(array)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and softmax probabilities of the k best classes per row, best first."""
    k = min(k, logits.shape[1])
    shifted = logits - logits.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    index = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(-probabilities, index, axis=1).argsort(axis=1)
    index = np.take_along_axis(index, order, axis=1)
    return index, np.take_along_axis(probabilities, index, axis=1)
