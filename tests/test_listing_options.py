"""Evaluations that differ only in what ran (precision, compile mode, input options) look
different in every listing: the CLI's ``mlms evals`` and the UI's evaluation list."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mlms.client import EmbeddedClient, Evaluations
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
from mlms.evaluation.record_store import save_record
from mlms.evaluation.summary import EvaluationSummary
from mlms.store.local import LocalStore
from mlms.ui import pages
from mlms.ui.search import Filters

VARIANTS = [
    {},
    {"precision": "bf16"},
    {"compile": "default", "channels_last": True, "inputs": ["dataset"]},
]
SHOWN = ["fp32", "bf16", "fp32, compile default, channels-last, inputs dataset"]


@pytest.fixture(scope="module")
def records() -> list[EvaluationRecord]:
    """One real evaluation, stored three times with requests that differ only in options."""
    request = EvaluationRequest(model="digits_cnn", iterations=2, warmup=0, min_seconds=0)
    record = EmbeddedClient().evaluate(request)
    return [
        record.model_copy(
            update={"id": uuid.uuid4().hex, "request": request.model_copy(update=variant)}
        )
        for variant in VARIANTS
    ]


def test_request_options_name_what_differs() -> None:
    base = EvaluationRequest(model="bert_base")
    assert base.options() == "fp32"
    assert base.model_copy(update={"precision": "fp16", "seq_len": 64}).options() == (
        "fp16, seq len 64"
    )
    threads = base.model_copy(update={"intra_op_threads": 4}).options()
    assert threads == "fp32, threads 4/-"


def test_the_ui_list_shows_and_searches_the_options(records, tmp_path: Path) -> None:
    rows = [EvaluationSummary.of(r) for r in records]
    assert [row.options for row in rows] == SHOWN
    html = pages.evaluations(Evaluations(rows, total=len(rows)), Filters(), ["digits_cnn"])
    assert ">options<" in html
    for shown in SHOWN:
        assert f">{shown}<" in html
    store = LocalStore(tmp_path / "store")
    for record in records:
        save_record(store, record)
    client = EmbeddedClient(store)
    indexed = client.list_evaluations(EvaluationQuery(sort="created")).summaries
    assert sorted(row.options for row in indexed) == sorted(SHOWN)
    found = client.list_evaluations(EvaluationQuery(text="bf16")).summaries
    assert [row.options for row in found] == ["bf16"]


def test_mlms_evals_shows_the_options(records, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    for record in records:
        save_record(store, record)
    env = {**os.environ, "MLMS_HOME": str(tmp_path)}
    env.pop("MLMS_SERVER", None)
    done = subprocess.run(
        [sys.executable, "-m", "mlms", "evals"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "options" in done.stdout
    for shown in SHOWN:
        assert shown in done.stdout
