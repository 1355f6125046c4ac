"""``mlms advise`` end to end on a tiny model: embedded (the CLI, the record, the report) and
through a fleet (a real etcd, S3 over HTTP from moto's server, one ``mlms server`` and one
torch ``mlms agent`` on loopback), with bad requests over both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from mlms.advise.record import AdviceRecord, AdviceRequest
from mlms.client import EmbeddedClient
from mlms.protos.mlms.v2 import advice_pb2, evaluator_pb2_grpc, types_pb2
from mlms.remote_client import RemoteClient
from mlms.store.factory import store_from_url
from mlms.store.local import LocalStore
from mlms.ui.config import UiConfig
from tests.loopback_fleet import running_fleet
from tests.shared_assets import copy_asset
from tests.test_datasets import run_cli
from tests.test_ui import serving

CALL_TIMEOUT_S = 120
#: torch on the CPU at fp32 and bf16, one thread, channels-last off: two configurations.
TINY = {
    "model": "digits_cnn",
    "frameworks": ["torch"],
    "precisions": ["fp32", "bf16"],
    "compile_modes": ["none"],
    "channels_last": False,
    "threads": [1],
    "iterations": 3,
    "min_seconds": 0,
    "probe_iterations": 2,
    "probe_min_seconds": 0,
    "verify": 2,
    "budget_minutes": 60,
}


def _check_advice(record: AdviceRecord) -> None:
    """Two settings: probing them would take more evaluations than measuring both, so both are
    measured at full length, the best achieved recommended."""
    assert record.space == 2 and len(record.rows) == 2
    assert {r.config.precision for r in record.rows} == {"fp32", "bf16"}
    assert [o.source for o in record.observations] == ["verified", "verified"]
    assert (
        "the space is measured whole: its 2 setting(s) take 2 evaluation(s), probing and "
        "verifying would take at least 4" in record.evidence
    )
    for row in record.rows:
        assert row.basis == "measured" and row.achieved == row.predicted > 0
        assert row.low <= row.achieved <= row.high and row.error is None
        assert row.evaluation_id and "/16 synthetic inputs" in row.accuracy
    fp32 = next(r for r in record.rows if r.config.precision == "fp32")
    assert fp32.accuracy_holds and fp32.accuracy.startswith("top-1 agrees with fp32 on 16/16")
    assert record.baselines == {"torch": fp32.evaluation_id}
    assert record.recommendation is not None and record.recommendation.accuracy_holds
    best = min((r for r in record.rows if r.accuracy_holds), key=lambda r: r.achieved)
    assert record.recommendation == best
    assert record.median_error is None and record.coverage is None
    assert "batch sizes: the latency objective runs batch size 1" in record.left_out


def test_advise_embedded_cli_record_and_report(
    capsys: pytest.CaptureFixture[str], monkeypatch, tmp_path: Path, store
) -> None:
    """In a home of its own (the session's holds other tests' evaluations of digits_cnn, which
    advise would take as stored evidence), with the session's torch asset."""
    copy_asset(store, LocalStore(tmp_path / "store"), "digits_cnn", "torch")
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    args = ["advise", "--model", "digits_cnn", "--frameworks", "torch", "--precision",
            "fp32,bf16", "--compile", "none", "--channels-last", "off", "--threads", "1",
            "-n", "3", "--min-seconds", "0", "--probe-iterations", "2",
            "--probe-min-seconds", "0", "--verify", "2", "--budget-minutes", "60",
            "--json"]  # fmt: skip
    status, out, err = run_cli(args, capsys, monkeypatch)
    assert status == 0, err
    record = AdviceRecord.model_validate_json(out)
    _check_advice(record)
    assert record.request == AdviceRequest(**TINY)
    client = EmbeddedClient()
    assert record.id in {a.id for a in client.list_advice()}
    assert client.store.exists(f"advice/{record.id}.json")
    # The verifying evaluations are ordinary ones.
    verified = client.get_evaluation(record.recommendation.evaluation_id)
    assert verified.request.precision == record.recommendation.config.precision
    status, out, _err = run_cli(["advise", "--list"], capsys, monkeypatch)
    assert status == 0 and record.id in out
    # The advice's id stands for its verified evaluations in the report.
    page = tmp_path / "report.html"
    status, _out, err = run_cli(["report", record.id[:12], "-o", str(page)], capsys, monkeypatch)
    assert status == 0, err
    html = page.read_text()
    assert 'id="advice-table-0"' in html and f"advice {record.id[:8]}" in html
    verified = sum(r.achieved is not None for r in record.rows)
    assert f"wrote the report of {verified} evaluation(s)" in err
    # The web UI lists it and shows its configurations beside the report of the verified.
    with serving(UiConfig()) as ui:
        listing = ui.get("/advice")
        assert listing.status_code == 200 and f'href="/advice/{record.id}"' in listing.text
        shown = ui.get(f"/advice/{record.id[:10]}")
        assert shown.status_code == 200 and 'id="configurations"' in shown.text
        assert record.rows[0].config.label() in shown.text
        assert f'src="/advice/{record.id}/report"' in shown.text
        report = ui.get(f"/advice/{record.id}/report")
        assert report.status_code == 200 and 'id="advice-table-0"' in report.text
        missing = ui.get("/advice/0123456789")
        assert missing.status_code == 404
        assert "no advice with id &#x27;0123456789&#x27;" in missing.text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--objective", "speed"], "objective 'speed': expected one of latency, throughput"),
        (["--percentile", "42"], "percentile 42: expected one of 50, 90, 95, 99"),
        (["--frameworks", "caffe"], "framework 'caffe': expected some of torch"),
        (["--compile", "warp", "-f", "torch"], "compile mode warp: expected none or a mode"),
        (["--threads", "two"], "bad --threads 'two': expected counts like '1,2'"),
        (["--batch-size", "8"], "the latency objective runs batch size 1"),
    ],
)
def test_bad_advise_requests_over_the_cli(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    status, _out, err = run_cli(["advise", "--model", "digits_cnn", *args], capsys, monkeypatch)
    lines = err.splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("mlms: error:"), err
    assert fragment in lines[0]


def test_an_energy_objective_without_a_counter_fails_naming_why(
    capsys: pytest.CaptureFixture[str], monkeypatch, tmp_path: Path, store
) -> None:
    """In a home of its own: a stored evaluation with energy (another test's, read from a
    fake counter) would be taken as evidence in the session's."""
    from mlms.hardware import detect

    if detect().gpus:
        pytest.skip("a GPU here has an energy counter")
    copy_asset(store, LocalStore(tmp_path / "store"), "digits_cnn", "torch")
    monkeypatch.setenv("MLMS_HOME", str(tmp_path))
    args = ["advise", "--model", "digits_cnn", "-f", "torch", "--objective", "energy",
            "--precision", "fp32", "--compile", "none", "--channels-last", "off",
            "--threads", "1", "-b", "1", "--probe-iterations", "1",
            "--probe-min-seconds", "0"]  # fmt: skip
    status, _out, err = run_cli(args, capsys, monkeypatch)
    lines = err.splitlines()
    if status == 0:
        pytest.skip("this machine's CPU has readable RAPL counters")
    # The steps before it, then one error line.
    assert status == 1 and sum(line.startswith("mlms: error:") for line in lines) == 1, err
    assert lines[-1].startswith("mlms: error: --objective energy: cpu reports no energy here (")


# -- through a fleet -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(etcd, s3, store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("advise_fleet")
    with running_fleet(etcd, s3, root, ["torch"], ["digits_cnn"], assets_from=store) as running:
        yield running.address


def test_advise_over_grpc_runs_on_the_fleet_and_is_stored(fleet: str, s3) -> None:
    steps: list[str] = []
    with RemoteClient(fleet) as client:
        record = client.advise(AdviceRequest(**TINY), steps.append)
        listed = client.list_advice()
        verified = client.get_evaluation(record.rows[0].evaluation_id)
    _check_advice(record)
    assert "measuring 2 setting(s)" in steps, steps
    assert verified.agent["mode"] == "remote"
    assert [a.id for a in listed] == [record.id] and listed[0] == record
    stored = store_from_url(s3.url).get_bytes(f"advice/{record.id}.json")
    assert json.loads(stored)["id"] == record.id


def test_bad_advise_requests_over_grpc(fleet: str) -> None:
    def status(spec: advice_pb2.AdviceSpec) -> tuple[grpc.StatusCode, str]:
        with grpc.insecure_channel(fleet) as channel:
            stub = evaluator_pb2_grpc.EvaluatorStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Advise(advice_pb2.AdviseRequest(spec=spec), timeout=CALL_TIMEOUT_S))
        details = caught.value.details()
        assert "\n" not in details, details
        return caught.value.code(), details

    code, details = status(advice_pb2.AdviceSpec(model="digits_cnn", objective="speed"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("bad advice request: objective: ") and "'speed'" in details
    code, details = status(
        advice_pb2.AdviceSpec(model="digits_cnn", precisions=types_pb2.StringList(values=["fp8"]))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "precision fp8" in details
    code, details = status(advice_pb2.AdviceSpec(model="digits_cnn", hw="h100"))
    assert code == grpc.StatusCode.NOT_FOUND and "hardware 'h100': no live agent" in details
    code, details = status(advice_pb2.AdviceSpec(model="nope"))
    assert code == grpc.StatusCode.NOT_FOUND and "'nope'" in details
    # A path names a file on the caller's machine: the server reads none.
    code, details = status(advice_pb2.AdviceSpec(model="/etc/passwd"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "a server never reads files by path" in details
