"""Dispatch at fleet scale against a real etcd: 16 agents, 1,000 queued evaluations.

16 lightweight agent registrations (records under leases, as ``mlms agent`` writes them: 8 CPU
hosts, 4 with a V100, 4 with an A100) and a server's dispatch path (the fleet watch, the
selection by model, framework constraint, --hw and least load, and the job written under the
server's lease). 1,000 evaluations are queued one after another without finishing, so each
decision sees the load of all before it. Prints the p50/p99 of the decision alone and of the
decision plus the job's write to etcd (one: the dispatcher writes the job once its agent is
chosen), and how evenly the load spread.

    .venv/bin/python benchmarks/registry_scale.py [--registry etcd://HOST:PORT]
        [--agents 16] [--evaluations 1000]

Without --registry, an etcd is started on a free loopback port for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fake_hardware(index: int):
    from mlms.hardware import GpuInfo, HardwareInfo

    gpus = []
    if index % 4 in (1, 3):
        name = "Tesla V100-SXM2-16GB" if index % 4 == 1 else "NVIDIA A100-SXM4-40GB"
        alias = "v100" if index % 4 == 1 else "a100"
        gpus = [
            GpuInfo(
                index=0,
                name=name,
                alias=alias,
                memory_bytes=16 << 30,
                compute_capability="7.0",
                driver="550.54",
            )
        ]
    return HardwareInfo(
        host=f"host{index:02d}",
        cpu_brand="AMD EPYC 7B13",
        cpu_cores_logical=32,
        cpu_cores_physical=16,
        memory_bytes=128 << 30,
        machine="x86_64",
        gpus=gpus,
    )


def run(registry_url: str, agents: int, evaluations: int) -> None:
    from mlms.catalog.zoo import all_models
    from mlms.evaluation.record import EvaluationRequest
    from mlms.registry.agents import register_agent
    from mlms.registry.base import AgentRecord
    from mlms.registry.factory import registry_from_url
    from mlms.server.agents import AgentChannels
    from mlms.server.dispatch import Dispatcher
    from mlms.server.fleet import Fleet
    from mlms.server.jobs import Jobs

    models = [m.name for m in all_models()]
    registry = registry_from_url(registry_url)
    leases = []
    for index in range(agents):
        record = AgentRecord(
            id=f"agent{index:02d}",
            address=f"127.0.0.1:{20000 + index}",
            framework="torch" if index % 2 == 0 else "onnxruntime",
            framework_version="2.14.1" if index % 2 == 0 else "1.31.1",
            hardware=fake_hardware(index),
            models=models,
            in_flight=0,
            started_at=datetime.now(UTC),
        )
        leases.append(register_agent(registry, record, 10.0))
    lease = registry.lease(10.0)
    fleet = Fleet(registry)
    deadline = time.monotonic() + 30
    while len(fleet.agents()) < agents and time.monotonic() < deadline:
        time.sleep(0.05)
    jobs = Jobs(registry, lease, "bench")
    dispatcher = Dispatcher(fleet, jobs, AgentChannels())
    kinds = [
        ("resnet50", "torch>=2.4", "cpu"),
        ("squeezenet1_1", None, "v100"),
        ("resnet18", "onnxruntime^1.18", "a100"),
        ("digits_cnn", "torch", "cpu"),
    ]
    decide, with_jobs, chosen = [], [], Counter()
    with contextlib.ExitStack() as queued:
        for number in range(evaluations):
            model, framework, hw = kinds[number % len(kinds)]
            request = EvaluationRequest(model=model, framework=framework, hw=hw)
            start = time.perf_counter_ns()
            agent = dispatcher.choose(request, frozenset())
            decided = time.perf_counter_ns()
            jobs.start(uuid.uuid4().hex, model, "evaluation", agent.id, 1)
            written = time.perf_counter_ns()
            queued.enter_context(dispatcher.pending.hold(agent.id))
            decide.append((decided - start) / 1e3)
            with_jobs.append((written - start) / 1e3)
            chosen[agent.id] += 1
        in_etcd = len(registry.get_prefix("jobs/"))
    for job_key in registry.get_prefix("jobs/"):
        jobs.finish(job_key.rsplit("/", 1)[-1])
    fleet.close()
    lease.close()
    for agent_lease in leases:
        agent_lease.close()
    registry.close()
    print(f"registry scale: {agents} agents in {registry_url}, {evaluations} queued evaluations")
    print(
        f"  decision (selection over the watched fleet)  p50 {np.percentile(decide, 50):8.1f} us"
        f"   p99 {np.percentile(decide, 99):8.1f} us"
    )
    print(
        f"  decision + the job's write to etcd           p50 {np.percentile(with_jobs, 50):8.1f} us"
        f"   p99 {np.percentile(with_jobs, 99):8.1f} us"
    )
    print(f"  jobs in etcd while queued: {in_etcd}")
    loads = sorted(chosen.values())
    print(
        f"  evaluations per agent: min {loads[0]}, max {loads[-1]} over {len(chosen)} agents "
        f"({dict(sorted(chosen.items()))})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=None, help="etcd://HOST:PORT (default: start one)")
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--evaluations", type=int, default=1000)
    args = parser.parse_args()
    if args.registry:
        run(args.registry, args.agents, args.evaluations)
        return
    import tempfile

    from tests.services import EtcdServer  # the tests' launcher of a real etcd on loopback

    with tempfile.TemporaryDirectory() as folder:
        etcd = EtcdServer(Path(folder) / "data").start()
        try:
            run(etcd.url, args.agents, args.evaluations)
        finally:
            etcd.kill()


if __name__ == "__main__":
    main()
