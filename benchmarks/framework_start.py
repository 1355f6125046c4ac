"""Framework start-up: what a process that runs TensorFlow or Keras on JAX pays before its first
predict. Each run is a fresh interpreter calling the product's import path, timed from the
outside (wall, and user+sys CPU); the minimum of N runs a case (``fresh_processes.py``). With
``--baseline TREE`` (a checkout's root holding another ``mlms/``) the two trees alternate and
the ratio is printed.

Cases: ``tensorflow`` (``mlms.assets.keras_models.import_tensorflow``, which every agent, builder
and signature reader of TensorFlow calls), ``jax`` (``mlms.predictors.jax_predictor.
import_keras``, the jax agent's), and ``eval-torch``, ``eval-tensorflow`` (a whole embedded
``mlms eval -m digits_cnn -f FRAMEWORK -n 2``: the CLI, for TensorFlow its child agent, the
predicts and the accuracy on the held-out split; the asset is built first, outside the timed
runs), and ``eval-gpt2_small`` (the same on torch for GPT-2 small, eight tokens: loading its
124M stored weights into the network is most of it).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/framework_start.py --runs 5 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from fresh_processes import compare

CASES = {
    "tensorflow": [
        "-c",
        "from mlms.assets.keras_models import import_tensorflow; import_tensorflow()",
    ],
    "jax": ["-c", "from mlms.predictors.jax_predictor import import_keras; import_keras()"],
    **{
        f"eval-{framework}": shlex.split(
            f"-m mlms eval -m digits_cnn -f {framework} -n 2 --warmup 0 --min-seconds 0"
        )
        for framework in ("torch", "tensorflow")
    },
    "eval-gpt2_small": shlex.split(
        "-m mlms eval -m gpt2_small -f torch -n 2 --warmup 0 --min-seconds 0 --seq-len 8"
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES)
    )
    args = parser.parse_args()
    compare({case: CASES[case] for case in args.cases.split(",")}, args.runs, args.baseline)


if __name__ == "__main__":
    main()
