"""One rank of a split model (``python -m mlms.evaluation.tensor_parallel_rank SPEC RANK OUT``):
joins the ranks' process group, loads its shard and runs the measured loop like one process does,
then leaves its results (``rankN.json``) and spans (``rankN.parquet``, every span with its rank)
in ``OUT`` for the launcher (``mlms.evaluation.tensor_parallel``). Rank 0 prints progress as JSON
lines on stdout; an error ends the rank with one line on stderr and exit code 1.

``rank_main``, ``joined`` and ``release_graphs`` are what every rank program shares (a load
run's ranks, ``mlms.loadgen.split_rank``, run another body in the same frame).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from mlms.assets.manager import Asset
from mlms.errors import MlmsError
from mlms.evaluation.progress import Progress
from mlms.evaluation.runner import measure_rank
from mlms.evaluation.tensor_parallel import RankSpec, leave_results
from mlms.tracer.archive import to_parquet, to_table
from mlms.tracer.carrier import context_from_pairs
from mlms.tracer.tracer import Tracer

#: How long a rank waits for the others to join (they load the same model meanwhile).
JOIN_TIMEOUT = timedelta(minutes=10)

Spec = TypeVar("Spec", bound=RankSpec)


def rank_main(
    argv: list[str], spec_type: type[Spec], body: Callable[[Spec, int, Path], None]
) -> int:
    """``SPEC RANK OUT`` read and ``body`` run on them; an mlms error is one line on stderr
    (the launcher quotes it) and exit code 1."""
    spec = spec_type.model_validate_json(Path(argv[0]).read_text())
    rank, out = int(argv[1]), Path(argv[2])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        body(spec, rank, out)
    except MlmsError as exc:
        print(f"mlms: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


@contextlib.contextmanager
def joined(spec: RankSpec, rank: int) -> Iterator[str]:
    """This rank's device, with the ranks' default process group set up on it (NCCL between
    GPUs, gloo on the CPU) until the block ends."""
    import torch
    import torch.distributed as dist

    device = spec.devices[rank]
    on_gpu = device.startswith("cuda")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend="nccl" if on_gpu else "gloo",
        init_method=f"tcp://127.0.0.1:{spec.port}",
        rank=rank,
        world_size=len(spec.devices),
        timeout=JOIN_TIMEOUT,
        device_id=torch.device(device) if on_gpu else None,
    )
    try:
        yield device
    finally:
        release_graphs(on_gpu)
        dist.destroy_process_group()


def release_graphs(on_gpu: bool) -> None:
    """Free torch.compile's CUDA graphs (``reduce-overhead``) before the process group goes: a
    graph that captured a collective holds NCCL's communicator, and with it alive the ranks
    never left the group (tinyllama_1b split over two H200s, benchmarks/RESULTS.md)."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None:
        return
    trees.reset_cudagraph_trees()
    if on_gpu:
        import torch

        torch.cuda.synchronize()


def run(spec: RankSpec, rank: int, out: Path) -> None:
    import torch

    with joined(spec, rank) as device:
        on_gpu = device.startswith("cuda")
        tracer = Tracer(
            spec.request.trace_level,
            resource={"mlms.evaluation_id": spec.evaluation_id, "mlms.rank": str(rank)},
            parent=context_from_pairs(spec.context),
        )
        measured = measure_rank(
            spec.request,
            spec.manifest,
            asset_of(spec),
            device,
            rank,
            tracer,
            spec.evaluation_id,
            _progress if rank == 0 else _silent,
        )
        tracer.shutdown()
        peak = torch.cuda.max_memory_allocated(device) if on_gpu else _resident_peak()
        table = to_table(tracer.records())
        column = table.schema.get_field_index("rank")
        table = table.set_column(
            column, "rank", pa.array([rank] * table.num_rows, table.schema.field(column).type)
        )
        (out / f"rank{rank}.parquet").write_bytes(to_parquet(table))
        leave_results(out, rank, {"measured": measured.to_json(), "peak_memory_bytes": peak})


def asset_of(spec: RankSpec) -> Asset:
    """The model's asset as the launcher verified it."""
    return Asset(**spec.asset | {"path": Path(spec.asset["path"])})


def _progress(event: Progress) -> None:
    print(json.dumps(dataclasses.asdict(event)), flush=True)


def _silent(_event: Progress) -> None:
    pass


def _resident_peak() -> int:
    """The process's peak resident set (Linux reports kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:], RankSpec, run))
