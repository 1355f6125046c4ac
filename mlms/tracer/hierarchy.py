"""Parents by time containment (docs/DESIGN.md, "Leveled measurement").

A span's parent is the smallest span that contains it in time on the same thread. Intervals on
one thread nest (a call stack), so one sweep over them sorted by start (longest first on ties)
with a stack of open intervals finds every innermost container in O(n log n).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol


class Interval(Protocol):
    @property
    def start_ns(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def thread(self) -> int | None: ...


def innermost_containers(
    parents: Sequence[Interval], children: Sequence[Interval]
) -> list[int | None]:
    """For each child, the index in ``parents`` of the smallest parent containing it, or None.

    Parents and children are matched on the same thread; a child with ``thread=None`` matches
    parents on any thread. Parents must nest on each thread (no partial overlap).
    """
    by_thread: dict[int | None, list[int]] = defaultdict(list)
    for index, parent in enumerate(parents):
        by_thread[parent.thread].append(index)
    result: list[int | None] = [None] * len(children)
    child_groups: dict[int | None, list[int]] = defaultdict(list)
    for index, child in enumerate(children):
        child_groups[child.thread].append(index)
    for thread, child_indices in child_groups.items():
        parent_indices = list(range(len(parents))) if thread is None else by_thread.get(thread, [])
        _sweep(parents, parent_indices, children, child_indices, result)
    return result


def _sweep(
    parents: Sequence[Interval],
    parent_indices: list[int],
    children: Sequence[Interval],
    child_indices: list[int],
    result: list[int | None],
) -> None:
    # Events: parents sort before children that start at the same instant, so that a child
    # beginning exactly where its parent begins still finds it on the stack.
    events = [(parents[i].start_ns, 0, -parents[i].end_ns, i) for i in parent_indices]
    events += [(children[i].start_ns, 1, -children[i].end_ns, i) for i in child_indices]
    events.sort()
    stack: list[int] = []
    for start, is_child, _neg_end, index in events:
        while stack and parents[stack[-1]].end_ns < start:
            stack.pop()
        if is_child:
            end = children[index].end_ns
            for candidate in reversed(stack):
                if parents[candidate].end_ns >= end:
                    result[index] = candidate
                    break
        else:
            stack.append(index)
