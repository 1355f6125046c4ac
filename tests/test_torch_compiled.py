"""torch.compile in a process that evaluates many compiled models (an agent, advise, a sweep):
each compiled model compiles as in a fresh process once no other is in use, so Dynamo's cache
never reaches the limit past which it runs new variants eager (``mlms.predictors.torch_compiled``),
and a model in use keeps its compiled code while another compiles beside it. Dynamo's counter
of the graphs it compiled says which happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.evaluation.inputs import open_inputs
from mlms.predictors.base import PredictorOptions
from mlms.predictors.registry import predictor_class

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def compiled(store, mlms_home: Path):
    manifest = get_model("digits_cnn")
    asset = AssetManager(store, mlms_home / "cache").ensure(manifest, "torch")
    batch = open_inputs(manifest, ["synthetic"], seed=0).take(0, 1).tensor

    def load(**options):
        options = {"compile": "default", **options}
        return predictor_class("torch")(manifest, asset.path, PredictorOptions("cpu", **options))

    return load, batch


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def test_a_compiled_model_compiles_afresh_once_none_is_in_use(compiled) -> None:
    load, batch = compiled
    with load() as first:
        first.predict(batch)
    before = _graphs()
    with load() as again:  # the same settings: Dynamo would reuse the first's code
        again.predict(batch)
        assert _graphs() == before + 1
    with load(precision="bf16") as other:
        other.predict(batch)
        assert _graphs() == before + 2


@pytest.mark.parametrize(
    ("beside", "compiled_beside"),
    [({"channels_last": True}, 1), ({"compile": None}, 0)],
    ids=["another compiled", "an eager one"],
)
def test_a_model_in_use_keeps_its_compiled_code_while_another_loads_beside_it(
    compiled, beside: dict, compiled_beside: int
) -> None:
    load, batch = compiled
    with load() as first:
        first.predict(batch)
        before = _graphs()
        with load(**beside) as other:
            other.predict(batch)
        first.predict(batch)  # no reset under it: nothing to compile again
        assert _graphs() == before + compiled_beside
