"""CLI start-up: the wall time of ``mlms --help``, ``mlms models`` and ``mlms evals`` in fresh
processes, and of ``mlms models`` against a server (``MLMS_SERVER``: the gRPC client's start
and one call), the minimum of N runs each, and their CPU time (``fresh_processes.py`` says
how). With ``--baseline TREE`` (a checkout's root holding another ``mlms/``), the two trees run
alternately, side by side, and the ratio is printed; both talk to one server of this tree.

    .venv/bin/python benchmarks/cli_startup.py --runs 7 [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fresh_processes import ROOT, compare

COMMANDS = (["--help"], ["models"], ["evals"])
REMOTE = "mlms models (remote)"


@contextmanager
def server() -> Iterator[str]:
    """An ``mlms server`` of this tree on a free loopback port; its address."""
    with tempfile.TemporaryDirectory() as home:
        address = Path(home) / "address"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLMS_HOME": home}
        env.pop("MLMS_SERVER", None)
        command = ["-m", "mlms", "server", "--listen", "127.0.0.1:0", "--address-file"]
        process = subprocess.Popen(
            [sys.executable, *command, str(address)], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not address.is_file():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the mlms server did not start")
                time.sleep(0.1)
            yield address.read_text().strip()
        finally:
            process.terminate()
            process.wait(30)


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
