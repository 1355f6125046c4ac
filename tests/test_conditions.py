"""Run conditions: the GPU's SM clock and the reasons it was held down, sampled with the power;
the host's CPU steal; the record, the wire and where they are shown.

NVML cannot run here (a CPU-only VM: no NVIDIA driver), so the power sampler's child gets
tests/fake_nvml's pynvml first on its PYTHONPATH, which answers as a driver does (the clock and
its reasons from a file the test rewrites). The steal is this machine's own /proc/stat, or a
file in its format where a test needs a given share. Everything above them is the product's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pynvml
import pytest

from mlms.analysis.model import conditions_by_batch
from mlms.cli import render
from mlms.cli.common_options import spans_for
from mlms.client import EmbeddedClient
from mlms.evaluation.conditions import cpu_times, host_steal, run_conditions, unsteady
from mlms.evaluation.counters import CLOCK_LIMITS, limit_names
from mlms.evaluation.power_sampler import PowerSampler, PowerSamples
from mlms.evaluation.record import EvaluationRecord, RunConditions
from mlms.evaluation.runner import evaluate
from mlms.protos.mlms.v2 import evaluation_pb2
from mlms.report import build_report
from mlms.rpc.convert import from_proto, to_proto
from tests.processes import run_mlms
from tests.test_energy import _request

FAKE_NVML = Path(__file__).parent / "fake_nvml"


def test_the_limits_are_nvmls_bits() -> None:
    for bit, name in CLOCK_LIMITS.items():
        camel = "".join(word.capitalize() for word in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit, name
    assert limit_names(0x1 | 0x4 | 0x1000) == ["gpu_idle", "sw_power_cap", "bit_0x1000"]
    assert limit_names(0) == []


@pytest.fixture
def clocks(monkeypatch, tmp_path: Path) -> Path:
    """The fake driver's SM clock and reasons, in a file the test rewrites ("MHz reasons")."""
    path = tmp_path / "clocks"
    path.write_text("1410 4\n")
    monkeypatch.setenv("FAKE_NVML_CLOCKS", str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_NVML), *sys.path]))
    return path


def _set(path: Path, text: str) -> None:
    scratch = path.with_suffix(".new")
    scratch.write_text(text)
    os.replace(scratch, path)


def test_the_sampler_reads_the_clock_beside_the_power(clocks: Path, tmp_path: Path) -> None:
    sampler = PowerSampler("cuda:0", tmp_path / "no-powercap", hz=50)
    try:
        assert sampler.max_sm_mhz == 1980
        sampler.start()
        time.sleep(0.3)
        _set(clocks, "1200 8\n")  # held further, by a hardware slowdown too
        time.sleep(0.3)
        samples = sampler.stop()
    finally:
        sampler.close()
    assert samples.count >= 5
    assert samples.sm_mhz_min == 1200
    assert 1200 < samples.sm_mhz_mean < 1410
    assert limit_names(samples.limits) == ["sw_power_cap", "hw_slowdown"]
    conditions = run_conditions(samples, sampler.max_sm_mhz, steal=0.01)
    assert conditions == RunConditions(
        sm_clock_mhz=samples.sm_mhz_mean,
        sm_clock_min_mhz=1200,
        sm_clock_max_mhz=1980,
        clock_limits=["sw_power_cap", "hw_slowdown"],
        cpu_steal=0.01,
    )


def test_a_driver_without_the_clocks_reasons_still_gives_the_power(clocks, monkeypatch, tmp_path):
    host = {
        "gpus": [{"name": "NVIDIA A10", "uuid": "GPU-0", "pci_bus_id": "00000000:1B:00.0",
                  "energy_mj": 1000, "watts": 55.0}],
        "unsupported": ["nvmlDeviceGetCurrentClocksEventReasons"],
    }  # fmt: skip
    (tmp_path / "host.json").write_text(json.dumps(host))
    monkeypatch.setenv("FAKE_NVML_HOST", str(tmp_path / "host.json"))
    sampler = PowerSampler("cuda:0", tmp_path / "no-powercap", hz=50)
    try:
        sampler.start()
        time.sleep(0.3)
        samples = sampler.stop()
    finally:
        sampler.close()
    assert samples.count >= 5 and samples.peak == 55.0
    assert samples.sm_mhz_mean is None and samples.limits == 0
    assert run_conditions(samples, sampler.max_sm_mhz, steal=None) is None


def test_a_cpu_has_no_clock_and_nothing_read_is_no_conditions() -> None:
    watts_only = PowerSamples(count=3, peak=50.0, mean=45.0)
    assert run_conditions(watts_only, None, steal=0.02) == RunConditions(cpu_steal=0.02)
    assert run_conditions(watts_only, None, steal=None) is None
    assert run_conditions(None, None, steal=None) is None


