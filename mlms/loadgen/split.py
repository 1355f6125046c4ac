"""A load run on a model split by tensor parallelism (``mlms loadgen --tensor-parallel N``).

As vLLM's and Megatron's drivers do, the driver runs in rank 0: the ranks are started by the
evaluations' launcher (``mlms.evaluation.tensor_parallel.running_ranks``) with a spec of this kind,
and rank 0 (``mlms.loadgen.split_rank``) runs the LoadGen scenario, or the concurrency sweep, on a
target whose predict broadcasts each batch to the other ranks and runs its own shard; the others
receive batches and run theirs until rank 0 broadcasts the stop. Rank 0 stores the record and
LoadGen's logs as one process does, and hands them to this one.

A rank that dies ends the run as it ends an evaluation: the others are killed, one line names the
rank, and no record is stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from typing import ClassVar

from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.tensor_parallel import RankSpec, free_port, running_ranks
from mlms.loadgen.concurrency import SweepSettings
from mlms.loadgen.record import LoadRecord
from mlms.loadgen.scenarios import ScenarioSettings
from mlms.store.base import ObjectStore


class LoadRankSpec(RankSpec):
    """What the ranks of a load run are told: the evaluation ranks' spec (its request names the
    model, framework, hardware and ranks) and the run, a scenario or a sweep."""

    program: ClassVar[str] = "mlms.loadgen.split_rank"

    #: Where rank 0 stores the record and LoadGen's logs.
    store_url: str
    #: A LoadGen scenario, or a concurrency sweep.
    run: ScenarioSettings | SweepSettings


@dataclasses.dataclass(frozen=True)
class SplitRun:
    record: LoadRecord
    #: LoadGen's summary (``mlms.loadgen.logs.summary_text``); None for a sweep.
    summary: str | None


def run_split(
    request: EvaluationRequest,
    settings: ScenarioSettings | SweepSettings,
    store: ObjectStore,
) -> SplitRun:
    """``settings`` run on ``request``'s model split over ``request.tensor_parallel`` devices of
    ``request.hw``, holding them for the run; the record stored in ``store``."""
    from mlms import hardware
    from mlms.assets.manager import AssetManager
    from mlms.config import mlms_home
    from mlms.evaluation.device_lock import exclusive_device, free_gpus
    from mlms.evaluation.plan import plan_evaluation

    # The split and its options checked (one line each) before any process starts.
    plan = plan_evaluation(request, store)
    locks = mlms_home() / "locks"
    devices = hardware.resolve_group(
        request.hw, request.tensor_parallel, hardware.detect(), free=free_gpus(locks)
    )
    asset = AssetManager(store, mlms_home() / "cache").ensure(plan.manifest, plan.framework)
    spec = LoadRankSpec(
        request=request,
        manifest=plan.manifest,
        asset=dataclasses.asdict(asset) | {"path": str(asset.path)},
        devices=devices,
        port=free_port(),
        evaluation_id=uuid.uuid4().hex,
        context=[],
        store_url=store.url,
        run=settings,
    )
    with contextlib.ExitStack() as held:
        for device in dict.fromkeys(devices):
            held.enter_context(exclusive_device(locks, device))
        with running_ranks(spec, lambda _progress: None) as outputs:
            first = outputs[0].results
    return SplitRun(LoadRecord.model_validate(first["record"]), first["summary"])
