"""How the workers share the suite (a pytest plugin, named in ``conftest.py``).

Each worker gets whole modules, so that a module-scoped fixture (a fleet, an evaluation, a
server) is made once, on the worker that runs the module, and its tests never run beside each
other; the long tests of a module that shares nothing between them (``SPREAD``) are units of
their own instead. The units go out longest first, by their seconds in a recent run
(``durations.json``), so that the last ones to start are short and the workers finish
together (xdist's own order, the modules with more tests first, left a minute-long test to
start last while the other worker sat idle). A unit the file does not know counts as the
longest. ``python -m pytest --durations-update`` writes the file again from the run's own
times (a run of a subset updates the units it ran).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

#: Modules whose tests share no module-scoped fixture and take long each.
SPREAD = frozenset({"tests/test_zoo_models.py"})

#: Seconds per work unit in a recent run: a module's path, or a test's id in ``SPREAD``.
DURATIONS = Path(__file__).with_name("durations.json")


def work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return nodeid if module in SPREAD else module


def known_seconds() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-update",
        action="store_true",
        help=f"write each work unit's seconds in this run into {DURATIONS.name}",
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope`` (pyproject's) with the units above, longest first; another
    ``--dist`` as xdist has it."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    seconds = known_seconds()
    unknown = max(seconds.values(), default=0.0)

    class LongestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            # xdist hands out the queue's first unit: make it the longest left.
            longest = max(self.workqueue, key=lambda unit: seconds.get(unit, unknown))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller sees every worker's reports
        _seconds[work_unit(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("durations_update") or "PYTEST_XDIST_WORKER" in os.environ:
        return
    if exitstatus != 0:
        return  # a failed run's times say little
    root = DURATIONS.parent.parent
    known = known_seconds()
    known.update({unit: round(seconds, 1) for unit, seconds in _seconds.items()})
    kept = {u: s for u, s in known.items() if (root / u.split("::", 1)[0]).is_file()}
    DURATIONS.write_text(json.dumps(dict(sorted(kept.items())), indent=1) + "\n")
