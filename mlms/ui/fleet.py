"""The fleet page's rows: the agents a server sees, or this process when embedded."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mlms.hardware import GpuInfo, HardwareInfo
from mlms.registry.base import AgentRecord


@dataclass(frozen=True)
class Machine:
    id: str
    address: str
    framework: str
    hardware: str  # aliases: "cpu, h100"
    cpu: str
    gpus: str
    models: int | None  # None: every zoo model (embedded)
    load: int  # evaluations queued or running there
    since: str

    @classmethod
    def of_agent(cls, agent: AgentRecord) -> Machine:
        return cls(
            id=agent.agent_id,
            address=agent.address,
            framework=f"{agent.framework} {agent.framework_version}",
            hardware=", ".join(agent.hardware.aliases()),
            cpu=_cpu(agent.hardware),
            gpus=_gpus(agent.usable_gpus()),
            models=len(agent.models),
            load=agent.in_flight,
            since=agent.started_at.strftime("%Y-%m-%d %H:%M:%S"),
        )

    @classmethod
    def embedded(cls, load: int) -> Machine:
        hw = local_hardware()
        return cls(
            id="embedded",
            address="this process",
            framework="any installed",
            hardware=", ".join(hw.aliases()),
            cpu=_cpu(hw),
            gpus=_gpus(hw.gpus),
            models=None,
            load=load,
            since="",
        )


@functools.cache
def local_hardware() -> HardwareInfo:
    """Detected once: NVML and the CPU's brand take a while to read, and do not change."""
    from mlms.hardware import detect

    return detect()


def _cpu(hw: HardwareInfo) -> str:
    return f"{hw.cpu_brand} ({hw.cpu_cores_logical} cores, {hw.memory_bytes / 2**30:.0f} GiB)"


def _gpus(gpus: list[GpuInfo]) -> str:
    """Each GPU: index, name, memory and UUID."""
    described = []
    for g in gpus:
        uuid = f", {g.uuid}" if g.uuid else ""
        described.append(f"{g.index}: {g.name} ({g.memory_bytes / 2**30:.0f} GiB{uuid})")
    return ", ".join(described) or "-"
