"""The digits split that ships with mlms (``mlms/assets/data/digits_split.npz``) is
scikit-learn's: its bundled digits, 20 % held out, stratified, seed 0.

``python tests/test_digits_split.py`` writes the file again from scikit-learn (the one place
the split is computed)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import numpy as np

from mlms.assets.digits import SPLIT_FILE, TEST_FRACTION, DigitsSplit, load_split


def scikit_learn_split() -> DigitsSplit:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.uint8)[..., None]
    train_x, test_x, train_y, test_y = train_test_split(
        images, digits.target, test_size=TEST_FRACTION, random_state=0, stratify=digits.target
    )
    return DigitsSplit(train_x, train_y.astype(np.int64), test_x, test_y.astype(np.int64))


def test_the_shipped_split_is_scikit_learns() -> None:
    shipped, computed = load_split(), scikit_learn_split()
    for field in fields(DigitsSplit):
        ours, theirs = getattr(shipped, field.name), getattr(computed, field.name)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), (
            f"{SPLIT_FILE} differs from scikit-learn's split in {field.name}; "
            "write it again with: python tests/test_digits_split.py"
        )


def test_reading_the_split_does_not_import_scikit_learn() -> None:
    code = (
        "import sys; from mlms.assets.digits import load_split; load_split(); "
        "assert 'sklearn' not in sys.modules, sorted(m for m in sys.modules if 'sklearn' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


if __name__ == "__main__":
    split = scikit_learn_split()
    np.savez_compressed(SPLIT_FILE, **{f.name: getattr(split, f.name) for f in fields(split)})
    sys.stdout.write(f"wrote {SPLIT_FILE}\n")
