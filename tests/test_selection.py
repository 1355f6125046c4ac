"""Agent selection: model, framework and version constraint (PEP 440 and semver), --hw alias,
least load, and the one-line errors that name what the fleet has."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial

import pytest

from mlms.catalog.zoo import get_model
from mlms.errors import HardwareNotFound, InvalidArgument, Unavailable, UnsupportedFramework
from mlms.hardware import GpuInfo, HardwareInfo
from mlms.registry.base import AgentRecord
from mlms.server.fleet import Pending
from mlms.server.selection import choose, parse_framework

RESNET = get_model("resnet50")


def _agent(id: str, framework: str, version: str, gpu: str | None = None, load: int = 0):
    gpus = (
        [
            GpuInfo(
                index=0,
                name=gpu,
                alias=gpu.split()[-1].lower(),
                memory_bytes=1 << 34,
                compute_capability="7.0",
                driver="550",
            )
        ]
        if gpu
        else []
    )
    return AgentRecord(
        id=id,
        address=f"127.0.0.1:{5000 + len(id)}",
        framework=framework,
        framework_version=version,
        hardware=HardwareInfo(
            host=id,
            cpu_brand="EPYC",
            cpu_cores_logical=8,
            cpu_cores_physical=4,
            memory_bytes=1 << 34,
            machine="x86_64",
            gpus=gpus,
        ),
        models=["resnet50", "digits_cnn"],
        in_flight=load,
        started_at=datetime.now(UTC),
    )


FLEET = [
    _agent("a", "torch", "2.14.1", load=2),
    _agent("b", "torch", "2.14.1+cu130", load=0),
    _agent("c", "onnxruntime", "1.31.1", gpu="Tesla V100"),
    _agent("d", "torch", "1.13.0", gpu="Tesla V100", load=5),
]


def _choose(framework: str | None = None, hw: str = "cpu", **kwargs):
    return choose(FLEET, manifest=RESNET, framework=parse_framework(framework), hw=hw, **kwargs).id


def test_least_loaded_among_those_that_fit() -> None:
    assert _choose("torch") == "b"
    assert _choose("torch", pending={"b": 3}) == "a"
    assert _choose("torch", exclude=frozenset({"b"})) == "a"
    assert _choose(None, hw="v100") == "c"


def test_version_constraints_pep440_and_semver() -> None:
    assert _choose("torch>=2.4,<3") == "b"  # the local label +cu130 does not hide 2.14.1
    assert _choose("torch^1.13", hw="v100") == "d"
    assert _choose("torch~2.14") == "b"
    assert parse_framework("torch^0.2.3").versions == parse_framework("torch>=0.2.3,<0.3").versions
    with pytest.raises(UnsupportedFramework, match=r"runs framework torch>=3.*torch 2.14.1"):
        _choose("torch>=3")
    with pytest.raises(InvalidArgument, match="bad version range '=>2'"):
        parse_framework("torch=>2")


def test_no_agent_for_the_hardware_names_the_fleet() -> None:
    with pytest.raises(HardwareNotFound) as caught:
        _choose("onnxruntime", hw="a100")
    message = str(caught.value)
    assert "no agent with hardware 'a100'" in message and "v100 (GPU 0 Tesla V100)" in message
    assert "\n" not in message


def test_no_agents_at_all_or_none_for_the_model() -> None:
    with pytest.raises(Unavailable, match="no live agents"):
        choose([], manifest=RESNET, framework=parse_framework(None), hw="cpu")
    with pytest.raises(UnsupportedFramework, match="no agent can run model 'vgg16'"):
        choose(FLEET, manifest=get_model("vgg16"), framework=parse_framework(None), hw="cpu")


# -- one agent per GPU (mlms agent --gpus): the same host, each agent pinned to one GPU ----------


def _pinned(id: str, gpus: list[int] | None, load: int = 0, names=("H100", "H100", "A100")):
    host = _agent(id, "torch", "2.14.1", load=load).hardware.model_copy(
        update={
            "host": "gpuhost",
            "gpus": [
                GpuInfo(
                    index=i,
                    name=f"NVIDIA {name}",
                    alias=name.lower(),
                    memory_bytes=1 << 36,
                    compute_capability="9.0",
                    driver="550",
                    uuid=f"GPU-{i}",
                )
                for i, name in enumerate(names)
            ],
        }
    )
    return _agent(id, "torch", "2.14.1", load=load).model_copy(
        update={"hardware": host, "gpus": gpus}
    )


GPU_FLEET = [_pinned("g0", [0], load=3), _pinned("g1", [1], load=0), _pinned("g2", [2])]


def _choose_gpu(hw: str, fleet=GPU_FLEET) -> str:
    return choose(fleet, manifest=RESNET, framework=parse_framework("torch"), hw=hw).id


def test_an_alias_goes_to_the_least_loaded_agent_of_a_gpu_of_that_kind() -> None:
    assert _choose_gpu("h100") == "g1"  # g0 has the same kind, and more in flight
    assert _choose_gpu("a100") == "g2"  # g0 and g1 see the host's A100 but do not run on it
    assert _choose_gpu("gpu") == "g1"
    assert _choose_gpu("cpu") == "g1"


def test_an_index_goes_to_that_gpus_agent_only() -> None:
    assert _choose_gpu("h100:0") == "g0"  # however loaded
    assert _choose_gpu("gpu:0") == "g0"
    assert _choose_gpu("a100:2") == "g2"
    with pytest.raises(HardwareNotFound) as raised:
        _choose_gpu("h100:2")  # GPU 2 is the A100
    assert "no agent with hardware 'h100:2'" in str(raised.value)
    assert "GPU 0 NVIDIA H100" in str(raised.value) and "GPU 2 NVIDIA A100" in str(raised.value)
    with pytest.raises(HardwareNotFound):
        _choose_gpu("h100:x")


def test_an_agent_from_before_the_gpus_field_runs_on_any_gpu_of_its_host() -> None:
    old = _pinned("old", None)
    assert old.serves_hw("h100:1") and old.serves_hw("a100")
    assert _choose_gpu("h100:1", [old, _pinned("g0", [0])]) == "old"


def test_a_sweep_lane_runs_as_many_cells_at_once_as_there_are_gpu_agents() -> None:
    from types import SimpleNamespace

    from mlms.server.sweeps import FleetCells

    cells = FleetCells(None, SimpleNamespace(agents=lambda: GPU_FLEET), None, None)  # type: ignore[arg-type]
    assert cells.width(("torch", "h100")) == 2
    assert cells.width(("torch", "h100:1")) == 1
    assert cells.width(("torch", "gpu")) == 3
    assert cells.width(("onnxruntime", "h100")) == 0


def test_a_split_model_goes_to_an_agent_that_evaluates_on_enough_gpus() -> None:
    whole_host = _pinned("host", None)  # a plain agent: every GPU of its host
    fleet = [*GPU_FLEET, whole_host]
    choice = choose(
        fleet, manifest=RESNET, framework=parse_framework("torch"), hw="h100", devices=2
    )
    assert choice.id == "host"
    assert whole_host.serves_hw("h100:0,1", 2) and not whole_host.serves_hw("h100", 3)
    with pytest.raises(HardwareNotFound) as raised:
        choose(GPU_FLEET, manifest=RESNET, framework=parse_framework("torch"), hw="h100", devices=2)
    assert "split over 2 GPUs of one agent (agents started with --gpus have one each)" in str(
        raised.value
    )
    assert _choose("torch", "cpu", devices=2) == "b"  # the CPU's ranks: any agent's cores


def test_a_burst_of_dispatches_spreads_over_idle_agents() -> None:
    """Two dispatches at the same moment (a sweep's lane on a two-GPU host) reserve their
    agents one after the other, each seeing the other's choice, and hold them until done."""
    pending = Pending()
    idle = [_agent("gpu0", "torch", "2.14.1"), _agent("gpu1", "torch", "2.14.1")]
    both_chose = threading.Barrier(2)
    chosen: list[str] = []

    def dispatch() -> None:
        pick = partial(choose, idle, manifest=RESNET, framework=parse_framework("torch"), hw="cpu")
        with pending.reserve(lambda counts: pick(pending=counts)) as agent:
            chosen.append(agent.id)
            both_chose.wait(timeout=10)  # both in flight at once

    threads = [threading.Thread(target=dispatch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(chosen) == ["gpu0", "gpu1"]
    seen: list[Mapping[str, int]] = []
    with pending.reserve(lambda counts: seen.append(counts) or idle[0]):
        pass
    assert seen == [{}]  # both reservations were given back
