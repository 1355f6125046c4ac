"""What the CLI talks to: the platform, embedded in this process or behind a server.

``EmbeddedClient`` runs everything here (the default); a remote client speaks gRPC to an
``mlms server`` and offers the same methods, so commands do not care which they hold.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mlms.errors import MlmsError

if TYPE_CHECKING:  # the CLI imports this module at start: what runs loads on use
    import pandas as pd
    import pyarrow as pa

    from mlms.advise.record import AdviceRecord, AdviceRequest
    from mlms.assets.file_models import ModelOptions
    from mlms.bounds.record import BoundRecord, BoundRequest
    from mlms.evaluation.progress import ProgressCallback
    from mlms.evaluation.query import EvaluationQuery, P50Row
    from mlms.evaluation.record import EvaluationRecord, EvaluationRequest
    from mlms.evaluation.summary import EvaluationSummary
    from mlms.evaluation.sweep import SweepSpec, SweepState
    from mlms.manifest import ModelManifest
    from mlms.server.jobs import Job
    from mlms.store.base import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluations:
    """One page of a listing, and what is in flight."""

    summaries: list[EvaluationSummary]  # in the query's order
    # Dispatched by a live server, no record yet. The embedded platform runs evaluations in
    # the caller's process, so it never reports any.
    in_flight: list[Job] = field(default_factory=list)
    total: int = 0  # the evaluations that match the query's filters
    next_page_token: str = ""  # empty on the last page


class Client(Protocol):
    def evaluate(
        self, request: EvaluationRequest, progress: ProgressCallback | None = None
    ) -> EvaluationRecord: ...

    def list_models(self, *, libraries: bool = False) -> list[ModelManifest]:
        """The zoo's models (with ``libraries``, every timm and torchvision architecture mlms
        can feed) and those added to the store."""
        ...

    def model(self, name: str) -> ModelManifest:
        """The manifest of a zoo model, a library's architecture or one added to the store."""
        ...

    def add_model(self, path: Path, options: ModelOptions, replace: bool = False) -> ModelManifest:
        """Add the artifact at ``path`` (a file or folder on this machine) to the store."""
        ...

    def remove_model(self, name: str, version: str | None = None) -> list[str]:
        """Remove an added model (every version, or ``version``): the versions removed."""
        ...

    def get_evaluation(self, evaluation_id: str) -> EvaluationRecord:
        """The stored record; ``EvaluationInFlight`` while a server still dispatches it."""
        ...

    def list_evaluations(self, query: EvaluationQuery | None = None) -> Evaluations:
        """One page of the stored evaluations that match ``query`` (default: the newest 50),
        from the evaluation index, and what is in flight."""
        ...

    def view_evaluations(self, view: str, query: EvaluationQuery | None = None) -> list[P50Row]:
        """A named view (``mlms.evaluation.query.VIEWS``) over the completed evaluations that
        match ``query``'s filters."""
        ...

    def spans(self, trace_id: str) -> pa.Table:
        """The archived span table of a trace (``mlms.tracer.archive.SCHEMA``)."""
        ...

    def span_archive(self, trace_id: str) -> Path:
        """The trace's archive as a Parquet file on this machine (for the analysis engine)."""
        ...

    def analyze(
        self, evaluation_ids: Sequence[str], analyses: Sequence[str], top: int | None = None
    ) -> dict[str, pd.DataFrame]:
        """Named analyses (``mlms.analysis.catalog``) over the evaluations' traces, computed
        where the store is: analysis name -> table."""
        ...

    def bound(self, request: BoundRequest, progress: ProgressCallback | None = None) -> BoundRecord:
        """Benanza's lower bounds and what-ifs for a model on a device (``mlms.bounds``)."""
        ...

    def list_bounds(self) -> list[BoundRecord]: ...

    def advise(
        self, request: AdviceRequest, step: Callable[[str], None] | None = None
    ) -> AdviceRecord:
        """Which configuration of a model to run (``mlms.advise``): predicted, then verified
        by evaluations; ``step`` gets a line per step."""
        ...

    def list_advice(self) -> list[AdviceRecord]: ...

    def sweep(
        self,
        spec: SweepSpec | None,
        sweep_id: str | None,
        changed: Callable[[SweepState], None],
    ) -> SweepState:
        """Run a new sweep (``spec``) or resume a stored one (``sweep_id``); ``changed`` gets
        its state after each change of a cell; the final state."""
        ...


