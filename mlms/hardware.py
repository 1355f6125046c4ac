"""What this machine has (CPU, memory, GPUs and their links through NVML) and ``--hw`` matching.

GPUs are named by NVML's index (``nvidia-smi``'s, ``GpuInfo.index``) and UUID everywhere mlms
stores or shows them. CUDA numbers only the GPUs ``CUDA_VISIBLE_DEVICES`` lets a process see, so
a device string ``cuda:N`` is an ordinal of this process; ``visible_gpus`` maps it to the
physical GPU (docs/DESIGN.md, "Hardware names").
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel

from mlms.cuda_visible import cuda_ordinal, cuda_visible_entries
from mlms.errors import HardwareNotFound, InvalidArgument

#: Alias -> pattern on the NVML device name. ``cpu`` always matches the host.
GPU_ALIASES: dict[str, str] = {
    "v100": r"V100",
    "a100": r"A100",
    "h100": r"H100",
    "h200": r"H200",
    "t4": r"\bT4\b",
    "l4": r"\bL4\b",
    "l40s": r"L40S",
    "a10": r"\bA10\b",
    "a10g": r"A10G",
    "p100": r"P100",
    "k80": r"K80",
    "b200": r"B200",
    "gb200": r"GB200",
    "rtx4090": r"4090",
    "gpu": r".",
}


class GpuInfo(BaseModel):
    index: int  # NVML's (nvidia-smi's), whatever CUDA_VISIBLE_DEVICES says
    name: str
    alias: str
    memory_bytes: int
    compute_capability: str
    driver: str
    clocks_mhz: dict[str, int] = {}
    uuid: str = ""  # "GPU-8932f937-...": "" in a record from before it, or where NVML fails
    pci_bus_id: str = ""  # "00000000:1B:00.0"

    @property
    def label(self) -> str:
        """``1 NVIDIA H100 80GB HBM3``: how one-line messages name it."""
        return f"{self.index} {self.name}"


#: NVML's ``nvmlDeviceGetTopologyCommonAncestor`` levels, as ``nvidia-smi topo -m`` names them.
#: INTERNAL (two GPUs on one board) is shown as PIX: one PCIe switch between them.
TOPOLOGY_LEVELS: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class GpuLink(BaseModel):
    """How two GPUs of the host reach each other."""

    gpus: list[int]  # the two GPUs' NVML indices, lower first
    #: ``nvlink``, else the PCIe path as ``nvidia-smi topo -m`` names it: PIX (one PCIe switch),
    #: PXB (several switches), PHB (a host bridge), NODE (within a NUMA node), SYS (across the
    #: sockets' interconnect).
    kind: str
    nvlinks: int = 0  # active NVLinks between them (kind nvlink); 0 where NVML does not say

    @property
    def label(self) -> str:
        """``NV18``, ``PIX``, ...: ``nvidia-smi topo -m``'s cell."""
        if self.kind == "nvlink":
            return f"NV{self.nvlinks}" if self.nvlinks else "NVLink"
        return self.kind


class HardwareInfo(BaseModel):
    host: str
    cpu_brand: str
    cpu_cores_logical: int
    cpu_cores_physical: int | None
    memory_bytes: int
    machine: str
    gpus: list[GpuInfo] = []
    #: One per pair of GPUs that NVML could place (none in a record from before it).
    links: list[GpuLink] = []

    def aliases(self) -> list[str]:
        return ["cpu", *sorted({gpu.alias for gpu in self.gpus})]

    def link(self, a: int, b: int) -> GpuLink | None:
        """The link between GPUs ``a`` and ``b`` (NVML indices), if NVML told it."""
        pair = sorted((a, b))
        return next((link for link in self.links if link.gpus == pair), None)


