"""Addressing the GPUs of a multi-GPU host: ``--hw h100`` (any free H100), ``--hw h100:1`` (one by
index), ``resolve_group`` for a model split over several, CUDA's numbering under
``CUDA_VISIBLE_DEVICES``, the device lock keyed by GPU UUID, the energy counter of the physical
GPU, NVML's links, and what the record says.

The NVIDIA driver is faked at pynvml (``tests/fake_nvml``, ``tests/fake_gpus.py``): this suite
runs on machines without a GPU, and a 2-GPU host is what the code under test is about. The fake
answers as a driver does (handles, UUIDs, PCI bus ids, NVLink states and their far ends, P2P
status, topology levels, energy and power); everything above it is the product's. Real GPUs are
checked with ``benchmarks/gpu_agents.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlms import hardware
from mlms.errors import HardwareNotFound, InvalidArgument
from mlms.evaluation.device_lock import exclusive_device, free_gpus, is_held
from mlms.evaluation.record import EvaluationRecord
from mlms.evaluation.summary import EvaluationSummary, gpu_label
from mlms.hardware import GpuInfo, GpuLink, HardwareInfo
from mlms.protos.mlms.v2 import evaluation_pb2, fleet_pb2
from mlms.registry.base import AgentRecord
from mlms.rpc.convert import from_proto, to_proto
from tests.evaluation_copies import real_record
from tests.fake_gpus import child_env, fake_host, load_fake

H100 = "NVIDIA H100 80GB HBM3"
UUIDS = [f"GPU-7a3c1e52-90b4-4c1d-8e2f-00000000000{i}" for i in range(2)]


@pytest.fixture
def host(monkeypatch) -> HardwareInfo:
    """Two H100s joined by NV18, as the fake driver tells them; CUDA sees both."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake_host(monkeypatch)


def _gpu(index: int, name: str = H100, uuid: str | None = None) -> GpuInfo:
    return GpuInfo(
        index=index,
        name=name,
        alias=hardware.alias_of(name),
        memory_bytes=80 << 30,
        compute_capability="9.0",
        driver="550",
        uuid=uuid or f"GPU-{index:08d}-0000-0000-0000-000000000000",
    )


def _info(*gpus: GpuInfo) -> HardwareInfo:
    return HardwareInfo(
        host="gpuhost",
        cpu_brand="EPYC",
        cpu_cores_logical=8,
        cpu_cores_physical=4,
        memory_bytes=1 << 34,
        machine="x86_64",
        gpus=list(gpus),
    )


# -- detection ------------------------------------------------------------------------------------


def test_detection_names_each_gpu_and_their_nvlink(host: HardwareInfo) -> None:
    assert [(g.index, g.name, g.alias, g.uuid) for g in host.gpus] == [
        (0, H100, "h100", UUIDS[0]),
        (1, H100, "h100", UUIDS[1]),
    ]
    assert [g.pci_bus_id for g in host.gpus] == ["00000000:1B:00.0", "00000000:43:00.0"]
    assert host.links == [GpuLink(gpus=[0, 1], kind="nvlink", nvlinks=18)]
    assert host.link(1, 0).label == "NV18"


