"""Does a sweep use its agents in parallel? A sweep's wall time against the longest agent's
share of it (the time that agent was busy with the sweep's evaluations); 1.0 is perfect.

A real fleet on loopback: etcd, an S3 server (moto), one ``mlms server`` and agents of two
frameworks, each agent with an MLMS_HOME of its own (as on a machine of its own). The
evaluations' assets are built before the clock starts.

    .venv/bin/python benchmarks/sweep_parallelism.py [--models digits_cnn,squeezenet1_1,...]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlms.evaluation.sweep import SweepSpec, SweepState
from tests.loopback_fleet import start_fleet
from tests.services import EtcdServer, S3Server


def busy_seconds(intervals: list[tuple[datetime, datetime]]) -> float:
    """The union of the intervals (an agent that got two at once counts the overlap once)."""
    total, end = 0.0, None
    for start, finish in sorted(intervals):
        if end is None or start > end:
            total += (finish - start).total_seconds()
            end = finish
        elif finish > end:
            total += (finish - end).total_seconds()
            end = finish
    return total


def shares(state: SweepState) -> dict[str, float]:
    by_agent: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for cell in state.cells:
        if cell.state == "completed" and cell.started_at and cell.finished_at:
            by_agent[cell.agent_id or "?"].append((cell.started_at, cell.finished_at))
    return {agent: busy_seconds(spans) for agent, spans in by_agent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits_cnn,squeezenet1_1,mobilenet_v2,resnet18")
    parser.add_argument("--frameworks", default="torch,onnxruntime")
    parser.add_argument("--batch-sizes", default="1,2,4")
    parser.add_argument("--agents-per-framework", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    models = args.models.split(",")
    frameworks = args.frameworks.split(",")
    spec = SweepSpec(
        models=models,
        frameworks=frameworks,
        batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        hw=["cpu"],
        iterations=args.iterations,
        warmup=1,
        min_seconds=args.min_seconds,
    )
    with tempfile.TemporaryDirectory(prefix="mlms-sweep-bench-") as folder:
        root = Path(folder)
        etcd = EtcdServer(root / "etcd").start()
        s3 = S3Server().start()
        os.environ.update(s3.env)  # this process builds the assets into the bucket
        fleet = None
        try:
            agents = [f for f in frameworks for _ in range(args.agents_per_framework)]
            fleet = start_fleet(etcd.url, s3.url, s3.env, agents, models, root)
            with fleet.client() as client:
                started = time.perf_counter()
                final = client.sweep(spec, None, lambda _state: None)
                wall = time.perf_counter() - started
        finally:
            if fleet is not None:
                fleet.stop()
            s3.stop()
            etcd.kill()
    busy = shares(final)
    longest = max(busy.values())
    print(f"sweep {final.id}: {len(final.cells)} evaluations "
          f"({final.count('completed')} completed, {final.count('failed')} failed) "
          f"over {len(busy)} agents")  # fmt: skip
    for agent, seconds in sorted(busy.items()):
        cells = sum(c.agent_id == agent for c in final.cells)
        print(f"  agent {agent}: {cells} evaluations, busy {seconds:.1f} s")
    print(f"wall {wall:.1f} s; longest agent's share {longest:.1f} s; "
          f"all shares {sum(busy.values()):.1f} s")  # fmt: skip
    print(f"parallelism ratio (wall / longest share): {wall / longest:.3f}  (target <= 1.1)")


if __name__ == "__main__":
    main()