class EmbeddedClient:
    def __init__(self, store: ObjectStore | None = None, database: str | None = None) -> None:
        """``database``: the evaluation index's URL; default: MLMS_DATABASE, else SQLite
        beside a local store (``$MLMS_HOME/index.db`` for the default one)."""
        from mlms.store.factory import default_store

        self.store = store or default_store()
        self.database = database
        self._index = None  # opened at the first call that needs it
        self._opening = threading.Lock()

    @property
    def index(self):  # -> EvaluationIndex; SQLAlchemy is imported only when it is needed
        """The evaluation index, opened (and brought up to date with the store) on first use."""
        with self._opening:
            if self._index is None:
                from mlms.database.connect import url_for
                from mlms.database.index import EvaluationIndex, needs_rebuild

                index = EvaluationIndex(url_for(self.store, self.database))
                if needs_rebuild(index):  # a new database beside records stored before it
                    from mlms.database.keeper import rebuild

                    rebuild(self.store, index)
                self._index = index
            return self._index

    def _writing_index(self):
        """The index for storing a record, or None while it cannot be opened (the record is
        then stored with a pending marker and indexed later)."""
        try:
            return self.index
        except MlmsError as exc:
            log.warning("the evaluation index is unavailable; indexing later: %s", exc)
            return None

    def evaluate(
        self,
        request: EvaluationRequest,
        progress: ProgressCallback | None = None,
        evaluation_id: str | None = None,
    ) -> EvaluationRecord:
        from mlms.evaluation.plan import plan_evaluation
        from mlms.evaluation.runner import evaluate
        from mlms.frameworks import own_interpreter, runs_apart

        if request.framework is not None and own_interpreter(request.framework) is not None:
            # The framework does not import here: its own interpreter plans the evaluation.
            from mlms.evaluation.option_checks import compile_mode
            from mlms.predictors.registry import predictor_class

            compile_mode(request, predictor_class(request.framework))  # a bad --compile: no child
            return self._evaluate_apart(request, progress, evaluation_id)
        # Planned here, so that a bad model, framework or option fails before any child starts.
        plan = plan_evaluation(request, self.store)
        if runs_apart(plan.framework):
            # tensorflow (its libraries crash torch's beside them) and jax (Keras picks its
            # backend once a process) run in a child agent, so this process can evaluate any
            # framework next.
            forwarded = request.model_copy(update={"framework": plan.framework})
            return self._evaluate_apart(forwarded, progress, evaluation_id, plan.manifest)
        return evaluate(
            plan,
            store=self.store,
            progress=progress,
            evaluation_id=evaluation_id,
            index=self._writing_index(),
        )

    def _evaluate_apart(
        self,
        request: EvaluationRequest,
        progress: ProgressCallback | None,
        evaluation_id: str | None,
        manifest: ModelManifest | None = None,
    ) -> EvaluationRecord:
        """``request`` (its framework named) run by a child agent, which stores the record;
        ``manifest``: its model, where this process has resolved it."""
        from mlms.agent.child import evaluate_in_child

        record = evaluate_in_child(
            request, self.store, progress, evaluation_id=evaluation_id, manifest=manifest
        )
        index = self._writing_index()  # the child stored it without: index it now
        if index is not None:
            try:
                index.add([record])
            except MlmsError as exc:  # its pending marker has it indexed later
                log.warning("evaluation %s: not indexed now: %s", record.id, exc)
        return record

    def list_models(self, *, libraries: bool = False) -> list[ModelManifest]:
        from mlms.catalog.resolve import all_models

        return all_models(self.store, libraries=libraries)

    def model(self, name: str) -> ModelManifest:
        from mlms.catalog.resolve import resolve_model

        return resolve_model(name, self.store)

    def add_model(self, path: Path, options: ModelOptions, replace: bool = False) -> ModelManifest:
        from mlms.assets.model_store import add_model
        from mlms.catalog.zoo import all_models

        zoo = frozenset(m.name for m in all_models())
        return add_model(self.store, Path(path), options, replace=replace, taken=zoo)

    def remove_model(self, name: str, version: str | None = None) -> list[str]:
        from mlms.assets.model_store import remove_model

        return remove_model(self.store, name, version)

    def get_evaluation(self, evaluation_id: str) -> EvaluationRecord:
        from mlms.evaluation.record_store import load_record

        return load_record(self.store, evaluation_id)

    def list_evaluations(self, query: EvaluationQuery | None = None) -> Evaluations:
        from mlms.database.catch_up import catch_up

        catch_up(self.store, self.index)  # records stored while no index took them
        from mlms.evaluation.query import EvaluationQuery

        page = self.index.page(query or EvaluationQuery())
        return Evaluations(page.summaries, total=page.total, next_page_token=page.next_page_token)

    def view_evaluations(self, view: str, query: EvaluationQuery | None = None) -> list[P50Row]:
        from mlms.database.catch_up import catch_up

        catch_up(self.store, self.index)
        from mlms.evaluation.query import EvaluationQuery

        return self.index.view(view, query or EvaluationQuery())

    def spans(self, trace_id: str) -> pa.Table:
        from mlms.tracer.archive import read_table

        return read_table(self.store, trace_id)

    def span_archive(self, trace_id: str) -> Path:
        from mlms.tracer.archive import local_archive

        return local_archive(self.store, trace_id)

    def analyze(
        self, evaluation_ids: Sequence[str], analyses: Sequence[str], top: int | None = None
    ) -> dict[str, pd.DataFrame]:
        from mlms.analysis.catalog import analyze_stored

        return analyze_stored(self.store, evaluation_ids, analyses, top)

    def bound(self, request: BoundRequest, progress: ProgressCallback | None = None) -> BoundRecord:
        from mlms.agent.child import evaluate_in_child
        from mlms.bounds.run import bound

        return bound(request, store=self.store, progress=progress, apart=evaluate_in_child)

    def list_bounds(self) -> list[BoundRecord]:
        from mlms.bounds.record import list_bounds

        return list_bounds(self.store)

    def advise(
        self, request: AdviceRequest, step: Callable[[str], None] | None = None
    ) -> AdviceRecord:
        """One evaluation at a time: they share this machine's devices."""
        from mlms.advise.run import Ran, advise, stored_from_index
        from mlms.hardware import detect

        def run(requests: Sequence[EvaluationRequest]) -> list[Ran]:
            return [Ran.timing(self.evaluate, request) for request in requests]

        index = self._writing_index() if request.use_stored else None
        return advise(
            request,
            store=self.store,
            hardware=detect(),
            run=run,
            stored=None if index is None else stored_from_index(self.store, index),
            bounds=self.list_bounds(),
            step=step,
        )

    def list_advice(self) -> list[AdviceRecord]:
        from mlms.advise.record import list_advice

        return list_advice(self.store)

    def sweep(
        self,
        spec: SweepSpec | None,
        sweep_id: str | None,
        changed: Callable[[SweepState], None],
    ) -> SweepState:
        """One group of cells (one evaluation) at a time: every framework here shares this
        machine's devices."""
        from mlms.evaluation.record_store import is_stored, load_record
        from mlms.evaluation.sweep import load_sweep, new_sweep
        from mlms.server.sweeps import SweepRun

        def run_group(group, _assigned) -> EvaluationRecord:
            if is_stored(self.store, group.evaluation_id):
                return load_record(self.store, group.evaluation_id)
            return self.evaluate(group.request, evaluation_id=group.evaluation_id)

        from mlms.database.keeper import index_sweep

        sweep = load_sweep(self.store, sweep_id) if sweep_id else new_sweep(spec)
        run = SweepRun(sweep, self.store, run_group)
        index_sweep(self.index, run.sweep)  # before its cells run: the sweep filter finds them
        run.start()
        try:
            for state in run.updates():
                changed(state)
        finally:
            run.stop()
        return state
