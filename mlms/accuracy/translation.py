"""A translation model's BLEU and chrF by sacrebleu, on its greedy translations.

The measured pass times the model's first-target-token predict like any other; ``finish``
decodes each source greedily (``GreedyDecoder``, with the model's cache), untimed, cuts each at
the model's end token, turns the tokens into text with the model's tokenizer and scores the
corpus against the references with sacrebleu's defaults (BLEU: 13a tokenization; chrF:
character 6-grams, beta 2).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from mlms.accuracy.scorer import Scorer
from mlms.errors import InvalidArgument
from mlms.tasks.postprocess import Step

#: Target tokens decoded after each source.
MAX_NEW_TOKENS = 64


@runtime_checkable
class GreedyDecoder(Protocol):
    @property
    def end_token(self) -> int | None:
        """The model's end-of-sequence token."""
        ...

    def greedy_tokens(self, batch: np.ndarray, new_tokens: int) -> np.ndarray:
        """Greedy decoding of ``new_tokens`` after each input: (rows, new_tokens) token ids."""
        ...


def translation_metrics(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF of ``hypotheses`` against one reference each."""
    import sacrebleu

    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
    }


class Translations(Scorer):
    """BLEU and chrF of a translation model over source and reference pairs."""

    task = "translation"

    def __init__(self, predictor: Any, tokenizer: Any) -> None:
        super().__init__()
        if not isinstance(predictor, GreedyDecoder):
            raise InvalidArgument(
                f"{predictor.framework} cannot score this data set: BLEU needs the model's "
                "greedy translations, "
                "which only the torch predictor gives; expected --framework torch"
            )
        self._predictor, self._tokenizer = predictor, tokenizer
        self._batches: list[tuple[np.ndarray, list[str]]] = []

    def postprocess(self, outputs: np.ndarray, step: Step) -> None:
        return None

    def add(self, answers: None, truth: tuple[np.ndarray, list[str]]) -> None:
        """``truth``: the batch's source token ids and reference translations."""
        self._batches.append(truth)

    def hypotheses(self) -> list[str]:
        """The model's translation of every source seen, as text."""
        end = self._predictor.end_token
        found: list[str] = []
        for tokens, _ in self._batches:
            rows = self._predictor.greedy_tokens(tokens, MAX_NEW_TOKENS).tolist()
            # A translation ends at its first end-of-sequence token.
            cut = [row[: row.index(end)] if end in row else row for row in rows]
            found.extend(self._tokenizer.batch_decode(cut, skip_special_tokens=True))
        return found

    def metrics(self) -> dict[str, float]:
        references = [text for _, batch in self._batches for text in batch]
        return translation_metrics(self.hypotheses(), references)
