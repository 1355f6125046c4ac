"""Each data set task's headline metric: which of its metrics it is, its name for people, how
much one point of it is, which way is better, and how it is printed (``mlms eval``, ``mlms
evals``, the UI's list). Plain data and one formatter, so that a listing names a metric without
loading the record's models."""

from __future__ import annotations

from typing import NamedTuple


class Headline(NamedTuple):
    #: A key of ``Accuracy.metrics`` (a classifier's is also a field of ``Accuracy``).
    key: str
    #: Its name for people.
    name: str
    #: How much one point of it is: a fraction's hundredth (top-1, mAP, mIoU), a score's unit
    #: (BLEU), or, for perplexity (lower is better), one percent of the baseline's.
    unit: str


HEADLINES: dict[str, Headline] = {
    "classification": Headline("top1", "top-1", "fraction"),
    "detection": Headline("map", "mAP@[.5:.95]", "fraction"),
    "segmentation": Headline("miou", "mIoU", "fraction"),
    "language_modeling": Headline("perplexity", "perplexity", "percent"),
    "translation": Headline("bleu", "BLEU", "score"),
}
TASKS = tuple(HEADLINES)


def headline_of(task: str) -> Headline:
    """The task's headline (a classifier's for a task this version does not know)."""
    return HEADLINES.get(task, HEADLINES["classification"])


def higher_is_better(task: str) -> bool:
    return headline_of(task).unit != "percent"


def headline_text(name: str, value: float | None) -> str:
    """A headline as every listing and ``mlms eval`` print it: ``top-1 0.7610``, ``perplexity
    12.4000``; the name alone where it has no value."""
    return f"{name} {value:.4f}" if value is not None else name
