"""Shared fixtures, and how the suite runs in parallel.

How it runs: ``python -m pytest`` (pyproject's addopts) starts one pytest-xdist worker per core
for a run of several test files (``pytest_xdist_auto_num_workers`` below), and none for a run
of one file, which keeps ``-x``, ``--pdb`` and print debugging as usual; ``-n N`` or ``-n 0``
choose. Each worker gets whole modules, the longest first (``tests/scheduling.py``). Every
worker is a pytest session of its own: what is ``session``-scoped below is made once per
worker.

What a test may rely on:
- ``mlms_home``: a private ``$MLMS_HOME`` per worker (never ``~/.mlms``), so records, traces,
  device locks and the asset cache of one worker are not another's. Tests must not count on
  being alone on the machine (another worker evaluates beside them).
- ``store``: the local store in it. Its ``models/`` folder (the built model assets) is shared by
  the workers of one run: ``mlms.assets.manager`` builds an asset once under a lock on its folder,
  so whichever worker needs digits_cnn or resnet18 first builds it and the other loads it. A
  test that damages an asset does so in a store of its own (``tmp_path``), never in this one.
- ``etcd``, ``running_etcd``, ``s3`` (``tests/fixtures_services.py``): real servers on free
  loopback ports, one per module; ports come from ``tests.processes.free_port``, so workers
  never collide.
- Expensive inputs that do not depend on the code under test (a GPU capture, a trace) are
  small files in ``tests/data/``, not made again by each run.
- TensorFlow never loads in the test process (``tensorflow_stays_out``).
- With workers, ``OMP_NUM_THREADS`` is the worker's share of the cores (set at import, below),
  for it and the processes it starts; a test that asks for threads says how many.

A run that collects no test fails (pytest's exit status 5), with workers or without.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # keep torch.profiler's C++ chatter quiet
# Python's bytecode cache, even where the caller's environment turns it off: the suite starts
# hundreds of interpreters (agents, servers, CLI runs, asset builders), each of which would
# compile mlms from source again, and each worker would rewrite every test module's asserts.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # The cores shared out between the workers (and the processes they start): with each of
    # them running as many OpenMP threads as there are cores, the threads spin-wait on each
    # other's cores. Set before any framework loads here; children inherit it.
    os.environ.setdefault(
        "OMP_NUM_THREADS",
        str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))),
    )

pytest_plugins = [
    "tests.fixtures_services",  # etcd and s3: real servers on loopback
    "tests.scheduling",  # which worker runs what, in which order
]

TESTS = Path(__file__).parent


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most one per test file named on the command line
    (or under the folders named), and none (in-process) for a single file."""
    files: set[Path] = set()
    for arg in config.args or [str(TESTS)]:
        path = Path(arg.split("::", 1)[0]).resolve()
        files.update(path.rglob("test_*.py") if path.is_dir() else [path])
    cores = len(os.sched_getaffinity(0))
    workers = min(cores, len(files))
    return workers if workers > 1 else 0


def _shared_folder(factory: pytest.TempPathFactory) -> Path | None:
    """A folder that every worker of this run sees (the run's base folder), or None when the
    session runs alone."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return factory.getbasetemp().parent / "shared"


@pytest.fixture(scope="session", autouse=True)
def mlms_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("mlms_home")
    shared = _shared_folder(tmp_path_factory)
    if shared is not None:
        (shared / "models").mkdir(parents=True, exist_ok=True)
        (home / "store").mkdir()
        (home / "store" / "models").symlink_to(shared / "models", target_is_directory=True)
    previous = os.environ.get("MLMS_HOME")
    os.environ["MLMS_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("MLMS_HOME", None)
    else:
        os.environ["MLMS_HOME"] = previous


@pytest.fixture(scope="session")
def store(mlms_home: Path):
    from mlms.store.factory import default_store

    return default_store()


@pytest.fixture(autouse=True)
def tensorflow_stays_out() -> Iterator[None]:
    """TensorFlow must not load in the test process: its global LLVM symbols crash torch's
    compiler stack (``mlms.isolation``) in whichever later test builds an optimizer or starts
    torch.profiler, so one test that loaded it would make the suite pass or crash by order."""
    yield
    assert "tensorflow" not in sys.modules, (
        "this test loaded TensorFlow into the test process; run its TensorFlow part in a "
        "process of its own (mlms.isolation.call_in_own_process, or the embedded client)"
    )
