"""pynvml's functions as an NVIDIA driver answers them, for the power sampler's child process
in tests (put first on its PYTHONPATH): the power is the number of watts in the file named by
``FAKE_NVML_WATTS``, which the test rewrites as its GPU draws more or less."""

import os
from pathlib import Path


class NVMLError(Exception):
    pass


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:
    return 0  # the child reads the power only


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(float(Path(os.environ["FAKE_NVML_WATTS"]).read_text()) * 1e3)
