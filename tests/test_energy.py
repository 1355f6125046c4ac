"""Energy per inference: NVML's and RAPL's counters, the record, and where it is shown.

NVML and RAPL cannot run here (a CPU-only VM: no NVIDIA driver, no powercap), so they are faked
at their library boundary only: pynvml's functions return what a driver returns (a cumulative
millijoule counter, milliwatts), and RAPL is a powercap folder tree in tmp_path in the kernel's
file format. The power sampler's child process gets the same fake pynvml (tests/fake_nvml, first
on its PYTHONPATH) and reads the same powercap tree. Everything above them (the meter, the
sampler's child, the evaluation loop, the record, the CLI and the report) is the product's. The
real counters of this machine are asked too: the record carries why they cannot be read. The H100
run is the GPU run kit's gpu_halves plan (benchmarks/plans/gpu_halves.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mlms.analysis.compare import compare_frameworks
from mlms.analysis.model import ENERGY_COLUMN, energy_by_batch, energy_reasons, latency_by_batch
from mlms.cli.common_options import spans_for
from mlms.client import EmbeddedClient
from mlms.evaluation import energy
from mlms.evaluation.counters import NoCounter, RaplCounter
from mlms.evaluation.energy import energy_meter
from mlms.evaluation.power_sampler import PowerSampler, PowerSamples
from mlms.evaluation.record import EnergyResult, EvaluationRecord, EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.protos.mlms.v2 import evaluation_pb2
from mlms.report import build_report
from mlms.rpc.convert import from_proto, to_proto

RANGE_UJ = 262_143_328_850  # a real package domain's max_energy_range_uj


@pytest.fixture(autouse=True)
def fresh_idle_readings(monkeypatch) -> None:
    """Each test's fake devices are new: none takes an earlier test's idle reading."""
    monkeypatch.setattr(energy, "_IDLE", {})


def _domain(root: Path, name: str, label: str, energy_uj: int, range_uj: int = RANGE_UJ) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(f"{label}\n")
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (folder / "enabled").write_text("1\n")
    return folder


def _set(folder: Path, energy_uj: int) -> None:
    """The kernel's update of a counter: replaced whole, as a reader never sees half a number."""
    scratch = folder / "energy_uj.new"
    scratch.write_text(f"{energy_uj}\n")
    os.replace(scratch, folder / "energy_uj")


@pytest.fixture
def powercap(tmp_path: Path) -> dict[str, Path]:
    return _powercap(tmp_path / "powercap")


def _powercap(root: Path) -> dict[str, Path]:
    """Two sockets' package domains, a core subdomain, psys, and the control-type folder, as
    /sys/class/powercap lays them out on a two-socket Intel server."""
    (root / "intel-rapl").mkdir(parents=True)
    (root / "intel-rapl" / "enabled").write_text("1\n")
    return {
        "root": root,
        "package-0": _domain(root, "intel-rapl:0", "package-0", 1_000_000),
        "core": _domain(root, "intel-rapl:0:0", "core", 500_000),
        "package-1": _domain(root, "intel-rapl:1", "package-1", RANGE_UJ - 1_000_000),
        "psys": _domain(root, "intel-rapl:2", "psys", 7_000_000),
    }


def test_rapl_sums_the_packages_only_and_counts_a_wrap(powercap) -> None:
    counter = RaplCounter(powercap["root"])
    assert counter.joules() == 0
    _set(powercap["package-0"], 1_000_000 + 5_000_000)
    _set(powercap["package-1"], 2_000_000)  # wrapped: 1 J to the top, then 2 J
    _set(powercap["core"], 99_000_000)  # inside package-0 already
    _set(powercap["psys"], 99_000_000)  # the platform: overlaps the packages
    assert counter.joules() == pytest.approx(8.0)
    _set(powercap["package-1"], 2_500_000)
    assert counter.joules() == pytest.approx(8.5)


