"""A language model's perplexity on plain text, by torchmetrics.

The measured pass times the model's next-token predict like any other; the perplexity needs the
model's log-likelihood of every token of each sequence, so ``finish`` runs the model once more
over the sequences seen, untimed, through ``SequenceLogits`` (the logits of every position), a
few sequences at a time to bound the memory of (rows, positions, vocabulary) logits. Each
position predicts the next token; padding is never predicted nor scored.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from mlms.accuracy.scorer import Scorer
from mlms.errors import InvalidArgument
from mlms.tasks.postprocess import Step

#: Sequences a logits call holds at once.
ROWS = 4
#: The target of a padding position (torchmetrics skips it).
IGNORED = -100


@runtime_checkable
class SequenceLogits(Protocol):
    def sequence_logits(self, batch: np.ndarray) -> np.ndarray:
        """Logits of every position of each sequence: (rows, positions, vocabulary)."""
        ...


def targets(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each position's next token, ``IGNORED`` past a sequence's length: (rows, positions - 1)."""
    following = tokens[:, 1:].astype(np.int64)
    positions = np.arange(following.shape[1])
    return np.where(positions[None, :] < (lengths[:, None] - 1), following, IGNORED)


class Perplexity(Scorer):
    """Perplexity of a causal language model over token sequences."""

    task = "language_modeling"

    def __init__(self, predictor: Any) -> None:
        super().__init__()
        if not isinstance(predictor, SequenceLogits):
            raise InvalidArgument(
                f"{predictor.framework} cannot score this data set: perplexity needs the "
                "logits of every position, "
                "which only the torch predictor gives; expected --framework torch"
            )
        self._predictor = predictor
        self._batches: list[tuple[np.ndarray, np.ndarray]] = []

    def postprocess(self, outputs: np.ndarray, step: Step) -> None:
        return None

    def add(self, answers: None, truth: tuple[np.ndarray, np.ndarray]) -> None:
        """``truth``: the batch's token ids and each sequence's length."""
        self._batches.append(truth)

    def metrics(self) -> dict[str, float]:
        import torch
        from torchmetrics.text import Perplexity as TorchPerplexity

        metric = TorchPerplexity(ignore_index=IGNORED)
        for tokens, lengths in self._batches:
            for start in range(0, len(tokens), ROWS):
                rows = tokens[start : start + ROWS]
                logits = self._predictor.sequence_logits(rows)[:, :-1]
                target = targets(rows, lengths[start : start + ROWS])
                metric.update(torch.from_numpy(logits).float(), torch.from_numpy(target))
        return {"perplexity": float(metric.compute())}
