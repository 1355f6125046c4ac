"""The zoo's tables (``mlms/catalog/tables``): every model they list builds and gives outputs of its
task's shape, and a bad table is one clear error.

Building on the meta device checks every network's construction and forward shapes without
allocating or initialising a weight; the networks that cannot run there (a data-dependent step:
an attention mask checked with ``.item()``, NMS inside a two-stage detector, an initialiser
reading a value) are built for real (weights left uninitialised where the library allows:
only shapes are checked) and run on a small input instead. Either way every model is built and
run here; ``tests/test_zoo_models.py`` checks ONNX Runtime against torch on
representatives, and ``tests/test_zoo_pipelines.py`` runs a detector and a segmenter end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlms.assets.architectures import architecture_of
from mlms.catalog.zoo import all_models, labels_of, merged, table_manifests
from mlms.errors import ManifestError
from mlms.manifest import TASKS, ModelManifest

#: Boxes a two-stage detector keeps in this test (100 as the zoo runs them).
KEPT = 4


def _output_shape(net, manifest: ModelManifest, device: str, small: bool) -> tuple[int, ...]:
    import torch

    spec = manifest.inputs[0]
    if spec.layout == "tokens":
        shape = [8 if small else spec.shape[0]]
    elif small and manifest.task == "object_detection":
        shape = [3, 128, 128]
    else:
        shape = spec.shape
    batch = torch.zeros(2, *shape, dtype=getattr(torch, spec.dtype), device=device)
    with torch.no_grad():
        return tuple(net(batch).shape)


def _check(manifest: ModelManifest, shape: tuple[int, ...]) -> None:
    kind = manifest.outputs[0].type
    assert shape[0] == 2, (manifest.name, shape)
    if kind == "classification":
        assert shape == (2, len(labels_of(manifest))), (manifest.name, shape)
    elif kind == "next_token":
        assert shape == (2, manifest.inputs[0].vocab_size), (manifest.name, shape)
    elif kind == "segmentation":
        assert shape[:2] == (2, len(labels_of(manifest))) and len(shape) == 4, shape
    else:
        family = manifest.attributes["family"]
        if family in ("faster_rcnn", "mask_rcnn"):  # kept boxes, 6 values (+ a 28x28 mask)
            assert shape == (2, KEPT, 6 + 28 * 28 * (family == "mask_rcnn")), shape
        else:  # the best candidates: 4 box codes, score, label, anchor index
            assert len(shape) == 3 and shape[2] == 7 and 300 <= shape[1] <= 1000, shape


def test_every_zoo_model_builds_with_its_tasks_output() -> None:
    import torch

    models = [m for m in all_models() if m.origin == "zoo" and m.name != "digits_cnn"]
    assert len(models) >= 65
    assert {"image_classification", "object_detection", "semantic_segmentation"} <= {
        m.task for m in models
    }
    built_for_real = []
    for manifest in models:
        try:
            with torch.device("meta"):
                shape = _output_shape(architecture_of(manifest).eval(), manifest, "meta", False)
        except (RuntimeError, NotImplementedError):
            built_for_real.append(manifest.name)
            net = architecture_of(manifest, initialise=False).eval()
            if manifest.task == "object_detection":
                # Fewer proposals and kept boxes: the second stage's cost, not its shapes.
                net.detector.rpn._post_nms_top_n["testing"] = 20
                net.detector.roi_heads.detections_per_img = KEPT
            shape = _output_shape(net, manifest, "cpu", True)
        _check(manifest, shape)
    # The fallback stays the exception: most networks are checked on the meta device.
    assert len(built_for_real) < 20, built_for_real


def test_tables_merge_rows_over_defaults() -> None:
    base = {"inputs": [{"shape": [3, 224, 224], "preprocessing": {"resize": 256, "crop": 224}}]}
    over = {"inputs": [{"preprocessing": {"resize": 232}}]}
    assert merged(base, over) == {
        "inputs": [{"shape": [3, 224, 224], "preprocessing": {"resize": 232, "crop": 224}}]
    }
    # A list of another length replaces the default's.
    assert merged({"a": [1]}, {"a": [1, 2]}) == {"a": [1, 2]}
    efficientnet = next(m for m in all_models() if m.name == "efficientnet_b3")
    assert efficientnet.inputs[0].shape == [3, 300, 300]
    assert efficientnet.inputs[0].preprocessing.mean == [0.485, 0.456, 0.406]
    assert efficientnet.attributes == {"dataset": "imagenet1k", "family": "efficientnet"}
    assert {m.task for m in all_models()} <= set(TASKS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models: 3\n", "expected a mapping with 'defaults' and a list 'models'"),
        ("models:\n  - {name: x}\n", "model 1: expected a mapping with name and builder"),
        (
            "defaults: {version: 1.0.0, task: image_classification}\n"
            "models:\n  - {name: x, builder: timm.x, frameworks: []}\n",
            r"x: field 'frameworks'",
        ),
    ],
)
def test_bad_table_is_one_error_naming_file_and_model(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message) as info:
        table_manifests(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("builder", ["timm.nope", "detection.nope", "transformers.nope"])
def test_unknown_builder_is_one_error_naming_it(builder: str) -> None:
    from mlms.assets.architectures import architecture

    with pytest.raises(ManifestError, match=rf"unknown builder {builder}: .* no network 'nope'"):
        architecture(builder)