def test_rapl_without_package_domains_or_folder_says_why(tmp_path: Path) -> None:
    with pytest.raises(NoCounter, match="does not exist"):
        RaplCounter(tmp_path / "missing")
    _domain(tmp_path, "intel-rapl:0", "psys", 1)
    with pytest.raises(NoCounter, match="no RAPL package domain"):
        RaplCounter(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_rapl_says_so(powercap) -> None:
    (powercap["package-0"] / "energy_uj").chmod(0)
    with pytest.raises(NoCounter, match="not readable by this user"):
        RaplCounter(powercap["root"])


def test_a_meter_on_rapl_gives_joules_per_inference(powercap) -> None:
    with energy_meter("cpu", powercap["root"]) as meter:
        assert meter.reason is None
        with meter.measure() as run:
            _set(powercap["package-0"], 1_000_000 + 3_000_000)
            _set(powercap["package-1"], RANGE_UJ - 1_000_000 + 1_000_000)
        result = run.result(inferences=8)
    assert result.source == "rapl" and result.reason is None
    assert result.joules == pytest.approx(4.0)
    assert result.joules_per_inference == pytest.approx(0.5)
    assert result.inferences_per_joule == pytest.approx(2.0)
    assert result.average_watts == pytest.approx(4.0 / result.seconds)


def test_a_counter_that_does_not_advance_is_a_reason_not_a_zero(powercap) -> None:
    with energy_meter("cpu", powercap["root"]) as meter, meter.measure() as run:
        pass
    result = run.result(inferences=1)
    assert result.joules is None and result.joules_per_inference is None
    assert "did not advance" in (result.reason or "")


class FakeGpu:
    """What NVML's functions return for one GPU drawing ``watts``: the total energy counter
    (mJ, integrated over time, updated every ``period`` seconds as the driver does; 0: always)
    and the power reading (mW), which the sampler's child reads from ``power_file``."""

    def __init__(self, watts: float, power_file: Path) -> None:
        self.shutdowns = 0
        self.period = 0.0
        self._power_file = power_file
        self._mj = 10_000_000.0
        self._at = time.perf_counter()
        self._shown = (self._at, self._mj)  # the counter's last update
        self.draw(watts)

    def energy_mj(self, handle: object) -> int:
        now = time.perf_counter()
        self._mj += self.watts * (now - self._at) * 1e3
        self._at = now
        if now - self._shown[0] >= self.period:
            self._shown = (now, self._mj)
        return int(self._shown[1])

    def draw(self, watts: float) -> None:
        if hasattr(self, "watts"):
            self.energy_mj(None)  # the energy so far at the old power
        self.watts = watts
        scratch = self._power_file.with_suffix(".new")
        scratch.write_text(f"{watts}\n")
        os.replace(scratch, self._power_file)

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def gpu(monkeypatch, tmp_path: Path) -> FakeGpu:
    import pynvml

    fake = FakeGpu(watts=60.0, power_file=tmp_path / "watts")
    monkeypatch.setenv("FAKE_NVML_WATTS", str(tmp_path / "watts"))
    fakes = Path(__file__).parent / "fake_nvml"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fakes), *sys.path]))
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", fake.shutdown)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: f"gpu{index}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", fake.energy_mj)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda handle: int(fake.watts * 1e3))
    return fake


def test_nvml_meter_measures_idle_then_the_run(gpu: FakeGpu) -> None:
    with energy_meter("cuda:0") as meter:
        assert meter.source == "nvml"
        assert meter.idle_watts == pytest.approx(60.0, rel=0.02)
        with meter.measure() as run:
            gpu.draw(400.0)
            deadline = time.perf_counter() + 0.3  # the "inference": 0.3 s at 400 W
            while time.perf_counter() < deadline:
                time.sleep(0.01)
        gpu.draw(60.0)
    result = run.result(inferences=30)
    assert result.source == "nvml"
    assert result.average_watts == pytest.approx(400.0, rel=0.02)
    assert result.joules == pytest.approx(400.0 * result.seconds, rel=0.02)
    assert result.joules_per_inference == pytest.approx(result.joules / 30)
    assert result.peak_watts == 400.0 and result.power_samples >= 1
    assert result.idle_watts == meter.idle_watts
    assert gpu.shutdowns == 1  # NVML's init and shutdown balance (the parent's)
    # The sampler's child read the clock too (the fake driver's: its highest, held for nothing)
    assert meter.max_sm_mhz == 1980 and run.samples.sm_mhz_mean == 1980
    assert run.samples.limits == 0


def test_the_next_evaluations_take_the_idle_reading_for_a_minute(gpu: FakeGpu, monkeypatch):
    """A sweep's evaluations follow each other: the first meter's idle window serves the next
    ones on the device without a wait of their own, until the reading is older than
    ``IDLE_REUSE_SECONDS``; another device measures its own."""
    with energy_meter("cuda:0") as first:
        assert first.idle_watts == pytest.approx(60.0, rel=0.02)
    gpu.draw(90.0)  # still settling from the evaluation before
    began = time.perf_counter()
    with energy_meter("cuda:0") as second:
        assert time.perf_counter() - began < energy.IDLE_SECONDS
    assert second.idle_watts == first.idle_watts
    assert second.counter_period_s == first.counter_period_s
    with energy_meter("cuda:1") as other:
        assert other.idle_watts == pytest.approx(90.0, rel=0.02)
    monkeypatch.setattr(energy, "IDLE_REUSE_SECONDS", 0.0)
    with energy_meter("cuda:0") as later:
        assert later.idle_watts == pytest.approx(90.0, rel=0.02)


