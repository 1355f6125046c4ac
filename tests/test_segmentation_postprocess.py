"""A segmenter's class map (``mlms.tasks.postprocess.class_map``) is the per-pixel argmax of its
upsampled logits, ties, NaNs and infinities included, and its top-k answer follows from it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlms.catalog.zoo import get_model
from mlms.tasks.postprocess import class_map, postprocess


def _reference(logits: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    full = torch.nn.functional.interpolate(
        torch.from_numpy(logits), size=size, mode="bilinear", align_corners=False
    )
    return full.argmax(dim=1)


def _logits(kind: str) -> np.ndarray:
    generator = np.random.default_rng(0)
    if kind == "ties":
        # Three values only: most pixels tie between several classes, even after upsampling.
        return generator.integers(0, 3, (3, 21, 9, 11)).astype(np.float32)
    logits = generator.standard_normal((3, 21, 9, 11)).astype(np.float32)
    if kind == "non-finite":
        logits[generator.random(logits.shape) < 0.02] = np.nan
        logits[generator.random(logits.shape) < 0.02] = np.inf
        logits[generator.random(logits.shape) < 0.02] = -np.inf
    return logits


@pytest.mark.parametrize("kind", ["normal", "ties", "non-finite"])
def test_class_map_is_the_argmax_of_the_upsampled_logits(kind: str) -> None:
    manifest = get_model("lraspp_mobilenet_v3")
    size = tuple(manifest.inputs[0].shape[-2:])
    logits = _logits(kind)
    classes = class_map(manifest, logits)
    assert classes.dtype == torch.int64
    assert torch.equal(classes, _reference(logits, size))


def test_segmentation_answer_is_the_classes_covering_most_pixels() -> None:
    manifest = get_model("lraspp_mobilenet_v3")
    logits = _logits("ties")
    best, shares = postprocess(manifest, logits, 5)
    expected = _reference(logits, tuple(manifest.inputs[0].shape[-2:]))
    for row, image in enumerate(expected):
        counts = np.bincount(image.flatten().numpy(), minlength=21) / image.numel()
        order = np.argsort(-counts, kind="stable")[:5]
        assert best[row].tolist() == order.tolist()
        assert np.array_equal(shares[row], counts[order].astype(np.float32))
