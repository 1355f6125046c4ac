"""Every task's accuracy in the evaluation index (SQLite and a real PostgreSQL): the task and
its headline metric indexed, listed as ``mlms eval`` prints it and sorted by it whichever way
the task counts better; migration 0002 over a 0001 database holding rows; a detection and a
language model's evaluations listed with their headline by ``mlms evals``, embedded and through
a server over gRPC."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, insert, inspect, select

from mlms.database.connect import alembic_config, revision
from mlms.database.index import EvaluationIndex, needs_rebuild
from mlms.database.keeper import rebuild
from mlms.database.rows import evaluation_row, result_rows
from mlms.database.schema import evaluations, results, state
from mlms.errors import InvalidArgument
from mlms.evaluation.query import EvaluationQuery
from mlms.evaluation.record import Accuracy, EvaluationRecord
from mlms.evaluation.record_store import save_record
from mlms.evaluation.summary import EvaluationSummary
from mlms.store.local import LocalStore
from tests.evaluation_copies import copies
from tests.processes import wait_for
from tests.test_database import _all_pages, _mlms, database, index  # noqa: F401 (fixtures)

#: The columns revision 0002 adds.
ADDED = ("task", "accuracy_metric", "accuracy_value", "accuracy_order")


def _scored(record: EvaluationRecord, task: str, **metrics: float) -> EvaluationRecord:
    """``record`` with accuracy on a data set of ``task``, as a pass would give it."""
    accuracy = Accuracy(
        task=task,
        metrics=metrics,
        top1=metrics.get("top1"),
        top5=metrics.get("top5"),
        samples=500,
        dataset=f"{task}-set",
    )
    return record.model_copy(update={"status": "completed", "accuracy": accuracy})


def _every_task() -> list[EvaluationRecord]:
    base = copies(9, seed=11)
    return [
        _scored(base[0], "classification", top1=0.761, top5=0.93),
        _scored(base[1], "detection", map=0.372, map_50=0.61),
        _scored(base[2], "detection", map=0.401, map_50=0.65),
        _scored(base[3], "language_modeling", perplexity=12.4),
        _scored(base[4], "language_modeling", perplexity=9.8),
        _scored(base[5], "language_modeling", perplexity=31.0),
        _scored(base[6], "segmentation", miou=0.512, pixel_accuracy=0.9),
        _scored(base[7], "translation", bleu=27.3, chrf=55.0),
        base[8].model_copy(update={"accuracy": None}),
    ]


def test_every_task_is_listed_with_its_headline_and_sorted_by_it(
    index: EvaluationIndex,  # noqa: F811
) -> None:
    records = _every_task()
    assert index.add(records) == len(records)
    listed = {s.id: s for s in index.page(EvaluationQuery(page_size=100)).summaries}
    assert [listed[r.id].accuracy_line for r in records] == [
        "top-1 0.7610",
        "mAP@[.5:.95] 0.3720",
        "mAP@[.5:.95] 0.4010",
        "perplexity 12.4000",
        "perplexity 9.8000",
        "perplexity 31.0000",
        "mIoU 0.5120",
        "BLEU 27.3000",
        "",
    ]
    for record in records[:-1]:  # what mlms eval prints first of the accuracy
        assert record.accuracy.line().startswith(listed[record.id].accuracy_line)
    for record in records:  # the index gives what the record gives, top-1 kept for classifiers
        summary = listed[record.id]
        assert summary.model_dump(exclude={"created_at"}) == EvaluationSummary.of(
            record
        ).model_dump(exclude={"created_at"})
    assert listed[records[0].id].accuracy_top1 == 0.761
    assert listed[records[1].id].accuracy_top1 is None

    # Best first is the lowest perplexity and the highest mAP, page after page.
    lm = EvaluationQuery(task="language_modeling", sort="-accuracy", page_size=1)
    best_first = [records[4].id, records[3].id, records[5].id]
    assert _all_pages(index, lm) == best_first
    worst_first = lm.model_copy(update={"sort": "accuracy", "page_size": 2})
    assert _all_pages(index, worst_first) == best_first[::-1]
    detection = EvaluationQuery(task="detection", sort="-accuracy")
    assert _all_pages(index, detection) == [records[2].id, records[1].id]
    # Every row once over all tasks; the one without accuracy after every measured one.
    every = _all_pages(index, EvaluationQuery(sort="-accuracy", page_size=4))
    assert sorted(every) == sorted(r.id for r in records) and every[-1] == records[-1].id

    with pytest.raises(ValueError, match="task 'colour': expected one of classification, "):
        EvaluationQuery(task="colour")


def test_a_bad_task_off_the_wire_is_one_line() -> None:
    from mlms.protos.mlms.v2 import evaluation_pb2
    from mlms.rpc.convert import from_proto

    message = evaluation_pb2.EvaluationQuery(task="colour", sort="-accuracy")
    with pytest.raises(InvalidArgument) as caught:
        from_proto(message, EvaluationQuery, "evaluation query")
    assert str(caught.value) == (
        "bad evaluation query: task: task 'colour': expected one of "
        "classification, detection, segmentation, language_modeling, translation"
    )


def test_migration_0002_over_a_0001_database_holding_rows(
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A classifier's row gets its headline from its top-1; another task's row, whose metrics
    only its record holds, is indexed again from the store by the next rebuild."""
    from alembic import command

    from mlms.database.connect import create

    records = _every_task()
    classifier, detector, language_model, unmeasured = (records[i] for i in (0, 1, 3, 8))
    better = _scored(copies(1, seed=13)[0], "classification", top1=0.9, top5=0.99)
    kept = [classifier, unmeasured, better]
    older = [classifier, detector, language_model, unmeasured, better]
    engine = create(database)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        rows = [{k: v for k, v in evaluation_row(r).items() if k not in ADDED} for r in older]
        connection.execute(insert(evaluations), rows)
        connection.execute(insert(results), [row for r in older for row in result_rows(r)])
        connection.execute(
            insert(state), [{"key": "rebuilt", "value": "yes"}, {"key": "generation", "value": "g"}]
        )
    assert revision(engine) == "0001"
    assert not set(ADDED) & {c["name"] for c in inspect(engine).get_columns("evaluations")}

    opened = EvaluationIndex(database)
    assert opened.created and revision(opened.engine) == "0002"
    assert opened.present([r.id for r in older]) == {r.id for r in kept}
    with opened.engine.connect() as connection:
        dropped = results.c.evaluation_id.in_([detector.id, language_model.id])
        left = select(func.count()).select_from(results).where(dropped)
        assert connection.execute(left).scalar_one() == 0
    assert needs_rebuild(opened) and opened.generation() != "g"
    listed = {s.id: s for s in opened.page(EvaluationQuery()).summaries}
    assert (listed[classifier.id].task, listed[classifier.id].accuracy_line) == (
        "classification",
        "top-1 0.7610",
    )
    assert listed[unmeasured.id].task is None and listed[unmeasured.id].accuracy_line == ""
    best_first = EvaluationQuery(task="classification", sort="-accuracy")
    assert _all_pages(opened, best_first) == [better.id, classifier.id]
    assert _all_pages(opened, EvaluationQuery(sort="-accuracy"))[-1] == unmeasured.id

    store = LocalStore(tmp_path / "store")
    for record in older:
        save_record(store, record)
    done = rebuild(store, opened)
    assert (done.stored, done.indexed) == (5, 2) and not needs_rebuild(opened)
    listed = {s.id: s for s in opened.page(EvaluationQuery()).summaries}
    assert [listed[r.id].accuracy_line for r in older] == [
        "top-1 0.7610",
        "mAP@[.5:.95] 0.3720",
        "perplexity 12.4000",
        "",
        "top-1 0.9000",
    ]

    # Down to 0001 drops the columns; up again fills them once more.
    with opened.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")
    assert not set(ADDED) & {c["name"] for c in inspect(opened.engine).get_columns("evaluations")}
    opened.close()
    again = EvaluationIndex(database)
    assert again.created and again.present([classifier.id]) == {classifier.id}
    again.close()
    engine.dispose()


