"""The processes one evaluation runs in, as the measured loop sees them.

An evaluation runs in one process (``SOLO``) or, for a model split over several devices, in one
process a rank, each running the same loop on its shard. The ranks must run the same number of
predicts (a rank that stopped early would leave the others waiting in a collective forever), and a
predict's latency is the slowest rank's. Both agreements run over a gloo group of their own, on the
host and outside the timed region, so that the model's collectives (NCCL on GPUs) are the only
communication inside a predict.
"""

from __future__ import annotations

from typing import Any


class Ranks:
    """One process: nothing to agree on."""

    rank: int = 0
    size: int = 1

    def agree(self, more: bool) -> bool:
        """Whether every rank runs another predict: yes if any rank wants one (the slowest
        rank's clock decides a time-bounded loop)."""
        return more

    def slowest(self, values: list[int]) -> list[int]:
        """Per position, the largest of the ranks' ``values`` (each rank's latencies of the same
        predicts, in order)."""
        return values


SOLO = Ranks()


class ProcessGroupRanks(Ranks):
    """The ranks of torch.distributed's default group, agreeing over a gloo group."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._dist = torch.distributed
        self.rank = self._dist.get_rank()
        self.size = self._dist.get_world_size()
        self._group = self._dist.new_group(backend="gloo")

    def agree(self, more: bool) -> bool:
        flag = self._torch.tensor([int(more)], dtype=self._torch.int64)
        self._dist.all_reduce(flag, op=self._dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())

    def slowest(self, values: list[int]) -> list[int]:
        mine = self._torch.tensor(values, dtype=self._torch.int64)
        every = [self._torch.empty_like(mine) for _ in range(self.size)]
        self._dist.all_gather(every, mine, group=self._group)
        return self._torch.stack(every).amax(dim=0).tolist()
