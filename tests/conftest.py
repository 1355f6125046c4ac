"""Shared fixtures: a private MLMS_HOME per test session, so tests never touch ~/.mlms.

Model assets are built once per session (in the session's store) and reused by every test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # keep torch.profiler's C++ chatter quiet

pytest_plugins = ["tests.fixtures_services"]  # etcd and s3: real servers on loopback


@pytest.fixture(scope="session", autouse=True)
def mlms_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("mlms_home")
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
