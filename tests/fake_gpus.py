"""A host with NVIDIA GPUs for tests on machines without one: the fake pynvml of
``tests/fake_nvml`` (the driver's answers, nothing above them), loaded in this process or put
first on a child's PYTHONPATH.

NVML is faked because this suite runs on CPU-only machines; everything above pynvml (detection,
links, ``--hw`` resolution, CUDA's numbering, locks, the energy counter, agents) is the
product's. Real GPUs are checked by ``benchmarks/gpu_agents.py`` on a 2-GPU host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mlms import hardware

FAKES = Path(__file__).parent / "fake_nvml"


def load_fake(monkeypatch: pytest.MonkeyPatch, host: dict[str, Any] | None = None,
              folder: Path | None = None) -> ModuleType:  # fmt: skip
    """The fake pynvml as ``pynvml`` in this process (for the test's duration), describing
    ``host`` (written under ``folder``) or, without one, two H100s joined by NV18."""
    if host is not None:
        assert folder is not None
        path = folder / "nvml-host.json"
        path.write_text(json.dumps(host))
        monkeypatch.setenv("FAKE_NVML_HOST", str(path))
    else:
        monkeypatch.delenv("FAKE_NVML_HOST", raising=False)
    spec = importlib.util.spec_from_file_location("pynvml", FAKES / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def fake_host(monkeypatch: pytest.MonkeyPatch, host: dict[str, Any] | None = None,
              folder: Path | None = None) -> hardware.HardwareInfo:  # fmt: skip
    """``hardware.detect()`` as it reads the fake driver (not cached)."""
    load_fake(monkeypatch, host, folder)
    return hardware.detect.__wrapped__()


def child_env(**extra: str) -> dict[str, str]:
    """An environment for a child process that finds the fake pynvml first."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), *sys.path])
    env.pop("FAKE_NVML_WATTS", None)
    if "CUDA_VISIBLE_DEVICES" not in extra:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
