"""A rank program for the launcher's tests that leaves its results and then never exits, as a
rank whose CUDA graphs held NCCL's communicator never left its process group on a GPU host
(which this CPU cannot reproduce: the one fake of those tests).

    python -m tests.stuck_rank SPEC RANK OUT    (started by ``running_ranks``)
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import ClassVar

from mlms.evaluation.tensor_parallel import RankSpec, leave_results
from mlms.evaluation.tensor_parallel_rank import rank_main


class StuckRankSpec(RankSpec):
    program: ClassVar[str] = "tests.stuck_rank"
    #: The ranks that stay after leaving their results; the others exit.
    stuck: list[int]


def leave_and_stay(spec: StuckRankSpec, rank: int, out: Path) -> None:
    (out / f"rank{rank}.parquet").write_bytes(b"")
    leave_results(out, rank, {"rank": rank})
    if rank in spec.stuck:
        threading.Event().wait()


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:], StuckRankSpec, leave_and_stay))
