"""CLI start-up: the wall time of ``mlms --help``, ``mlms models`` and ``mlms evals`` in fresh
processes, and of ``mlms models`` against a server (``MLMS_SERVER``: the gRPC client's start
and one call), the minimum of N runs each, and their CPU time (``fresh_processes.py`` says
how). With ``--baseline TREE`` (a checkout's root holding another ``mlms/``), the two trees run
alternately, side by side, and the ratio is printed; both talk to one server of this tree.

    .venv/bin/python benchmarks/cli_startup.py --runs 7 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fresh_processes import ROOT, compare

sys.path.insert(0, str(ROOT))  # tests/, from a checkout
from tests.processes import MlmsProcess

COMMANDS = (["--help"], ["models"], ["evals"])
REMOTE = "mlms models (remote)"


@contextmanager
def server() -> Iterator[str]:
    """An ``mlms server`` of this tree on a loopback port of its own choosing; its address."""
    with tempfile.TemporaryDirectory() as home:
        env = {"PYTHONPATH": str(ROOT), "MLMS_HOME": home}
        process = MlmsProcess.serving(["server"], Path(home) / "server.log", env)
        try:
            yield process.address(timeout=60)
        finally:
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    cases = {f"mlms {' '.join(command)}": ["-m", "mlms", *command] for command in COMMANDS}
    with server() as address:
        cases[REMOTE] = ["-m", "mlms", "models"]
        compare(cases, args.runs, args.baseline, servers={REMOTE: address})


if __name__ == "__main__":
    main()