def test_gpus_behind_nvswitches_are_nvlinked_pairwise(monkeypatch, tmp_path) -> None:
    """An HGX board: every NVLink goes to an NVSwitch (no GPU at the far end), and every pair
    of GPUs is NV<links> apart, as nvidia-smi topo -m shows."""
    gpus = [
        {"name": H100, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"}
        for i in range(3)
    ]
    info = fake_host(
        monkeypatch, {"gpus": gpus, "switch_links": {"0": 18, "1": 18, "2": 18}}, tmp_path
    )
    assert [(link.gpus, link.label) for link in info.links] == [
        ([0, 1], "NV18"),
        ([0, 2], "NV18"),
        ([1, 2], "NV18"),
    ]


def test_pcie_only_gpus_get_their_topology_level(monkeypatch, tmp_path) -> None:
    gpus = [
        {"name": "NVIDIA L4", "uuid": f"GPU-{i}", "pci_bus_id": f"0:{i + 1}:0.0"} for i in range(3)
    ]
    topology = {"0,1": 10, "0,2": 50, "1,2": 40}
    info = fake_host(monkeypatch, {"gpus": gpus, "topology": topology}, tmp_path)
    assert [(link.gpus, link.kind) for link in info.links] == [
        ([0, 1], "PIX"),
        ([0, 2], "SYS"),
        ([1, 2], "NODE"),
    ]


def test_a_driver_without_the_link_and_uuid_queries_gives_no_link(monkeypatch, tmp_path) -> None:
    """An old pynvml lacks the NVLink and P2P functions and the driver does not support the
    UUID or topology queries: the GPUs are still found, without UUIDs or links."""
    host = {
        "gpus": [{"name": H100, "uuid": "GPU-a", "pci_bus_id": "0:1:0.0"},
                 {"name": H100, "uuid": "GPU-b", "pci_bus_id": "0:2:0.0"}],
        "nvlinks": [[0, 1, 18]],
        "missing": ["nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo",
                    "nvmlDeviceGetP2PStatus", "nvmlDeviceGetPciInfo"],
        "unsupported": ["nvmlDeviceGetUUID", "nvmlDeviceGetTopologyCommonAncestor"],
    }  # fmt: skip
    info = fake_host(monkeypatch, host, tmp_path)
    assert [(g.index, g.uuid, g.pci_bus_id) for g in info.gpus] == [(0, "", ""), (1, "", "")]
    assert info.links == []


def test_p2p_alone_marks_nvlink_where_links_cannot_be_counted(monkeypatch, tmp_path) -> None:
    host = {
        "gpus": [{"name": H100, "uuid": "GPU-a", "pci_bus_id": "0:1:0.0"},
                 {"name": H100, "uuid": "GPU-b", "pci_bus_id": "0:2:0.0"}],
        "nvlinks": [[0, 1, 4]],
        "unsupported": ["nvmlDeviceGetNvLinkRemotePciInfo"],
    }  # fmt: skip
    info = fake_host(monkeypatch, host, tmp_path)
    assert info.links == [GpuLink(gpus=[0, 1], kind="nvlink", nvlinks=0)]
    assert info.links[0].label == "NVLink"


# -- --hw -----------------------------------------------------------------------------------------


def test_an_alias_takes_a_free_gpu_of_its_kind(host: HardwareInfo) -> None:
    assert hardware.resolve("h100", host) == "cuda:0"
    busy = {0}
    assert hardware.resolve("h100", host, free=lambda g: g.index not in busy) == "cuda:1"
    busy = {0, 1}  # none free: the first, where the caller queues
    assert hardware.resolve("h100", host, free=lambda g: g.index not in busy) == "cuda:0"
    assert hardware.resolve("gpu", host) == "cuda:0"
    assert hardware.resolve("cpu", host) == "cpu"


def test_an_index_names_one_gpu(host: HardwareInfo) -> None:
    assert hardware.resolve("h100:1", host) == "cuda:1"
    assert hardware.resolve("H100 : 0", host) == "cuda:0"
    assert hardware.resolve("gpu:1", host) == "cuda:1"
    # Busy or not: the GPU asked for.
    assert hardware.resolve("h100:1", host, free=lambda g: False) == "cuda:1"


@pytest.mark.parametrize(
    ("hw", "error", "message"),
    [
        (
            "h100:3",
            HardwareNotFound,
            f"no GPU 3 of kind 'h100' on host {{host}}: it has 0 {H100}, 1 {H100}",
        ),
        (
            "a100:0",
            HardwareNotFound,
            f"no GPU 0 of kind 'a100' on host {{host}}: it has 0 {H100}, 1 {H100}",
        ),
        ("a100", HardwareNotFound, "no 'a100' device on this machine ({host}): it has cpu"),
        ("tpu", HardwareNotFound, "unknown hardware 'tpu'; expected cpu or a GPU alias"),
        ("h100:x", InvalidArgument, "bad hardware 'h100:x': expected cpu, a GPU alias"),
        ("cpu:0", InvalidArgument, "bad hardware 'cpu:0': cpu takes no GPU index"),
        ("h100:0,1", InvalidArgument, "--hw 'h100:0,1' names 2 GPUs; an evaluation runs on one"),
        ("h100:1,1", InvalidArgument, "--hw 'h100:1,1' names 2 GPUs"),
    ],
)
def test_a_bad_alias_or_index_is_one_line_naming_the_gpus(host, hw, error, message) -> None:
    with pytest.raises(error) as raised:
        hardware.resolve(hw, host)
    text = str(raised.value)
    assert text.startswith(message.format(host=host.host)), text
    assert "\n" not in text


def test_resolve_group_takes_count_gpus_free_ones_first(host: HardwareInfo) -> None:
    assert hardware.resolve_group("h100", 2, host) == ["cuda:0", "cuda:1"]
    assert hardware.resolve_group("h100:1,0", 2, host) == ["cuda:0", "cuda:1"]
    assert hardware.resolve_group("h100", 1, host) == [hardware.resolve("h100", host)]
    assert hardware.resolve_group("h100:1", 1, host) == ["cuda:1"]
    assert hardware.resolve_group("cpu", 2, host) == ["cpu", "cpu"]
    four = _info(*(_gpu(i) for i in range(4)))
    busy = {0, 2}
    assert hardware.resolve_group("h100", 2, four, free=lambda g: g.index not in busy) == [
        "cuda:1",
        "cuda:3",
    ]


def test_resolve_group_on_too_few_gpus_is_one_line(host: HardwareInfo) -> None:
    with pytest.raises(HardwareNotFound) as raised:
        hardware.resolve_group("h100", 4, host)
    assert str(raised.value) == (
        f"--tensor-parallel 4 needs 4 h100 GPUs; host {host.host} has 2: 0 {H100}, 1 {H100}"
    )
    with pytest.raises(HardwareNotFound, match=r"needs 2 a100 GPUs; host \S+ has 0: none \(its"):
        hardware.resolve_group("a100", 2, host)
    with pytest.raises(InvalidArgument, match="names 1 GPU; --tensor-parallel 2 needs 2"):
        hardware.resolve_group("h100:0", 2, host)
    with pytest.raises(HardwareNotFound, match="no GPU 7 of kind 'h100'"):
        hardware.resolve_group("h100:0,7", 2, host)


# -- CUDA's numbering ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "seen"),
    [
        (None, [0, 1]),
        ("1", [1]),
        ("1,0", [1, 0]),
        (UUIDS[1], [1]),
        (f"{UUIDS[1]},{UUIDS[0]}", [1, 0]),
        ("GPU-7a3c1e52", []),  # a prefix of both UUIDs names neither
        (UUIDS[1][:-1] + "1", [1]),
        ("0,-1,1", [0]),  # CUDA ignores what follows an entry naming no GPU
        ("0,0", [0]),
        ("", []),
        ("MIG-4f2a", []),
    ],
)
def test_cuda_visible_devices_maps_cuda_ordinals_to_gpus(host, visible, seen) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert [g.index for g in hardware.visible_gpus(host, env)] == seen


