"""advise's accuracy guard on a data set reads its task's headline metric: a precision whose
mAP drops more than --max-accuracy-drop points against fp32 is not recommended, one that stays
within it is; perplexity counts a rise as the loss."""

from __future__ import annotations

from types import SimpleNamespace

from mlms.advise.record import AdviceRequest
from mlms.advise.run import _Session
from mlms.evaluation.record import Accuracy


def _record(task: str, **metrics: float) -> SimpleNamespace:
    return SimpleNamespace(
        accuracy=Accuracy(task=task, metrics=metrics, samples=500, dataset="coco-val")
    )


def _guard(task: str, baseline: dict[str, float], drop: float = 0.5) -> _Session:
    request = AdviceRequest(model="ssdlite320_mobilenet_v3", dataset="coco-val",
                            max_accuracy_drop=drop)  # fmt: skip
    space = SimpleNamespace(configs=[], batch_sizes=[1])
    session = _Session(request, space, run=None, say=print, started=0.0)  # type: ignore[arg-type]
    session.baselines["torch"] = _record(task, **baseline)  # type: ignore[assignment]
    return session


def test_a_precision_that_loses_map_is_not_recommended() -> None:
    session = _guard("detection", {"map": 0.412, "map_50": 0.6})
    line, holds = session._accuracy(_record("detection", map=0.398), "torch")  # type: ignore[arg-type]
    assert not holds
    assert line == "mAP@[.5:.95] 0.3980 against 0.4120 (fp32), drop 1.40 points"
    line, holds = session._accuracy(_record("detection", map=0.409), "torch")  # type: ignore[arg-type]
    assert holds and "drop 0.30 points" in line


def test_perplexity_rising_is_the_loss() -> None:
    session = _guard("language_modeling", {"perplexity": 20.0}, drop=2.0)
    _line, holds = session._accuracy(_record("language_modeling", perplexity=20.3), "torch")  # type: ignore[arg-type]
    assert holds
    line, holds = session._accuracy(_record("language_modeling", perplexity=21.0), "torch")  # type: ignore[arg-type]
    assert not holds and "drop 5.00 points" in line
    line, holds = session._accuracy(_record("language_modeling"), "torch")  # type: ignore[arg-type]
    assert (line, holds) == ("no accuracy in the records", False)