def _stat(path: Path, steal: int, busy: int) -> None:
    """A /proc/stat whose first line has ``steal`` and ``busy`` ticks beside 800 idle ones."""
    _set(path, f"cpu  {busy} 0 0 800 0 0 0 {steal} 7 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")


def test_the_steal_over_a_block(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, steal=35, busy=165)
    assert cpu_times(stat).steal == 35 and cpu_times(stat).total == 1000  # guest not counted
    with host_steal(stat) as steal:
        _stat(stat, steal=55, busy=345)  # 200 ticks more, 20 of them stolen
    assert steal.share == pytest.approx(0.1)
    with host_steal(stat) as still:
        pass  # no tick passed: no share
    assert still.share is None
    assert cpu_times(tmp_path / "missing") is None
    _set(stat, "intr 1 2 3\n")
    assert cpu_times(stat) is None


def test_a_shared_machine_or_a_held_clock_is_said() -> None:
    assert unsteady(RunConditions(cpu_steal=0.01)) is None
    assert unsteady(RunConditions(sm_clock_mhz=1960, sm_clock_max_mhz=1980)) is None
    assert unsteady(RunConditions(cpu_steal=0.12)) == (
        "the hypervisor took 12% of the host's CPU time (steal) during the run: its latency "
        "may not repeat"
    )
    held = RunConditions(
        sm_clock_mhz=1410, sm_clock_max_mhz=1980, clock_limits=["gpu_idle", "sw_power_cap"]
    )
    assert unsteady(held) == (
        "the GPU's SM clock averaged 1410 of its 1980 MHz (sw_power_cap) during the run: its "
        "latency may not repeat"
    )


@pytest.fixture(scope="module")
def evaluated(store) -> EvaluationRecord:
    return evaluate(_request(), store=store)


def test_an_evaluation_here_records_its_steal_and_no_clock(evaluated: EvaluationRecord) -> None:
    for result in evaluated.results:
        conditions = result.conditions
        assert conditions is not None and 0 <= conditions.cpu_steal <= 1
        assert conditions.sm_clock_mhz is None and conditions.clock_limits == []
    table = conditions_by_batch(evaluated)
    assert table["batch size"].tolist() == [1, 4]
    steal = [100 * r.conditions.cpu_steal for r in evaluated.results]
    assert table["CPU steal (%)"].tolist() == pytest.approx(steal)


def test_the_conditions_cross_the_wire(evaluated: EvaluationRecord) -> None:
    held = RunConditions(
        sm_clock_mhz=1402.5,
        sm_clock_min_mhz=1200,
        sm_clock_max_mhz=1980,
        clock_limits=["sw_power_cap", "hw_slowdown"],
        cpu_steal=0.031,
    )
    record = evaluated.model_copy(
        update={"results": [r.model_copy(update={"conditions": held}) for r in evaluated.results]}
    )
    message = to_proto(record, evaluation_pb2.EvaluationRecord)
    assert from_proto(message, EvaluationRecord, "record") == record
    older = evaluated.model_copy(
        update={"results": [r.model_copy(update={"conditions": None}) for r in evaluated.results]}
    )
    message = to_proto(older, evaluation_pb2.EvaluationRecord)
    assert from_proto(message, EvaluationRecord, "record") == older
    assert conditions_by_batch(older).empty


def test_the_report_shows_them_and_says_when_a_run_may_not_repeat(evaluated, store) -> None:
    html = build_report([evaluated], spans_for(EmbeddedClient(store), [evaluated]))
    assert 'id="conditions-table-0"' in html and "CPU steal (%)" in html
    unsteady_here = any(unsteady(r.conditions) for r in evaluated.results)
    assert ("may not repeat" in html) == unsteady_here  # the steal of this machine's run
    held = RunConditions(sm_clock_mhz=1200, sm_clock_max_mhz=1980, clock_limits=["hw_slowdown"])
    slowed = evaluated.model_copy(
        update={"results": [r.model_copy(update={"conditions": held}) for r in evaluated.results]}
    )
    html = build_report([slowed], spans_for(EmbeddedClient(store), [slowed]))
    assert "batch size 4: the GPU&#x27;s SM clock averaged 1200 of its 1980 MHz" in html


def test_mlms_analyze_shows_them_and_eval_warns(evaluated: EvaluationRecord, mlms_home) -> None:
    shown = run_mlms(mlms_home, "analyze", evaluated.id)
    assert shown.returncode == 0, shown.stderr
    assert "run conditions (model-level run)" in shown.stdout
    assert "CPU steal (%)" in shown.stdout and "SM clock (MHz)" in shown.stdout
    stolen = RunConditions(cpu_steal=0.2)
    shared = evaluated.model_copy(
        update={"results": [r.model_copy(update={"conditions": stolen}) for r in evaluated.results]}
    )
    with render.err.capture() as captured:
        render.record_summary(shared)
    warned = captured.get()
    for batch in (1, 4):
        assert f"batch size {batch}: the hypervisor took 20% of the host's CPU time" in warned