@cache
def detect() -> HardwareInfo:
    import psutil

    gpus, links = _nvml_gpus()
    return HardwareInfo(
        host=socket.gethostname(),
        cpu_brand=_cpu_brand(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_physical=psutil.cpu_count(logical=False),
        memory_bytes=psutil.virtual_memory().total,
        machine=platform.machine(),
        gpus=gpus,
        links=links,
    )


def alias_of(gpu_name: str) -> str:
    for alias, pattern in GPU_ALIASES.items():
        if alias != "gpu" and re.search(pattern, gpu_name, re.IGNORECASE):
            return alias
    return re.sub(r"[^a-z0-9]+", "_", gpu_name.lower()).strip("_")


# -- what --hw says ------------------------------------------------------------------------------

_HW = re.compile(r"^([a-z0-9_]+)(?::([0-9]+(?:,[0-9]+)*))?$")


def parse_hw(hw: str) -> tuple[str, list[int] | None]:
    """``h100`` -> ("h100", None); ``h100:1`` -> ("h100", [1]); ``gpu:0,1`` -> ("gpu", [0, 1]).
    Checks the form only (any host): a bad one is one InvalidArgument line."""
    text = re.sub(r"\s+", "", hw).lower()
    match = _HW.match(text)
    if match is None:
        raise InvalidArgument(
            f"bad hardware {hw!r}: expected cpu, a GPU alias (h100, ...) or an alias with GPU "
            "indices as nvidia-smi numbers them (h100:1, gpu:0, h100:0,1)"
        )
    alias, indices = match.groups()
    if alias == "cpu" and indices is not None:
        raise InvalidArgument(f"bad hardware {hw!r}: cpu takes no GPU index")
    return alias, None if indices is None else [int(i) for i in indices.split(",")]


def hw_alias(hw: str) -> str:
    """The alias of a ``--hw`` value without its GPU indices: ``h100:1`` -> ``h100``."""
    return re.sub(r"\s+", "", hw).lower().partition(":")[0]


# -- CUDA's numbering in this process ------------------------------------------------------------


def visible_gpus(info: HardwareInfo, env: Mapping[str, str] | None = None) -> list[GpuInfo]:
    """The host's GPUs in CUDA's order in this process: ``cuda:N`` is the N-th.

    ``CUDA_VISIBLE_DEVICES`` may give NVML indices or UUIDs (``GPU-...``, or a prefix that
    names one GPU); as CUDA does, the list ends at the first entry that names no GPU (``-1``,
    a MIG instance, an index the host lacks) or one already named. Without it CUDA sees every
    GPU, in NVML's (PCI bus) order: CUDA's own default order is fastest first, which is the
    same on a host of one GPU model; mlms's own workers pin one GPU by UUID, where no order
    arises (``mlms agent --gpus``).
    """
    entries = cuda_visible_entries(env)
    gpus = sorted(info.gpus, key=lambda g: g.index)
    if entries is None:
        return gpus
    seen: list[GpuInfo] = []
    for entry in entries:
        gpu = _named_gpu(entry, gpus)
        if gpu is None or gpu in seen:
            break
        seen.append(gpu)
    return seen


def _named_gpu(entry: str, gpus: list[GpuInfo]) -> GpuInfo | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if entry.upper().startswith("GPU-"):
        matches = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


def gpu_of_device(device: str, info: HardwareInfo | None = None) -> GpuInfo | None:
    """The physical GPU behind ``cuda:N`` in this process; None for ``cpu`` or one NVML does
    not list."""
    ordinal = cuda_ordinal(device)
    if ordinal is None:
        return None
    visible = visible_gpus(info or detect())
    return visible[ordinal] if ordinal < len(visible) else None


def gpus_of(devices: list[str], info: HardwareInfo | None = None) -> list[GpuInfo]:
    """The physical GPUs behind device strings of this process (``cuda:N``; ``cpu`` names
    none), in the order given, each once: what a record names as the GPUs it ran on."""
    found: list[GpuInfo] = []
    info = info or detect()
    for device in devices:
        gpu = gpu_of_device(device, info)
        if gpu is not None and gpu not in found:
            found.append(gpu)
    return found


def device_key(device: str, info: HardwareInfo | None = None) -> str:
    """What names a device across the processes of this host, whatever each one's
    ``CUDA_VISIBLE_DEVICES``: ``cpu``, ``gpu-<UUID>``; where NVML does not know the GPU, the
    device string of this process (``cuda_0``)."""
    if cuda_ordinal(device) is None:
        return device.replace(":", "_")
    gpu = gpu_of_device(device, info)
    return gpu_key(gpu) if gpu is not None else device.replace(":", "_")


def gpu_key(gpu: GpuInfo) -> str:
    """``device_key`` of a physical GPU."""
    return f"gpu-{gpu.uuid}" if gpu.uuid else f"gpu-index-{gpu.index}"


# -- --hw to device strings ------------------------------------------------------------------------

#: Whether a GPU is free now (its device lock is not held): the caller's, which owns the locks.
FreeCheck = Callable[[GpuInfo], bool]


def resolve(hw: str, info: HardwareInfo | None = None, free: FreeCheck | None = None) -> str:
    """The device string (``cpu`` or ``cuda:N`` of this process) for a ``--hw`` value.

    ``h100``: a visible H100 of this host, the first that ``free`` says is free (else the
    first: the caller queues on it); ``h100:1`` or ``gpu:1``: GPU 1 as NVML numbers it. A
    bad alias or index is one line naming the host's GPUs.
    """
    alias, indices = parse_hw(hw)
    if indices is not None and len(indices) > 1:
        raise InvalidArgument(
            f"--hw {hw!r} names {len(indices)} GPUs; an evaluation runs on one, and "
            f"--tensor-parallel {len(indices)} splits a model over several"
        )
    return _devices(hw, alias, indices, 1, info or detect(), free, group=False)[0]


def resolve_group(
    hw: str, count: int, info: HardwareInfo | None = None, free: FreeCheck | None = None
) -> list[str]:
    """``count`` device strings of one GPU kind for a model split over them, lowest CUDA
    ordinal first: ``h100`` takes free H100s first, ``h100:0,1`` names them. ``cpu`` gives
    ``cpu`` ``count`` times (the processes of a CPU split). ``count`` 1 is ``resolve``."""
    if count < 1:
        raise InvalidArgument(f"--tensor-parallel {count}: expected 1 or more")
    if count == 1:
        return [resolve(hw, info, free)]
    alias, indices = parse_hw(hw)
    if indices is not None and len(indices) != count:
        raise InvalidArgument(
            f"--hw {hw!r} names {len(indices)} GPU{'s' * (len(indices) != 1)}; "
            f"--tensor-parallel {count} needs {count}"
        )
    return _devices(hw, alias, indices, count, info or detect(), free, group=True)


def _devices(
    hw: str,
    alias: str,
    indices: list[int] | None,
    count: int,
    info: HardwareInfo,
    free: FreeCheck | None,
    *,
    group: bool,
) -> list[str]:
    if alias == "cpu":
        return ["cpu"] * count
    known = set(GPU_ALIASES) | {gpu.alias for gpu in info.gpus}
    if alias not in known:
        raise HardwareNotFound(
            f"unknown hardware {hw!r}; expected cpu or a GPU alias such as "
            f"{', '.join(a for a in GPU_ALIASES if a != 'gpu')}"
        )
    kind = [g for g in sorted(info.gpus, key=lambda g: g.index) if alias in ("gpu", g.alias)]
    visible = visible_gpus(info)
    if indices is not None:
        chosen = []
        for index in indices:
            gpu = next((g for g in kind if g.index == index), None)
            if gpu is None:
                raise HardwareNotFound(
                    f"no GPU {index} of kind {alias!r} on host {info.host}: it has "
                    f"{_listing(info.gpus)}"
                )
            if gpu in chosen:
                raise InvalidArgument(f"--hw {hw!r} names GPU {index} twice")
            if gpu not in visible:
                raise HardwareNotFound(
                    f"GPU {gpu.label} of host {info.host} is not visible to this process "
                    f"({_visibility()}): it sees {_listing(visible)}"
                )
            chosen.append(gpu)
    else:
        if not kind and not group:
            raise HardwareNotFound(
                f"no {hw!r} device on this machine ({info.host}): it has cpu "
                f"({info.cpu_brand}) and {_have(info)}"
            )
        if len(kind) < count:
            raise HardwareNotFound(
                f"--tensor-parallel {count} needs {count} {alias} GPUs; host {info.host} has "
                f"{len(kind)}: {_listing(kind) if kind else 'none'}"
                + (f" (its GPUs: {_listing(info.gpus)})" if not kind and info.gpus else "")
            )
        candidates = [g for g in visible if g in kind]
        if len(candidates) < count:
            raise HardwareNotFound(
                (f"--tensor-parallel {count} needs {count} {alias} GPUs; " if group else "")
                + f"this process sees {len(candidates)} of host {info.host}'s {len(kind)} "
                f"{alias} GPUs ({_visibility()}): {_listing(candidates) or 'none'}"
            )
        # Free ones first, then CUDA's order; a stable sort keeps the order among each.
        ranked = sorted(candidates, key=lambda g: 0 if free is None or free(g) else 1)
        chosen = ranked[:count]
    ordinals = sorted(visible.index(gpu) for gpu in chosen)
    return [f"cuda:{ordinal}" for ordinal in ordinals]


def _listing(gpus: list[GpuInfo]) -> str:
    """``0 NVIDIA H100 80GB HBM3, 1 NVIDIA H100 80GB HBM3``, or ``no GPU``."""
    return ", ".join(gpu.label for gpu in sorted(gpus, key=lambda g: g.index)) or "no GPU"


def _have(info: HardwareInfo) -> str:
    return ", ".join(f"{g.alias} ({g.label})" for g in info.gpus) or "no GPU"


def _visibility() -> str:
    entries = cuda_visible_entries()
    return "every GPU" if entries is None else f"CUDA_VISIBLE_DEVICES={','.join(entries)!r}"


def _cpu_brand() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_gpus() -> tuple[list[GpuInfo], list[GpuLink]]:
    try:
        import pynvml
    except ImportError:
        return [], []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return [], []  # no driver: a CPU-only machine
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus, handles = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            clocks = {}
            for label, clock in (("sm", pynvml.NVML_CLOCK_SM), ("mem", pynvml.NVML_CLOCK_MEM)):
                with contextlib.suppress(pynvml.NVMLError):
                    clocks[label] = pynvml.nvmlDeviceGetClockInfo(handle, clock)
            pci = _call(pynvml, "nvmlDeviceGetPciInfo", handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=name,
                    alias=alias_of(name),
                    memory_bytes=pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                    compute_capability=f"{major}.{minor}",
                    driver=driver,
                    clocks_mhz=clocks,
                    uuid=_text(_call(pynvml, "nvmlDeviceGetUUID", handle) or ""),
                    pci_bus_id=_text(getattr(pci, "busId", "") or ""),
                )
            )
            handles.append(handle)
        return gpus, _links(pynvml, gpus, handles)
    finally:
        pynvml.nvmlShutdown()


