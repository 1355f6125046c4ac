"""MLPerf LoadGen scenarios and the concurrency sweep on the predict path, with short
durations on the small digits model: LoadGen's logs and the mlms record land in the store,
LoadGen's and mlms's clocks agree, and the sweep's stability rule."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mlms.errors import InvalidArgument
from mlms.loadgen.concurrency import STABLE_WINDOWS, SweepSettings, Window, is_stable, parse_levels
from mlms.loadgen.logs import summary_text
from mlms.loadgen.record import LoadRecord, record_key
from mlms.loadgen.run import run_loadgen, run_sweep
from mlms.loadgen.scenarios import ScenarioSettings
from mlms.loadgen.targets import EmbeddedTarget, open_target

pytest.importorskip("torch")


@pytest.fixture
def target(store) -> Iterator[EmbeddedTarget]:
    # Per test: the target holds the CPU's device lock while it is open.
    opened = EmbeddedTarget("digits_cnn", "torch", "cpu")
    yield opened
    opened.close()


def _stored(store, record: LoadRecord) -> LoadRecord:
    return LoadRecord.model_validate_json(store.get_bytes(record_key(record.id)))


def test_single_stream_logs_and_both_clocks(store, target, tmp_path: Path) -> None:
    settings = ScenarioSettings("single-stream", duration_ms=300, min_queries=100)
    record = run_loadgen(target, settings, store, tmp_path)
    assert _stored(store, record) == record
    names = {key.rsplit("/", 1)[1] for key in record.logs}
    assert {"mlperf_log_summary.txt", "mlperf_log_detail.txt"} <= names
    for key in record.logs:
        assert key.startswith(f"loadgen/{record.id}/") and store.get_bytes(key)
    assert "Scenario : SingleStream" in summary_text(tmp_path)
    assert f"Result is : {record.validity}" in summary_text(tmp_path)
    # The same queries on both clocks: LoadGen's interval holds mlms's (a little longer: its
    # calls into Python and back; on a busy machine, its threads waiting for a core).
    assert record.mlms is not None and record.mlms.samples == record.loadgen["query_count"]
    assert record.mlms.samples >= 100
    assert record.p90_ratio is not None and record.p90_ratio > 0.98
    assert record.framework == "torch" and record.where == "embedded"
    assert record.settings["single_stream_expected_latency_ns"] > 0


def test_offline_answers_every_sample_in_batches(store, target, tmp_path: Path) -> None:
    settings = ScenarioSettings(
        "offline", duration_ms=300, target_qps=2000, batch_size=8, workers=2
    )
    record = run_loadgen(target, settings, store, tmp_path)
    assert record.scenario == "offline" and record.validity in ("VALID", "INVALID")
    assert record.loadgen["samples_per_second"] > 0
    # Offline is one query of every sample: each sample has an mlms latency.
    assert record.mlms is not None and record.mlms.samples >= 600
    assert record.settings["offline_expected_qps"] == 2000


def test_an_invalid_run_says_why(store, target, tmp_path: Path) -> None:
    # An expected rate far below the real one: LoadGen makes too few samples to fill the
    # minimum duration, and says so.
    settings = ScenarioSettings("offline", duration_ms=2000, target_qps=1)
    record = run_loadgen(target, settings, store, tmp_path)
    assert record.validity == "INVALID"
    assert "the run was shorter than the minimum duration" in record.invalid_because
    assert "Result is : INVALID" in summary_text(tmp_path)


@pytest.mark.parametrize("scenario", ["multi-stream", "server"])
def test_other_scenarios_run(store, target, scenario: str, tmp_path: Path) -> None:
    settings = ScenarioSettings(scenario, duration_ms=200, min_queries=20, samples_per_query=4)
    record = run_loadgen(target, settings, store, tmp_path)
    assert record.validity in ("VALID", "INVALID") and record.loadgen["query_count"] >= 20
    samples_per_query = 4 if scenario == "multi-stream" else 1
    assert record.mlms.samples == record.loadgen["query_count"] * samples_per_query


def test_single_stream_through_a_server(store, tmp_path: Path) -> None:
    from mlms.agent.process import Agent, AgentConfig
    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model
    from mlms.config import mlms_home
    from mlms.registry.factory import registry_from_url
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    # Built here first: building it inside the first predict could outlast the call's deadline.
    AssetManager(store, mlms_home() / "cache").ensure(get_model("digits_cnn"), "torch")
    registry = registry_from_url("memory://")
    agent = Agent(AgentConfig(framework="torch"), registry=registry).start()
    server = Server(ServerConfig(), registry=registry).start()
    try:
        client = RemoteClient(f"127.0.0.1:{server.port}")
        target = open_target("digits_cnn", "torch", "cpu", client)
        try:
            settings = ScenarioSettings("single-stream", duration_ms=300, min_queries=64)
            record = run_loadgen(target, settings, store, tmp_path)
        finally:
            target.close()
    finally:
        server.stop(0)
        agent.stop(0)
        registry.close()
    assert record.where == f"server 127.0.0.1:{server.port}"
    assert agent.id in record.device  # every query went through the server to the agent
    assert record.mlms.samples == record.loadgen["query_count"] >= 64
    assert record.p90_ratio is not None and record.p90_ratio > 0.98


def test_concurrency_sweep_gives_a_curve(store, target) -> None:
    settings = SweepSettings(parse_levels("1:2"), window_s=0.2, max_windows=5)
    seen = []
    record = run_sweep(target, settings, store, on_point=seen.append)
    assert [p.concurrency for p in record.curve] == [1, 2] and seen == record.curve
    for point in record.curve:
        assert point.throughput_per_s > 0 and 0 < point.p50_ms <= point.p99_ms
        assert STABLE_WINDOWS <= point.windows <= 5
        assert point.stable or point.windows == 5  # unstable only after the most windows
    assert _stored(store, record).curve == record.curve


def test_stability_rule() -> None:
    def window(throughput: float, latency_ns: float) -> Window:
        return Window(throughput, np.full(4, latency_ns))

    steady = [window(100, 1e6), window(105, 1.05e6), window(96, 0.97e6)]
    assert is_stable(steady)
    assert not is_stable(steady[:2])  # fewer than three windows
    assert not is_stable([window(100, 1e6), window(100, 1e6), window(130, 1e6)])
    assert not is_stable([window(100, 1e6), window(100, 1e6), window(100, 1.3e6)])
    assert is_stable([window(10, 9e6), *steady])  # only the last three count


def test_levels_and_settings_are_checked() -> None:
    assert parse_levels("1:4") == (1, 2, 3, 4)
    assert parse_levels("1:16:5") == (1, 6, 11, 16)
    for bad in ("16:1", "0:4", "1", "a:b", "1:2:3:4"):
        with pytest.raises(InvalidArgument, match=bad):
            parse_levels(bad)
    with pytest.raises(InvalidArgument, match="'steady': expected one of single-stream"):
        ScenarioSettings("steady")
    with pytest.raises(InvalidArgument, match="workers 0"):
        ScenarioSettings("server", workers=0)
    with pytest.raises(InvalidArgument, match="max windows 2"):
        SweepSettings((1,), max_windows=2)


def _loadgen_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlms", "loadgen", "-m", "digits_cnn", "-f", "torch", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_cli_prints_loadgens_summary_and_the_ratio(store) -> None:
    result = _loadgen_cli("--duration", "0.3", "--min-queries", "100")
    assert result.returncode == 0, result.stderr
    assert "MLPerf Results Summary" in result.stdout and "Result is :" in result.stdout
    assert "LoadGen p90 / mlms p90 = " in result.stdout
    run_id = result.stderr.split("loadgen/")[1].split("/")[0]
    assert store.exists(record_key(run_id))
    # Where it went, on one line to copy, however long the store's path.
    where = [line for line in result.stderr.splitlines() if "loadgen/" in line]
    assert where == [f"record and LoadGen's logs: {store.url}/loadgen/{run_id}/"], result.stderr


def test_cli_sweep_as_json(store) -> None:
    result = _loadgen_cli("--concurrency", "1:2", "--window", "0.2", "--max-windows", "4", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["scenario"] == "concurrency"
    assert [p["concurrency"] for p in record["curve"]] == [1, 2]