def test_a_window_that_read_nothing_is_not_kept(gpu: FakeGpu, monkeypatch) -> None:
    """A counter coarser than the window and no power samples: no idle power, and the next
    meter tries its own window."""
    gpu.period = 10.0
    monkeypatch.setattr(energy.EnergyMeter, "_sample", lambda self, step: None)
    with energy_meter("cuda:0") as meter:
        assert meter.idle_watts is None
    assert energy._IDLE == {}


def test_the_counters_period_and_the_joules_uncertainty(gpu: FakeGpu) -> None:
    """A counter updated every 50 ms: the meter finds the period, and the joules it reports
    are within the uncertainty it states of the energy drawn."""
    gpu.period = 0.05
    with energy_meter("cuda:0") as meter:
        assert meter.counter_period_s == pytest.approx(0.05, rel=0.1)
        gpu.draw(300.0)
        with meter.measure() as run:
            began = time.perf_counter()
            time.sleep(0.4)
            drawn = 300.0 * (time.perf_counter() - began)
    result = run.result(inferences=4)
    assert result.counter_period_s == meter.counter_period_s
    assert result.joules_uncertainty == pytest.approx(2 * meter.counter_period_s / result.seconds)
    assert abs(result.joules - drawn) <= result.joules_uncertainty * result.joules


def test_the_measured_process_runs_no_sampler_thread(gpu: FakeGpu) -> None:
    """Power is sampled in a child process: the measured loop shares the GIL with nothing."""
    with energy_meter("cuda:0") as meter:
        threads = threading.enumerate()
        with meter.measure() as run:
            assert threading.enumerate() == threads
            time.sleep(0.2)
    assert run.result(inferences=1).power_samples >= 1


def test_a_sampler_child_that_dies_costs_the_peak_only(gpu: FakeGpu) -> None:
    with energy_meter("cuda:0") as meter:
        with meter.measure() as run:
            meter._sampler._child.kill()  # the child crashing mid-run
            time.sleep(0.1)
        with meter.measure() as after:
            time.sleep(0.1)
    for result in (run.result(inferences=1), after.result(inferences=1)):
        assert result.joules == pytest.approx(60.0 * result.seconds, rel=0.05)
        assert result.peak_watts is None and result.power_samples == 0