def _call(pynvml: Any, function: str, *args: Any) -> Any:
    """``pynvml.function(*args)``, or None where this pynvml or driver lacks it or it fails:
    a driver without a query gives no answer to it, never a failed detection."""
    method = getattr(pynvml, function, None)
    if method is None:
        return None
    try:
        return method(*args)
    except Exception:  # NVMLError (not supported, function not found), or a binding's own
        return None


def _links(pynvml: Any, gpus: list[GpuInfo], handles: list[Any]) -> list[GpuLink]:
    """Each pair of GPUs: NVLink (with its active links) where NVML sees one, else the PCIe
    level of their closest common ancestor; a pair NVML cannot place has no link.

    Active NVLinks are counted from each GPU's links (``nvmlDeviceGetNvLinkState``) by the PCI
    bus id of what is at the far end (``nvmlDeviceGetNvLinkRemotePciInfo``): a peer GPU, or an
    NVSwitch, through which every GPU with switch links reaches every other (``nvidia-smi``
    shows those pairs NV<links> too). ``nvmlDeviceGetP2PStatus`` with the NVLink index
    confirms a switched pair, and marks NVLink where the links could not be counted."""
    enabled = _constant(pynvml, "NVML_FEATURE_ENABLED", 1)
    most = _constant(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
    by_bus = {_bus(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    direct: dict[tuple[int, int], int] = {}
    switched: dict[int, int] = {}
    for gpu, handle in zip(gpus, handles, strict=True):
        for link in range(most):
            if _call(pynvml, "nvmlDeviceGetNvLinkState", handle, link) != enabled:
                continue
            remote = _call(pynvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            bus = _bus(_text(getattr(remote, "busId", "") or "")) if remote is not None else None
            if bus is None:
                continue
            peer = by_bus.get(bus)
            if peer is None:
                switched[gpu.index] = switched.get(gpu.index, 0) + 1
            elif peer != gpu.index:
                direct[(gpu.index, peer)] = direct.get((gpu.index, peer), 0) + 1
    p2p_nvlink = _constant(pynvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    p2p_ok = _constant(pynvml, "NVML_P2P_STATUS_OK", 0)
    links = []
    for i, (a, handle_a) in enumerate(zip(gpus, handles, strict=True)):
        for b, handle_b in list(zip(gpus, handles, strict=True))[i + 1 :]:
            count = max(direct.get((a.index, b.index), 0), direct.get((b.index, a.index), 0))
            status = _call(pynvml, "nvmlDeviceGetP2PStatus", handle_a, handle_b, p2p_nvlink)
            if (
                not count
                and switched.get(a.index)
                and switched.get(b.index)
                and status in (None, p2p_ok)
            ):
                count = min(switched[a.index], switched[b.index])
            pair = [a.index, b.index]
            if count or status == p2p_ok:
                links.append(GpuLink(gpus=pair, kind="nvlink", nvlinks=count))
                continue
            level = _call(pynvml, "nvmlDeviceGetTopologyCommonAncestor", handle_a, handle_b)
            if level in TOPOLOGY_LEVELS:
                links.append(GpuLink(gpus=pair, kind=TOPOLOGY_LEVELS[level]))
    return links


def _constant(pynvml: Any, name: str, default: int) -> int:
    value = getattr(pynvml, name, default)
    return value if isinstance(value, int) else default


def _bus(bus_id: str) -> tuple[int, int, int, int] | None:
    """``00000000:1B:00.0`` or ``0000:1b:00.0`` -> (domain, bus, device, function)."""
    match = re.fullmatch(
        r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", bus_id.strip()
    )
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16), int(function, 16)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
