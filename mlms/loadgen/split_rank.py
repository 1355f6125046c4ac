"""One rank of a load run on a split model (``python -m mlms.loadgen.split_rank SPEC RANK OUT``,
started by ``mlms.loadgen.split``): every rank loads its shard; rank 0 runs the scenario or the
sweep on a ``SplitTarget`` and leaves the stored record and LoadGen's summary in
``OUT/rank0.json``; the others follow its batches (``BatchFeed``) and leave how many they ran.

Every rank must issue the model's collectives in the same order, so rank 0 sends one batch at a
time and runs it before the next, whatever the scenario's workers or the sweep's concurrency: a
split model answers one query at a time.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from mlms.evaluation.tensor_parallel import leave_results
from mlms.evaluation.tensor_parallel_rank import asset_of, joined, rank_main
from mlms.loadgen.split import LoadRankSpec
from mlms.loadgen.targets import TargetInfo

#: The most dimensions a batch has (the header's slots after the count).
MAX_DIMS = 7
#: The header's count of dimensions that means "no more batches".
STOP = 0


class BatchFeed:
    """Batches from rank 0 to the other ranks, broadcast over a gloo group of their own (on
    the host: the model's own collectives, NCCL on GPUs, stay the only ones inside a predict):
    first a header (the count of dimensions and the dimensions), then the tensor. Every rank
    knows the dtype, the model's input's."""

    def __init__(self, torch: Any, dtype: str) -> None:
        self._torch = torch
        self._dist = torch.distributed
        self._group = self._dist.new_group(backend="gloo")
        self._dtype = getattr(torch, dtype)

    def send(self, batch: np.ndarray) -> None:
        """Rank 0: ``batch`` to every other rank."""
        header = [batch.ndim, *batch.shape, *[0] * (MAX_DIMS - batch.ndim)]
        self._broadcast(self._torch.tensor(header, dtype=self._torch.int64))
        self._broadcast(self._torch.from_numpy(np.ascontiguousarray(batch)))

    def stop(self) -> None:
        """Rank 0: no more batches."""
        self._broadcast(self._torch.zeros(MAX_DIMS + 1, dtype=self._torch.int64))

    def receive(self) -> np.ndarray | None:
        """Another rank: rank 0's next batch, or None once it stopped."""
        header = self._torch.empty(MAX_DIMS + 1, dtype=self._torch.int64)
        self._broadcast(header)
        ndim = int(header[0])
        if ndim == STOP:
            return None
        batch = self._torch.empty(header[1 : 1 + ndim].tolist(), dtype=self._dtype)
        self._broadcast(batch)
        return batch.numpy()

    def _broadcast(self, tensor: Any) -> None:
        self._dist.broadcast(tensor, src=0, group=self._group)


class SplitTarget:
    """Rank 0's predict target: each batch sent to the other ranks, then its shard run (which
    returns once the model's last collective has every rank's part)."""

    def __init__(self, predictor: Any, feed: BatchFeed, info: TargetInfo) -> None:
        self.info = info
        self._predictor = predictor
        self._feed = feed
        # LoadGen's workers and the sweep's clients call from several threads; the ranks must
        # see the batches, and run their collectives, in one order.
        self._lock = threading.Lock()

    def predict(self, batch: np.ndarray) -> None:
        with self._lock:
            self._feed.send(batch)
            self._predictor.predict(batch)

    def close(self) -> None:
        with self._lock:
            self._feed.stop()


def serve(spec: LoadRankSpec, rank: int, out: Path) -> None:
    import torch

    from mlms.predictors.base import PredictorOptions
    from mlms.predictors.tensor_parallel import SplitTorchPredictor

    with joined(spec, rank) as device:
        options = PredictorOptions(device=device, intra_op_threads=spec.request.intra_op_threads)
        with SplitTorchPredictor(spec.manifest, asset_of(spec).path, options) as predictor:
            feed = BatchFeed(torch, spec.manifest.inputs[0].dtype)
            if rank == 0:
                info = TargetInfo(
                    model=spec.manifest.name,
                    framework=predictor.framework,
                    framework_version=predictor.framework_version(),
                    device=device,
                    where="embedded",
                    manifest=spec.manifest,
                    tensor_parallel=len(spec.devices),
                    devices=tuple(spec.devices),
                )
                results = _drive(spec, SplitTarget(predictor, feed, info))
            else:
                results = {"batches": _follow(feed, predictor)}
        leave_results(out, rank, results)


def _drive(spec: LoadRankSpec, target: SplitTarget) -> dict[str, Any]:
    """The run, on rank 0; the other ranks stopped after it."""
    from mlms.loadgen.concurrency import SweepSettings
    from mlms.loadgen.logs import summary_text
    from mlms.loadgen.run import run_loadgen, run_sweep
    from mlms.store.factory import store_from_url

    store = store_from_url(spec.store_url)
    summary = None
    if isinstance(spec.run, SweepSettings):
        record = run_sweep(target, spec.run, store)
    else:
        with tempfile.TemporaryDirectory(prefix="mlms-loadgen-") as logs:
            record = run_loadgen(target, spec.run, store, Path(logs))
            summary = summary_text(Path(logs))
    # Only after a whole run: a rank 0 that failed exits, and the launcher ends the others.
    target.close()
    return {"record": record.model_dump(mode="json"), "summary": summary}


def _follow(feed: BatchFeed, predictor: Any) -> int:
    """Another rank: rank 0's batches run on this shard until it stops; how many."""
    count = 0
    while (batch := feed.receive()) is not None:
        predictor.predict(batch)
        count += 1
    return count


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:], LoadRankSpec, serve))
