"""Checks shared by the framework tests: FRAMEWORK spans nested in MODEL spans, normalised."""

from __future__ import annotations

import pandas as pd

from mlms.tracer.levels import TraceLevel

#: The shared layer-type vocabulary (mlms.tracer.layer_kinds).
VOCABULARY = {
    "conv",
    "batchnorm",
    "relu",
    "activation",
    "pool",
    "gemm",
    "add",
    "mul",
    "concat",
    "softmax",
    "dropout",
    "reshape",
    "pad",
    "other",
}


def nested_layers(spans: pd.DataFrame, expected_kinds: set[str]) -> pd.DataFrame:
    """The FRAMEWORK spans, after checking that each lies inside its MODEL parent (same run)
    and that their kinds are in the vocabulary and include ``expected_kinds``."""
    models = spans[spans["level"] == int(TraceLevel.MODEL)].set_index("span_id")
    layers = spans[spans["level"] == int(TraceLevel.FRAMEWORK)]
    assert len(layers) > 0, "no FRAMEWORK spans"
    assert layers["parent_id"].isin(models.index).all(), "a layer span has no MODEL parent"
    parents = models.loc[layers["parent_id"]]
    assert (layers["start_ns"].to_numpy() >= parents["start_ns"].to_numpy()).all()
    assert (layers["end_ns"].to_numpy() <= parents["end_ns"].to_numpy()).all()
    assert (layers["end_ns"].to_numpy() >= layers["start_ns"].to_numpy()).all()
    assert (layers["run"].to_numpy() == parents["run"].to_numpy()).all()
    kinds = set(layers["kind"])
    assert kinds <= VOCABULARY, kinds - VOCABULARY
    assert expected_kinds <= kinds, expected_kinds - kinds
    # Every predict runs the same graph: the same number of layers under each model span.
    assert layers.groupby("parent_id").size().nunique() == 1
    return layers
