"""Model zoo manifests: validation, look-up and errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import all_models, get_model, labels_of
from mlms.errors import ManifestError, UnknownModel
from mlms.manifest import FrameworkConstraint, load_manifest

REQUIRED = {
    "alexnet",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "vgg16",
    "vgg19",
    "mobilenet_v2",
    "densenet121",
    "squeezenet1_1",
    "inception_v3",
    "digits_cnn",
}


def test_zoo_has_every_required_model_with_labels() -> None:
    models = {m.name: m for m in all_models()}
    assert set(models) >= REQUIRED
    for manifest in models.values():
        labels = labels_of(manifest)
        kind = manifest.outputs[0].type
        if kind == "next_token":
            assert labels == [] and manifest.inputs[0].layout == "tokens", manifest.name
        elif kind == "detection":  # COCO's class indices, 91 with the background
            assert labels == [] and manifest.attributes["dataset"] == "coco", manifest.name
        elif kind == "segmentation":
            assert len(labels) == 21, manifest.name  # Pascal VOC's, with the background
        else:
            assert len(labels) in (2, 10, 1000), manifest.name
        assert "torch" in manifest.framework_names
        # Every model runs on ONNX Runtime too, or its manifest says why not.
        assert "onnxruntime" in manifest.framework_names or manifest.attributes[
            "onnxruntime"
        ].startswith("no ONNX export: "), manifest.name
    assert models["inception_v3"].inputs[0].shape == [3, 299, 299]
    assert models["digits_cnn"].dataset is not None


def test_unknown_model_names_close_matches() -> None:
    with pytest.raises(UnknownModel, match=r"'resnet5'.*resnet50"):
        get_model("resnet5")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: bad\nversion: 1.0.0\ntask: image_classification\n", "frameworks"),
        (
            (Path(__file__).parent.parent / "mlms/catalog/models/resnet18.yaml")
            .read_text()
            .replace("shape: [3, 224, 224]", "shape: [3, -1, 224]"),
            "inputs.0.shape",
        ),
        (
            (Path(__file__).parent.parent / "mlms/catalog/models/resnet18.yaml")
            .read_text()
            .replace('version: ">=2.0"', 'version: "at least two"'),
            "frameworks.0.version",
        ),
    ],
)
def test_malformed_manifest_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    message = str(caught.value)
    assert str(path) in message and f"'{field}'" in message
    assert "\n" not in message


def test_invalid_yaml_is_a_manifest_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_manifest(path)


def test_framework_constraints_ignore_local_build_labels() -> None:
    constraint = FrameworkConstraint(name="torch", version=">=2.0,<3")
    assert constraint.admits("2.14.1+cu130")
    assert not constraint.admits("1.13.0")
    assert not constraint.admits("not-a-version")


_BUILD_DIGITS = (
    "import sys; import tensorflow; from pathlib import Path; "
    "from mlms.store.local import LocalStore; from mlms.assets.manager import AssetManager; "
    "from mlms.catalog.zoo import get_model; "
    "home = Path(sys.argv[1]); assets = AssetManager(LocalStore(home), home / 'cache'); "
    "manifest = get_model('digits_cnn'); assets.ensure(manifest, 'onnxruntime'); "
    "print(assets.ensure(manifest, 'torch').sha256)"
)


def test_digits_assets_build_the_same_with_tensorflow_imported_first(
    tmp_path: Path, store, mlms_home: Path
) -> None:
    """With TensorFlow loaded, torch's optimizer (training digits) and torch.export (the ONNX
    artifact) crash their process; assets are built in a process of their own, so they build
    whatever the caller loaded before, and the trained weights are those built without
    TensorFlow (the session's store: no test process ever holds TensorFlow)."""
    run = subprocess.run(
        [sys.executable, "-c", _BUILD_DIGITS, str(tmp_path / "tensorflow_first")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    alone = AssetManager(store, mlms_home / "cache").ensure(get_model("digits_cnn"), "torch")
    digest = run.stdout.strip().splitlines()[-1]
    assert digest == alone.sha256 and len(digest) == 64
