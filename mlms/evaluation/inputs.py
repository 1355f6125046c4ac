"""Where a model's inputs come from: synthetic tensors, its data set, or image files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlms.errors import InvalidArgument
from mlms.manifest import InputSpec, ModelManifest
from mlms.tasks.preprocess import read_image


@dataclass(frozen=True)
class Samples:
    """One batch before preprocessing: raw images (None for synthetic tensors) and labels."""

    images: list[np.ndarray] | None
    tensor: np.ndarray | None
    labels: np.ndarray | None


class InputSource:
    """Cycles over its samples; ``take(i, n)`` is the i-th batch of n."""

    name: str

    def __init__(
        self,
        images: list[np.ndarray] | None,
        labels: np.ndarray | None,
        tensors: np.ndarray | None,
        name: str,
    ) -> None:
        self._images, self._labels, self._tensors, self.name = images, labels, tensors, name
        self.size = len(tensors) if tensors is not None else len(images or [])

    def take(self, index: int, batch_size: int) -> Samples:
        rows = [(index * batch_size + j) % self.size for j in range(batch_size)]
        return Samples(
            images=[self._images[r] for r in rows] if self._images is not None else None,
            tensor=self._tensors[rows] if self._tensors is not None else None,
            labels=self._labels[rows] if self._labels is not None else None,
        )


def input_spec(manifest: ModelManifest, seq_len: int | None) -> InputSpec:
    """The model's input, with ``seq_len`` as its sequence length where given."""
    spec = manifest.inputs[0]
    if seq_len is None:
        return spec
    if spec.layout != "tokens":
        raise InvalidArgument(
            f"--seq-len {seq_len}: model {manifest.name!r} takes {spec.layout} images of shape "
            f"{spec.shape}, not token sequences"
        )
    if not 1 <= seq_len <= spec.max_length:
        raise InvalidArgument(
            f"--seq-len {seq_len}: model {manifest.name!r} takes 1 to {spec.max_length} tokens"
        )
    return spec.model_copy(update={"shape": [seq_len]})


def open_inputs(
    manifest: ModelManifest,
    inputs: list[str],
    *,
    seed: int,
    seq_len: int | None = None,
    pool: int = 64,
) -> InputSource:
    """``["synthetic"]``, ``["dataset"]`` or a list of image paths; token models take
    synthetic token ids only."""
    spec = input_spec(manifest, seq_len)
    if inputs == ["synthetic"]:
        generator = np.random.default_rng(seed)
        if spec.layout == "tokens":
            tensors = generator.integers(0, spec.vocab_size, (pool, *spec.shape), dtype=np.int64)
            return InputSource(None, None, tensors, f"synthetic tokens, length {spec.shape[0]}")
        return InputSource(None, None, _normal(generator, pool, spec), "synthetic")
    if spec.layout == "tokens":
        raise InvalidArgument(
            f"inputs {inputs!r}: model {manifest.name!r} takes token ids; expected 'synthetic'"
        )
    if inputs == ["dataset"]:
        images, labels = dataset_split(manifest)
        return InputSource(list(images), labels, None, f"dataset:{manifest.dataset.name}")
    if any(item in ("synthetic", "dataset") for item in inputs):
        raise InvalidArgument(
            f"inputs {inputs!r}: 'synthetic' and 'dataset' stand alone, not beside image files"
        )
    return InputSource([read_image(Path(item)) for item in inputs], None, None, "files")


def _normal(generator: np.random.Generator, pool: int, spec: InputSpec) -> np.ndarray:
    """``pool`` samples of standard normal noise in the input's dtype: the values of one draw
    of the whole pool (the generator continues its stream from sample to sample), drawn sample
    by sample so that no float64 copy of the pool is made: 1 GB for 64 images of 800 x 800,
    whose allocation and cast made the whole draw about twice as slow
    (``benchmarks/synthetic_inputs.py``)."""
    tensors = np.empty((pool, *spec.shape), dtype=spec.dtype)
    for sample in tensors:
        sample[...] = generator.standard_normal(spec.shape)
    return tensors


def dataset_split(manifest: ModelManifest) -> tuple[np.ndarray, np.ndarray]:
    """The held-out images (uint8, HWC) and labels of the model's data set."""
    if manifest.dataset is None:
        raise InvalidArgument(
            f"model {manifest.name!r} has no data set; use --input synthetic or image files"
        )
    from mlms.assets.digits import load_split

    split = load_split()
    return split.test_images, split.test_labels