def test_evals_shows_a_detector_and_a_language_model_by_their_headline(tmp_path: Path) -> None:
    """``mlms evals`` embedded and through a server (gRPC), and the summaries over the wire."""
    from mlms.remote_client import RemoteClient
    from mlms.server.process import Server, ServerConfig

    records = _every_task()
    store = LocalStore(tmp_path / "store")
    for record in records:
        save_record(store, record)
    detector, language_model = records[1], records[3]

    embedded = _mlms(tmp_path, "evals", "--task", "detection")
    assert embedded.returncode == 0, embedded.stderr
    assert "accuracy" in embedded.stdout and "mAP@[.5:.95] 0.3720" in embedded.stdout
    assert "perplexity" not in embedded.stdout and "evaluations (2," in embedded.stdout

    config = ServerConfig(
        store=str(tmp_path / "store"), database=f"sqlite:///{tmp_path / 'server.db'}", grace=0
    )
    server = Server(config).start()
    client = RemoteClient(f"127.0.0.1:{server.port}")
    try:
        wait_for(lambda: client.list_evaluations().total == len(records), 30, "the index")
        wire = {s.id: s for s in client.list_evaluations(EvaluationQuery(page_size=100)).summaries}
        assert wire[detector.id] == EvaluationSummary.of(detector).model_copy(
            update={"created_at": wire[detector.id].created_at}
        )
        assert (wire[language_model.id].task, wire[language_model.id].accuracy_metric,
                wire[language_model.id].accuracy_value) == ("language_modeling", "perplexity",
                                                            12.4)  # fmt: skip
        best = client.list_evaluations(EvaluationQuery(task="language_modeling", sort="-accuracy"))
        assert [s.accuracy_value for s in best.summaries] == [9.8, 12.4, 31.0]

        remote = _mlms(tmp_path, "evals", "--server", f"127.0.0.1:{server.port}", "--sort",
                       "-accuracy", "--task", "language_modeling")  # fmt: skip
        assert remote.returncode == 0, remote.stderr
        shown = [line for line in remote.stdout.splitlines() if "perplexity" in line]
        assert [line.split("perplexity ")[1].split()[0] for line in shown] == [
            "9.8000",
            "12.4000",
            "31.0000",
        ]
        bad = _mlms(tmp_path, "evals", "--server", f"127.0.0.1:{server.port}", "--sort",
                    "-accuracy", "--task", "colour")  # fmt: skip
        assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "'colour'" in bad.stderr and "language_modeling" in bad.stderr
    finally:
        client.close()
        server.stop(0)


