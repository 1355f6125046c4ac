"""CLI start-up: the wall time of ``mlms --help``, ``mlms models`` and ``mlms evals`` in fresh
processes, the minimum of N runs each, and their CPU time (``fresh_processes.py`` says how).
With ``--baseline TREE`` (a checkout's root holding another ``mlms/``), the two trees run
alternately, side by side, and the ratio is printed.

    .venv/bin/python benchmarks/cli_startup.py --runs 7 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fresh_processes import compare

COMMANDS = (["--help"], ["models"], ["evals"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    cases = {f"mlms {' '.join(command)}": ["-m", "mlms", *command] for command in COMMANDS}
    compare(cases, args.runs, args.baseline)


if __name__ == "__main__":
    main()
