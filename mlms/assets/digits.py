"""The digits data set (scikit-learn's bundled 8x8 images) and the CNN trained on it.

The split is fixed (scikit-learn's, shipped beside this module); the training is deterministic:
the same seed gives, on the same software, the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

TEST_FRACTION = 0.2
#: scikit-learn's bundled digits (the test set of UCI's "Optical Recognition of Handwritten
#: Digits"), split by scikit-learn's ``train_test_split`` (``TEST_FRACTION`` held out, stratified,
#: seed 0) and shipped as it came out, so that evaluating digits_cnn does not import scikit-learn
#: (1.4 s of each process's start); ``tests/test_digits_split.py`` computes it again and compares.
SPLIT_FILE = Path(__file__).parent / "data" / "digits_split.npz"


@dataclass(frozen=True)
class DigitsSplit:
    """Images as uint8 arrays of shape (n, 8, 8, 1) with values 0..16, and their labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load_split() -> DigitsSplit:
    """The split every use of the data set shares: training, accuracy, the data set's files."""
    with np.load(SPLIT_FILE, allow_pickle=False) as arrays:
        return DigitsSplit(**{field.name: arrays[field.name] for field in fields(DigitsSplit)})


def digits_network():  # -> torch.nn.Module, untrained
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train_digits_cnn(model, seed: int = 0) -> None:
    """Train the digits CNN in place (3 s of one CPU core).

    On one thread whatever the machine: the sums of a step differ with the number of threads,
    so the weights would differ between machines, and a step this small (64 images of 8x8) runs
    no faster on more, while each thread's wait for the others grows with the machine's load
    (a 2-core machine under load took 220 s on two threads, 12 s on one).

    Building torch's optimizer loads torch's compiler stack, which must not meet TensorFlow in
    one process (``mlms.isolation``); the asset builder that calls this runs in its own."""
    import torch
    from torch import nn

    split = load_split()
    x = torch.from_numpy(split.train_images.transpose(0, 3, 1, 2).astype(np.float32) / 16.0)
    y = torch.from_numpy(split.train_labels)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _epoch in range(30):
            order = torch.randperm(len(x), generator=generator)
            for start_row in range(0, len(x), 64):
                index = order[start_row : start_row + 64]
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x[index]), y[index])
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
