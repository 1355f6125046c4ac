"""A model split over several devices of one host: one process a rank, started and watched here.

``--tensor-parallel N`` runs the evaluation in N rank processes
(``python -m mlms.evaluation.tensor_parallel_rank``), each holding its shard of the model
(``mlms.predictors.tensor_parallel``) on one device of the group: NCCL between GPUs, gloo on
the CPU. They run the same measured loop, agreeing on how many predicts to run, and a predict's
latency is the slowest rank's. Each rank writes its spans (with its rank) and its results into a
folder of this process, which merges them into the evaluation's one trace and record; the
record itself is stored by the caller (``mlms.evaluation.runner``), as for one process.

A rank that dies ends the evaluation: the others are killed (each rank leads a process group of
its own, so whatever it started goes too), the error names the rank, its device and the last line
it wrote, and nothing is stored. Ranks of one host share the host's clock, so their spans need
no alignment beyond the one every collector already does onto ``time.time_ns``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from mlms.config import mlms_home
from mlms.errors import InvalidArgument, RankFailed
from mlms.evaluation.progress import Progress, ProgressCallback
from mlms.evaluation.record import EvaluationRequest
from mlms.manifest import ModelManifest

logger = logging.getLogger(__name__)

#: The module each rank runs.
RANK_PROGRAM = "mlms.evaluation.tensor_parallel_rank"
#: How often the launcher looks at its ranks.
POLL_SECONDS = 0.05
#: Seconds the ranks get after SIGTERM before SIGKILL.
STOP_SECONDS = 5.0
#: Seconds a rank may take to exit once every rank has left its results: leaving the process
#: group is all that is left, and a rank stuck there is stopped rather than waited for.
TEARDOWN_SECONDS = 60.0


class RankSpec(BaseModel):
    """What every rank is told (the same for all; its rank comes on its command line). Another
    kind of run on the ranks (``mlms.loadgen.split``) extends it with what it needs and names
    its own ``program``."""

    #: The module each rank runs (``python -m PROGRAM SPEC RANK OUT``).
    program: ClassVar[str] = RANK_PROGRAM

    request: EvaluationRequest
    manifest: ModelManifest
    #: The model's asset (``mlms.assets.manager.Asset``'s fields), verified by the launcher.
    asset: dict[str, Any]
    devices: list[str]
    port: int
    evaluation_id: str
    #: The trace context (W3C pairs) the ranks' spans go under.
    context: list[tuple[str, str]]


@dataclass(frozen=True)
class RankOutput:
    """What one rank left in the folder: its results (``tensor_parallel_rank.RankResults``
    as JSON) and its span archive."""

    rank: int
    results: dict[str, object]
    spans: Path


def check_split_request(request: EvaluationRequest, framework: str) -> None:
    """One line for an option that a split model cannot take."""
    ranks = request.tensor_parallel
    if framework != "torch":
        raise InvalidArgument(
            f"--tensor-parallel {ranks}: framework {framework!r} does not split models here; "
            "expected torch"
        )
    from mlms.predictors.tensor_parallel import SplitTorchPredictor

    modes = SplitTorchPredictor.compile_modes
    if request.compile not in (None, *modes):
        raise InvalidArgument(
            f"--tensor-parallel {ranks} with --compile {request.compile}: a split model "
            f"compiles in torch.compile's {' or '.join(modes)} mode only; expected --compile "
            + " or ".join(modes)
        )
    for given, flag in (
        (request.dataset is not None, "--dataset"),
        (request.inputs != ["synthetic"], "--input"),
    ):
        if given:
            raise InvalidArgument(
                f"--tensor-parallel {ranks} with {flag}: a split model runs synthetic inputs; "
                "expected one or the other"
            )


@contextlib.contextmanager
def running_ranks(spec: RankSpec, report: ProgressCallback) -> Iterator[list[RankOutput]]:
    """Run the ranks to their end and yield what each left (the folder goes afterwards)."""
    with tempfile.TemporaryDirectory(prefix="mlms-ranks-") as folder:
        out = Path(folder)
        spec_path = out / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        ranks = [_start(spec, spec_path, rank, out) for rank in range(len(spec.devices))]
        try:
            _watch(ranks, spec, report, out)
        finally:
            _stop(ranks)
        yield [
            RankOutput(
                rank=rank,
                results=json.loads(results_path(out, rank).read_text()),
                spans=out / f"rank{rank}.parquet",
            )
            for rank in range(len(ranks))
        ]


def results_path(out: Path, rank: int) -> Path:
    """Where a rank leaves its results: the last thing it writes, all at once."""
    return out / f"rank{rank}.json"


def leave_results(out: Path, rank: int, results: dict[str, Any]) -> None:
    """``results`` written under a temporary name and renamed, so that the launcher never reads
    half of them."""
    final = results_path(out, rank)
    partial = final.with_suffix(".partial")
    partial.write_text(json.dumps(results))
    partial.replace(final)


def free_port() -> int:
    """A loopback port free now, for the ranks' rendezvous (rank 0 binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class _Rank:
    rank: int
    device: str
    process: subprocess.Popen[str]
    log: Path