def test_the_ui_list_shows_and_filters_the_headline() -> None:
    from mlms.client import Evaluations
    from mlms.ui import pages
    from mlms.ui.search import Filters

    rows = [EvaluationSummary.of(r) for r in _every_task()]
    html = pages.evaluations(Evaluations(rows, total=len(rows)), Filters(), [])
    assert ">accuracy<" in html
    for shown in ("top-1 0.7610", "mAP@[.5:.95] 0.3720", "perplexity 12.4000", "BLEU 27.3000"):
        assert f">{shown}<" in html
    chosen = Filters.parse({"task": "detection", "sort": "-accuracy"})
    assert '<option value="detection" selected>' in pages.evaluations(
        Evaluations([], total=0), chosen, []
    )
    query = chosen.query(50)
    assert (query.task, query.sort) == ("detection", "-accuracy")
    assert chosen.parameters() == {"task": "detection", "sort": "-accuracy"}
    with pytest.raises(InvalidArgument, match=r"^bad search: task: task 'colour': expected one"):
        Filters.parse({"task": "colour"}).query(50)


def test_a_summary_from_a_server_that_sends_only_top1_shows_it() -> None:
    from mlms.protos.mlms.v2 import evaluation_pb2
    from mlms.rpc.convert import from_proto, to_proto

    (record,) = copies(1, seed=12)
    message = to_proto(EvaluationSummary.of(record), evaluation_pb2.EvaluationSummary)
    for added in ("task", "accuracy_metric", "accuracy_value"):
        message.ClearField(added)  # as a server of the version before sends it
    old = from_proto(message, EvaluationSummary, "evaluation summary")
    assert (old.task, old.accuracy_metric) == (None, None)
    assert old.accuracy_line == f"top-1 {record.accuracy.top1:.4f}"
