"""Detection and segmentation end to end through ``mlms eval``: a real small detector (SSDlite320,
MobileNetV3) and segmenter (LR-ASPP, MobileNetV3) built with seeded weights, their
post-processing steps (box decoding and NMS; mask upsampling and argmax) as pipeline spans
inside each predict's postprocess span, and answers of their task's form in the record."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlms.cli.main import cli
from mlms.evaluation.runner import PREDICTION_SAMPLES
from mlms.tracer.archive import read_spans


def _eval(model: str, batch: int) -> dict:
    """``mlms eval`` in this process (torch is loaded already)."""
    args = ["eval", "-m", model, "-b", str(batch), "-n", "2", "--warmup", "1",
            "--min-seconds", "0", "-t", "application", "--json"]  # fmt: skip
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output[-2000:]
    return json.loads(done.stdout)


def _steps(store, record: dict) -> dict[str, list[str]]:
    """Each postprocess span's children, by name, in start order."""
    spans = read_spans(store, record["trace_id"])
    parents = spans[spans["name"] == "postprocess"]
    assert len(parents) >= 2  # one a measured predict
    children = []
    for _, parent in parents.iterrows():
        below = spans[spans["parent_id"] == parent["span_id"]].sort_values("start_ns")
        assert (below["start_ns"] >= parent["start_ns"]).all()
        assert (below["end_ns"] <= parent["end_ns"]).all()
        children.append(list(below["name"]))
    assert all(names == children[0] for names in children)
    return {"steps": children[0]}


@pytest.mark.usefixtures("mlms_home")
def test_detector_boxes_decoded_and_suppressed_as_pipeline_steps(store) -> None:
    record = _eval("ssdlite320_mobilenet_v3", 2)
    assert _steps(store, record) == {"steps": ["box decoding", "nms"]}
    labels = np.array(record["predictions"]["top5"])
    scores = np.array(record["predictions"]["probabilities"])
    assert labels.shape == scores.shape == (PREDICTION_SAMPLES, 5)
    # COCO's 90 object classes (0 is SSD's background), each image's detections best first.
    assert ((labels >= 1) & (labels <= 90)).all()
    assert (scores > 0).all() and (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.usefixtures("mlms_home")
def test_segmenter_masks_upsampled_and_classified_as_pipeline_steps(store) -> None:
    record = _eval("lraspp_mobilenet_v3", 1)
    assert _steps(store, record) == {"steps": ["mask upsampling", "argmax"]}
    classes = np.array(record["predictions"]["top5"])
    shares = np.array(record["predictions"]["probabilities"])
    # The 21 Pascal VOC classes that cover most pixels, with their shares of the image.
    assert classes.shape == (PREDICTION_SAMPLES, 5) and ((classes >= 0) & (classes < 21)).all()
    assert all(len(set(row)) == 5 for row in classes)
    assert (shares.sum(axis=1) > 0).all() and (shares.sum(axis=1) <= 1 + 1e-6).all()
    assert (np.diff(shares, axis=1) <= 0).all()