def _start(spec: RankSpec, spec_path: Path, rank: int, out: Path) -> _Rank:
    log = out / f"rank{rank}.log"
    env = dict(os.environ)
    # Threads per rank: the host's cores shared among the ranks, unless the request sets them.
    if spec.devices[rank] == "cpu" and spec.request.intra_op_threads is None:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(spec.devices))))
    with open(log, "w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", spec.program, str(spec_path), str(rank), str(out)],
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
    return _Rank(rank, spec.devices[rank], process, log)


def _watch(ranks: list[_Rank], spec: RankSpec, report: ProgressCallback, out: Path) -> None:
    """Wait for every rank; raise at the first that fails. Rank 0's progress lines go to
    ``report`` as they come. Once every rank has left its results, a rank that has not exited
    ``TEARDOWN_SECONDS`` later is left to ``_stop``, with a warning naming it."""
    reader = threading.Thread(target=_forward_progress, args=(ranks[0], report), daemon=True)
    reader.start()
    all_left: float | None = None
    while True:
        codes = [rank.process.poll() for rank in ranks]
        failed = next((r for r, code in zip(ranks, codes, strict=True) if code), None)
        if failed is not None:
            # The first to fail is the cause; the others die of losing it a moment later.
            time.sleep(POLL_SECONDS)
            raise RankFailed(_failure(failed, ranks, spec))
        if all(code == 0 for code in codes):
            reader.join(timeout=1.0)
            return
        if all_left is None and all(results_path(out, r.rank).exists() for r in ranks):
            all_left = time.monotonic()
        if all_left is not None and time.monotonic() - all_left > TEARDOWN_SECONDS:
            stuck = [f"{r.rank} ({r.device})" for r, code in zip(ranks, codes, strict=True)
                     if code is None]  # fmt: skip
            logger.warning(
                "%s with --tensor-parallel %d: rank %s left its results but did not leave its "
                "process group within %.0f s; stopped",
                spec.manifest.name, len(ranks), ", ".join(stuck), TEARDOWN_SECONDS,
            )  # fmt: skip
            return
        time.sleep(POLL_SECONDS)


def _forward_progress(rank: _Rank, report: ProgressCallback) -> None:
    assert rank.process.stdout is not None
    for line in rank.process.stdout:
        with contextlib.suppress(ValueError, TypeError):
            report(Progress(**json.loads(line)))


def _failure(failed: _Rank, ranks: list[_Rank], spec: RankSpec) -> str:
    """One line: the rank, how it ended, its last word, and where its whole log is kept (the
    rank's folder goes with the evaluation)."""
    code = failed.process.returncode
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    last = _last_line(failed.log)
    kept = mlms_home() / "logs" / "ranks" / f"{spec.evaluation_id}-rank{failed.rank}.log"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(failed.log, kept)
    return (
        f"{spec.manifest.name} with --tensor-parallel {len(ranks)}: rank {failed.rank} "
        f"({failed.device}) died ({how})" + (f": {last}" if last else "") + f" (its log: {kept})"
    )


def _last_line(log: Path) -> str:
    """The rank's own last word: its one-line error, else the last line of its log."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    marked = [line for line in lines if line.startswith("mlms: error: ")]
    if marked:
        return marked[-1].removeprefix("mlms: error: ")
    return next((line for line in reversed(lines) if line), "")


def _stop(ranks: list[_Rank]) -> None:
    """Every rank and what it started gone: SIGTERM to each rank's process group, SIGKILL to
    what is left after ``STOP_SECONDS``."""
    for rank in ranks:
        if rank.process.poll() is None:
            _signal_group(rank.process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for rank in ranks:
        try:
            rank.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(rank.process, signal.SIGKILL)
            rank.process.wait()
        # A rank's children (its own helpers) die with its group even when it exited first.
        _signal_group(rank.process, signal.SIGKILL)
        if rank.process.stdout is not None:
            rank.process.stdout.close()


def _signal_group(process: subprocess.Popen[str], number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)