def test_a_pinned_process_numbers_its_gpu_cuda_0(host: HardwareInfo, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    assert hardware.resolve("h100", host) == "cuda:0"
    assert hardware.resolve("h100:1", host) == "cuda:0"
    assert [g.uuid for g in hardware.gpus_of(["cuda:0", "cpu"], host)] == [UUIDS[1]]
    with pytest.raises(HardwareNotFound) as raised:
        hardware.resolve("h100:0", host)
    assert str(raised.value) == (
        f"GPU 0 {H100} of host {host.host} is not visible to this process "
        f"(CUDA_VISIBLE_DEVICES='{UUIDS[1]}'): it sees 1 {H100}"
    )
    with pytest.raises(HardwareNotFound, match=r"this process sees 1 of host .* 2 h100 GPUs"):
        hardware.resolve_group("h100", 2, host)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert hardware.resolve("h100:0", host) == "cuda:1"
    assert [g.index for g in hardware.gpus_of(["cuda:1", "cuda:0"], host)] == [0, 1]


def test_device_keys_name_the_physical_gpu(host: HardwareInfo, monkeypatch) -> None:
    assert hardware.device_key("cuda:1", host) == f"gpu-{UUIDS[1]}"
    assert hardware.device_key("cpu", host) == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    assert hardware.device_key("cuda:0", host) == f"gpu-{UUIDS[1]}"
    assert hardware.device_key("cuda:3", host) == "cuda_3"  # NVML knows no such GPU


_HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from mlms.evaluation.device_lock import exclusive_device
    folder, device, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    hold = float(sys.argv[4])
    with exclusive_device(folder, device) as waited:
        # Renamed into place: the test never reads the file half written.
        written = ready.with_suffix(".part")
        written.write_text(f"{waited:.3f}")
        written.replace(ready)
        time.sleep(hold)
    """
)


def _hold(folder: Path, device: str, ready: Path, hold: float, visible: str | None):
    env = child_env(**({"CUDA_VISIBLE_DEVICES": visible} if visible is not None else {}))
    return subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(folder), device, str(ready), str(hold)], env=env
    )


def _wait_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    return path.read_text()


def test_two_processes_pinned_differently_take_turns_on_one_gpu(host, tmp_path) -> None:
    """One process sees GPU 1 as cuda:0 (pinned by UUID), the other as cuda:1 (every GPU
    visible): they still queue on one lock, and a process on GPU 0 does not wait for them."""
    locks = tmp_path / "locks"
    first = _hold(locks, "cuda:0", tmp_path / "first", 1.5, visible=UUIDS[1])
    try:
        _wait_file(tmp_path / "first")
        assert is_held(locks, f"gpu-{UUIDS[1]}") and not is_held(locks, f"gpu-{UUIDS[0]}")
        # What --hw h100 takes meanwhile: the free GPU 0.
        assert hardware.resolve("h100", host, free=free_gpus(locks)) == "cuda:0"
        other = _hold(locks, "cuda:0", tmp_path / "other", 0, visible="0")
        second = _hold(locks, "cuda:1", tmp_path / "second", 0, visible=None)
        assert float(_wait_file(tmp_path / "other")) < 1.0
        assert float(_wait_file(tmp_path / "second")) > 0.5  # queued behind the first
        for process in (other, second):
            assert process.wait(60) == 0
    finally:
        first.kill()
        first.wait()
    assert first.returncode is not None


def test_the_cpu_lock_keeps_its_name(tmp_path) -> None:
    with exclusive_device(tmp_path, "cpu"):
        assert is_held(tmp_path, "cpu")
        assert (tmp_path / "cpu.lock").exists()
    assert not is_held(tmp_path, "cpu")


def test_the_energy_counter_reads_the_pinned_gpu(monkeypatch, tmp_path) -> None:
    """cuda:0 of a process pinned to GPU 1 is GPU 1's counter, in this process and in the
    power sampler's child (which gets the same fake driver)."""
    from mlms.evaluation.counters import open_counter
    from mlms.evaluation.power_sampler import PowerSampler

    load_fake(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    monkeypatch.delenv("FAKE_NVML_WATTS", raising=False)
    counter = open_counter("cuda:0", tmp_path)
    try:
        assert counter.joules() == 2000.0  # GPU 1's: 2,000,000 mJ; GPU 0's is 1,000,000
        assert counter.watts() == 71.0
    finally:
        counter.close()
    sampler = PowerSampler("cuda:0", tmp_path, hz=200)
    try:
        sampler.start()
        time.sleep(0.1)
        samples = sampler.stop()
    finally:
        sampler.close()
    assert samples.count >= 1 and samples.peak == 71.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    counter = open_counter("cuda:0", tmp_path)
    assert counter.joules() == 1000.0
    counter.close()


# -- what the record and the agent record say -----------------------------------------------------


def _record(hw: str, device: str, gpus: list[GpuInfo], info: HardwareInfo) -> EvaluationRecord:
    real = real_record()
    return real.model_copy(
        update={
            "request": real.request.model_copy(update={"hw": hw}),
            "hardware": info,
            "device": device,
            "gpus": gpus,
        }
    )


def test_the_record_names_the_gpu_it_ran_on(host: HardwareInfo, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    record = _record("h100:1", "cuda:0", hardware.gpus_of(["cuda:0"], host), host)
    assert gpu_label(record) == f"GPU 1 {H100}"
    summary = EvaluationSummary.of(record)
    assert (summary.hw, summary.hardware_label) == ("h100", f"h100 GPU 1 {H100}")
    # Through the wire and back, links and all.
    back = from_proto(to_proto(record, evaluation_pb2.EvaluationRecord), EvaluationRecord, "r")
    assert back.gpus == record.gpus and back.hardware.links == host.links
    two = _record("h100", "cuda:0", host.gpus, host)
    assert gpu_label(two) == f"GPUs 0,1 {H100}"


def test_a_record_from_before_the_gpu_fields_still_loads(host: HardwareInfo) -> None:
    data = _record("h100", "cuda:1", [], host).model_dump(mode="json")
    del data["gpus"], data["hardware"]["links"]
    for gpu in data["hardware"]["gpus"]:
        del gpu["uuid"], gpu["pci_bus_id"]
    old = EvaluationRecord.model_validate(data)
    assert old.gpus == [] and old.hardware.links == []
    assert gpu_label(old) == f"GPU 1 {H100}"  # cuda:N was NVML's N then


def test_the_agent_record_carries_its_gpus_over_the_wire(host: HardwareInfo) -> None:
    def agent(gpus: list[int] | None) -> AgentRecord:
        return AgentRecord(
            id="a",
            address="h:1",
            framework="torch",
            framework_version="2.5",
            hardware=host,
            started_at=datetime.now(UTC),
            gpus=gpus,
        )

    for gpus in ([1], [], None):
        back = from_proto(to_proto(agent(gpus), fleet_pb2.AgentRecord), AgentRecord, "agent")
        assert back.gpus == gpus
    assert [g.uuid for g in agent([1]).usable_gpus()] == [UUIDS[1]]
    assert len(agent(None).usable_gpus()) == 2  # an agent from before the field: every GPU
    assert agent([]).usable_gpus() == []