def test_a_gpu_without_an_energy_counter_says_so(gpu: FakeGpu, monkeypatch) -> None:
    import pynvml

    def unsupported(handle: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", unsupported)
    with energy_meter("cuda:1") as meter, meter.measure() as run:
        pass
    result = run.result(inferences=1)
    assert result == EnergyResult(reason=meter.reason)
    assert "no energy counter for cuda:1" in (result.reason or "")
    assert "Not Supported" in (result.reason or "")
    assert gpu.shutdowns == 1


def test_a_counter_failing_mid_run_is_a_reason_not_a_failed_evaluation(gpu, monkeypatch):
    import pynvml

    def lost(handle: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    with energy_meter("cuda:0") as meter, meter.measure() as run:
        monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", lost)
    result = run.result(inferences=1)
    assert result.source == "nvml" and result.joules is None
    assert result.reason == "reading the nvml counter failed: GPU is lost"


def test_nvml_without_a_driver_says_why() -> None:
    """This machine's real NVML (no NVIDIA driver here), or on a GPU machine its counter."""
    with energy_meter("cuda:0") as meter:
        if meter.reason is None:
            pytest.skip("this machine's NVML has an energy counter")
    assert meter.reason.startswith(("NVML did not start", "NVML has no energy counter"))


def test_switched_off_it_says_so(gpu: FakeGpu, monkeypatch) -> None:
    monkeypatch.setenv("MLMS_ENERGY", "off")
    with energy_meter("cuda:0") as meter:
        assert meter.reason == "energy collection is off (MLMS_ENERGY=off)"
    assert gpu.shutdowns == 0  # NVML was not started


def test_the_power_samplers_child_on_rapl(powercap) -> None:
    """The real child on the powercap tree: samples between start and stop, window after
    window."""
    sampler = PowerSampler("cpu", powercap["root"])  # 20 Hz
    try:
        with KernelRapl(powercap["package-0"], watts=45.0):
            time.sleep(0.1)  # its first reading after the kernel began
            for _ in range(2):
                sampler.start()
                time.sleep(0.5)
                samples = sampler.stop()
                assert samples.count >= 5
                # RAPL's watts are the counter's differences over ~50 ms; a loaded machine's
                # kernel thread updates in bursts, so a sample is only roughly the power
                assert samples.mean == pytest.approx(45.0, rel=0.5)
                assert samples.peak >= samples.mean
    finally:
        sampler.close()


def test_the_power_sampler_stops_at_once(powercap) -> None:
    sampler = PowerSampler("cpu", powercap["root"], hz=0.01)  # its first reading in 100 s
    try:
        began = time.perf_counter()
        sampler.start()
        assert sampler.stop() == PowerSamples(count=0, peak=None, mean=None)
        assert time.perf_counter() - began < 5
    finally:
        sampler.close()


def test_a_power_sampler_without_a_counter_says_why(tmp_path: Path) -> None:
    with pytest.raises(NoCounter, match="does not exist"):
        PowerSampler("cpu", tmp_path / "missing")


def test_energy_round_trips_the_wire() -> None:
    for value in (
        EnergyResult(reason="no counter"),
        EnergyResult(
            source="nvml",
            joules=12.5,
            seconds=0.1,
            joules_per_inference=0.05,
            inferences_per_joule=20.0,
            average_watts=125.0,
            peak_watts=140.0,
            idle_watts=70.0,
            power_samples=2,
            counter_period_s=0.1,
            joules_uncertainty=2.0,
        ),
    ):
        message = to_proto(value, evaluation_pb2.EnergyResult)
        assert from_proto(message, EnergyResult, "energy") == value


def _request(**fields: object) -> EvaluationRequest:
    return EvaluationRequest(
        model="digits_cnn",
        framework="onnxruntime",
        batch_sizes=[1, 4],
        iterations=5,
        warmup=1,
        min_seconds=0.2,
        **fields,
    )


def test_this_machines_record_says_why_it_has_no_energy(store) -> None:
    """The real RAPL of this machine: read where it can be, otherwise the reason, per batch
    size, never a zero."""
    with energy_meter("cpu") as meter:
        reason = meter.reason
    record = evaluate(_request(), store=store)
    for result in record.results:
        assert result.energy is not None
        if reason is None:
            assert result.energy.source == "rapl" and result.energy.joules_per_inference > 0
        else:
            assert result.energy == EnergyResult(reason=reason)
    if reason is not None:
        assert energy_reasons(record) == [f"batch size 1, 4: {reason}"]
        assert ENERGY_COLUMN not in latency_by_batch(record)


class KernelRapl:
    """The kernel's side of the fake powercap tree: package-0 drawing 45 W, its counter updated
    every millisecond by a process of its own, as the RAPL driver does, until stopped (a thread
    of the test's process waited for the GIL behind the evaluation on a loaded machine, and the
    counter it left behind read 5 W)."""

    SCRIPT = (
        "import os, sys, time\n"
        "path, watts, wrap = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])\n"
        "start, began = int(open(path).read()), time.perf_counter()\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    drawn = int(watts * (time.perf_counter() - began) * 1e6)\n"
        "    with open(path + '.new', 'w') as scratch:\n"
        "        scratch.write(f'{(start + drawn) % wrap}\\n')\n"
        "    os.replace(path + '.new', path)\n"
        "    time.sleep(0.001)\n"
    )

    def __init__(self, folder: Path, watts: float = 45.0) -> None:
        self._argv = [sys.executable, "-c", self.SCRIPT, str(folder / "energy_uj"), str(watts),
                      str(RANGE_UJ)]  # fmt: skip
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> KernelRapl:
        self._process = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        assert self._process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._process is not None
        self._process.kill()
        self._process.wait(timeout=10)


@pytest.fixture(scope="module")
def metered(store, tmp_path_factory) -> EvaluationRecord:
    """An evaluation on the CPU with the fake RAPL tree in /sys/class/powercap's place (for
    that evaluation only)."""
    powercap = _powercap(tmp_path_factory.mktemp("rapl") / "powercap")
    with pytest.MonkeyPatch.context() as patch, KernelRapl(powercap["package-0"]):
        patch.setattr(energy, "POWERCAP", powercap["root"])
        return evaluate(_request(), store=store)


def test_the_record_the_table_and_the_report_show_energy(metered: EvaluationRecord, store):
    for result in metered.results:
        measured = result.energy
        assert measured is not None and measured.source == "rapl"
        inferences = result.batch_size * result.iterations
        assert measured.joules_per_inference == pytest.approx(measured.joules / inferences)
        assert measured.average_watts == pytest.approx(45.0, rel=0.3)
        assert measured.idle_watts == pytest.approx(45.0, rel=0.3)
    table = latency_by_batch(metered)
    assert table[ENERGY_COLUMN].tolist() == [r.energy.joules_per_inference for r in metered.results]
    efficiency = energy_by_batch(metered)
    assert efficiency["batch size"].tolist() == [1, 4]
    assert (efficiency["source"] == "rapl").all()
    uncertainty = [100 * r.energy.joules_uncertainty for r in metered.results]
    assert efficiency["± (%)"].tolist() == pytest.approx(uncertainty)
    assert all(0 < r.energy.counter_period_s < 0.05 for r in metered.results)  # 1 ms updates
    spans = spans_for(EmbeddedClient(store), [metered])
    compared = compare_frameworks([metered], spans)
    assert compared["energy (J/inference)"].tolist() == table[ENERGY_COLUMN].tolist()
    html = build_report([metered], spans)
    assert 'id="energy-0"' in html and 'id="energy-table-0"' in html
    assert "Energy per inference and power vs batch size" in html


def test_mlms_analyze_and_eval_tables_show_the_energy_column(metered: EvaluationRecord):
    shown = subprocess.run(
        [sys.executable, "-m", "mlms", "analyze", metered.id],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    assert ENERGY_COLUMN in shown.stdout
    assert "energy vs batch size" in shown.stdout and "inferences/J" in shown.stdout
    assert "± (%)" in shown.stdout and "counter period (ms)" in shown.stdout
    from mlms.cli import render

    with render.out.capture() as captured:
        render.record_summary(metered)
    assert ENERGY_COLUMN in captured.get()


def test_mlms_eval_names_why_energy_is_missing() -> None:
    with energy_meter("cpu") as meter:
        if meter.reason is None:
            pytest.skip("this machine's RAPL is readable")
    command = ["eval", "--model", "digits_cnn", "-f", "onnxruntime", "-n", "3"]
    shown = subprocess.run(
        [sys.executable, "-m", "mlms", *command, "--min-seconds", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"energy not measured for batch size 1: {meter.reason}" in " ".join(shown.stderr.split())
    assert ENERGY_COLUMN not in shown.stdout


def test_a_sweep_cell_keeps_the_energy(metered: EvaluationRecord) -> None:
    from mlms.cli.sweep import summary
    from mlms.evaluation.sweep import SweepCell, SweepSpec, SweepState

    cell = SweepCell(
        model="digits_cnn", framework="onnxruntime", batch_size=1, hw="cpu", evaluation_id="x"
    )
    done = cell.completed(metered)
    assert done.joules_per_inference == metered.results[0].energy.joules_per_inference
    spec = SweepSpec(models=["digits_cnn"], frameworks=["onnxruntime"], batch_sizes=[1], hw=["cpu"])
    state = SweepState(id="s", created_at=metered.created_at, spec=spec, cells=[done])
    from rich.console import Console

    console = Console(width=200)
    with console.capture() as captured:
        console.print(summary(state))
    assert "J/inference" in captured.get()
    assert f"{done.joules_per_inference:.4g}" in captured.get()


def test_the_record_json_carries_the_energy(metered: EvaluationRecord) -> None:
    stored = json.loads(metered.model_dump_json())
    assert stored["results"][0]["energy"]["source"] == "rapl"


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    from tests.test_report import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the report is not opened in a browser")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def test_the_energy_figure_draws_in_chromium(chromium, metered, store, tmp_path: Path) -> None:
    """The report's energy plot and table in a real browser: what is drawn is the record's."""
    from tests.test_report import _assert_clean, _open

    path = tmp_path / "energy.html"
    path.write_text(build_report([metered], spans_for(EmbeddedClient(store), [metered])))
    opened = _open(chromium, path)
    plots = _assert_clean(opened)
    assert "energy-0" in plots
    drawn = opened.trace("energy-0", 0)
    joules = [r.energy.joules_per_inference for r in metered.results]
    assert drawn["x"] == [1, 4] and drawn["y"] == pytest.approx(joules)
    assert opened.column("energy-table-0", "J/inference") == pytest.approx(joules, rel=1e-3)
    opened.page.close()
