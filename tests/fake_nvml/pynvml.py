"""pynvml's functions as an NVIDIA driver answers them, for tests on machines without one (put
this folder first on a child's PYTHONPATH, or load this file as ``pynvml`` in-process).

What the host has comes from the JSON file named by ``FAKE_NVML_HOST``; without it, a host of
two NVIDIA H100 80GB HBM3 joined by 18 NVLinks (as ``nvidia-smi topo -m`` shows NV18):

    {"driver": "550.54.15",
     "gpus": [{"name": ..., "uuid": "GPU-...", "pci_bus_id": "00000000:1B:00.0",
               "memory_bytes": ..., "compute_capability": [9, 0],
               "energy_mj": 0, "watts": 0.0}, ...],
     "nvlinks": [[0, 1, 18]],          # GPU, GPU, active links straight between them
     "switch_links": {"0": 18},        # links from a GPU to an NVSwitch
     "topology": {"0,1": 40},          # nvmlDeviceGetTopologyCommonAncestor's level
     "unsupported": ["nvmlDeviceGetNvLinkState"],  # raise NVMLError (NOT_SUPPORTED)
     "missing": ["nvmlDeviceGetP2PStatus"]}        # absent, as from an older pynvml

A handle is the GPU's index. The power is the number of watts in the file named by
``FAKE_NVML_WATTS`` where it is set (the power sampler's tests rewrite it as their GPU draws
more or less), else the GPU's ``watts``; the energy counter is the GPU's ``energy_mj``. The SM
clock runs at its highest, 1980 MHz, unless the file named by ``FAKE_NVML_CLOCKS`` says
otherwise ("MHz reasons").
"""

import json
import os
from pathlib import Path
from types import SimpleNamespace

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5

#: The default host: two H100s with 18 NVLinks between them.
TWO_H100 = {
    "driver": "550.54.15",
    "gpus": [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-7a3c1e52-90b4-4c1d-8e2f-00000000000{index}",
            "pci_bus_id": bus,
            "memory_bytes": 85520809984,
            "compute_capability": [9, 0],
            "energy_mj": 1_000_000 * (index + 1),
            "watts": 70.0 + index,
        }
        for index, bus in enumerate(["00000000:1B:00.0", "00000000:43:00.0"])
    ],
    "nvlinks": [[0, 1, 18]],
    "topology": {"0,1": 40},
}
#: Where the NVSwitches sit on the PCI bus (the far end of a switch link).
SWITCH_BUS = "00000000:A5:00.0"


class NVMLError(Exception):
    def __init__(self, value=NVML_ERROR_NOT_SUPPORTED):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {2: "Invalid Argument", 3: "Not Supported", 6: "Not Found"}.get(
            self.value, "Unknown"
        )


def _host():
    path = os.environ.get("FAKE_NVML_HOST")
    return json.loads(Path(path).read_text()) if path else TWO_H100


HOST = _host()
GPUS = HOST["gpus"]


def _gpu(handle):
    if not isinstance(handle, int) or not 0 <= handle < len(GPUS):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return GPUS[handle]


def _links(handle):
    """The far end of each of the GPU's active links: a GPU's index, or None (a switch)."""
    ends = []
    for a, b, count in HOST.get("nvlinks", []):
        if handle in (a, b):
            ends += [b if handle == a else a] * count
    return ends + [None] * int(HOST.get("switch_links", {}).get(str(handle), 0))


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return HOST.get("driver", "550.54.15")


def nvmlDeviceGetCount():
    return len(GPUS)


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetHandleByUUID(uuid):
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    for index, gpu in enumerate(GPUS):
        if gpu["uuid"] == uuid:
            return index
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetName(handle):
    return _gpu(handle)["name"]


def nvmlDeviceGetUUID(handle):
    return _gpu(handle)["uuid"]


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=_gpu(handle)["pci_bus_id"].encode())


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_gpu(handle).get("compute_capability", [9, 0]))


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(total=_gpu(handle).get("memory_bytes", 85520809984))


def nvmlDeviceGetClockInfo(handle, clock):
    _gpu(handle)
    if clock != NVML_CLOCK_SM:
        return 2619
    return int(_clocks()[0])


def nvmlDeviceGetMaxClockInfo(handle, clock):
    _gpu(handle)
    return 1980 if clock == NVML_CLOCK_SM else 2619


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    _gpu(handle)
    return int(_clocks()[1])


def _clocks():
    """(SM MHz, clock event reasons) from the file named by ``FAKE_NVML_CLOCKS`` ("1410 4"),
    else the highest clock held for no reason."""
    path = os.environ.get("FAKE_NVML_CLOCKS")
    if path:
        return Path(path).read_text().split()
    return 1980, 0


def nvmlDeviceGetNvLinkState(handle, link):
    ends = _links(handle)
    if not ends:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if link >= len(ends):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return NVML_FEATURE_ENABLED


def nvmlDeviceGetNvLinkRemotePciInfo(handle, link):
    nvmlDeviceGetNvLinkState(handle, link)
    peer = _links(handle)[link]
    return SimpleNamespace(
        busId=(SWITCH_BUS if peer is None else GPUS[peer]["pci_bus_id"]).encode()
    )


def nvmlDeviceGetP2PStatus(handle1, handle2, index):
    if index != NVML_P2P_CAPS_INDEX_NVLINK:
        return NVML_P2P_STATUS_OK
    switched = None in _links(handle1) and None in _links(handle2)
    return (
        NVML_P2P_STATUS_OK
        if handle2 in _links(handle1) or switched
        else NVML_P2P_STATUS_NOT_SUPPORTED
    )


def nvmlDeviceGetTopologyCommonAncestor(handle1, handle2):
    pair = ",".join(map(str, sorted((handle1, handle2))))
    level = HOST.get("topology", {}).get(pair)
    if level is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return level


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return _gpu(handle).get("energy_mj", 0)


def nvmlDeviceGetPowerUsage(handle):
    watts = os.environ.get("FAKE_NVML_WATTS")
    if watts:
        return int(float(Path(watts).read_text()) * 1e3)
    return int(_gpu(handle).get("watts", 0.0) * 1e3)


def _unsupported(*_args):
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


for _name in HOST.get("unsupported", []):
    globals()[_name] = _unsupported
for _name in HOST.get("missing", []):
    globals().pop(_name, None)
