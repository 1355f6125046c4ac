"""Two GPU agents against one: a sweep of 2 models x 3 batch sizes on a 2-GPU host, once through
the agent of one GPU and once through one agent per GPU; the ratio of the wall times (target
<= 0.55: the sweep's lane runs as many cells at once as there are GPU agents).

The fleet is one process tree: etcd (``tests.services.EtcdServer``: the ``etcd`` binary, or
``$MLMS_ETCD_BIN``), one ``mlms server`` and ``mlms agent --framework torch --gpus 0`` (then
``--gpus 0,1``), all over one local-folder store. The models' assets are built before any clock
starts, and each agent runs one untimed evaluation per GPU first (CUDA's start in each worker,
the weights in the page cache). ``--rounds N`` alternates the two configurations N times and
takes each one's median.

    python3 benchmarks/gpu_agents.py [--models resnet50,mobilenet_v2] [--batch-sizes 1,16,64]
    .venv/bin/python benchmarks/gpu_agents.py --dry     # on this CPU, small, to check the script

``--dry`` runs the same on the CPU with ``--hw cpu`` and NVML faked (``tests/fake_nvml``: two
H100s, so that ``--gpus`` starts two workers): both workers measure the one CPU, whose device
lock they share, so the ratio is about 1 there; it checks the script, the fleet and the agents,
not the speed-up.

On the lent GPU machine (no etcd there): copy ``/usr/bin/etcd`` (it needs only libc) into an
ignored folder, carry it, and give it as ``MLMS_ETCD_BIN``; mlms's pure-Python dependencies
travel as wheels: the GPU run kit's plan ``tensor_parallel`` does both (its ``agents`` cell).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlms.assets.manager import AssetManager  # noqa: E402
from mlms.catalog.zoo import get_model  # noqa: E402
from mlms.evaluation.record import EvaluationRequest  # noqa: E402
from mlms.evaluation.sweep import SweepSpec, SweepState  # noqa: E402
from mlms.hardware import detect  # noqa: E402
from mlms.remote_client import RemoteClient  # noqa: E402
from mlms.store.factory import store_from_url  # noqa: E402
from tests.processes import MlmsProcess, wait_for  # noqa: E402
from tests.services import EtcdServer, etcd_binary  # noqa: E402

FAKE_NVML = ROOT / "tests" / "fake_nvml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="two zoo models (default per mode)")
    parser.add_argument("--batch-sizes", default=None, help="three batch sizes")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--min-seconds", type=float, default=None)
    parser.add_argument("--rounds", type=int, default=1, help="one and two agents, alternated")
    parser.add_argument("--dry", action="store_true", help="the CPU, small, NVML faked")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()
    dry = args.dry
    models = args.models or ("digits_cnn,squeezenet1_1" if dry else "resnet50,mobilenet_v2")
    batch_sizes = [int(b) for b in (args.batch_sizes or ("1,2,4" if dry else "1,16,64")).split(",")]
    iterations = args.iterations or (3 if dry else 30)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.2 if dry else 2.0)
    if etcd_binary() is None:
        raise SystemExit("gpu_agents: no etcd binary: put one on PATH or give it as MLMS_ETCD_BIN")

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if dry:
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML), str(ROOT), env.get("PYTHONPATH", "")])
        env.pop("FAKE_NVML_HOST", None)
        hw = "cpu"
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        gpus = detect().gpus
        if len(gpus) < 2 or gpus[0].alias != gpus[1].alias:
            have = ", ".join(f"{g.index} {g.name}" for g in gpus) or "no GPU"
            raise SystemExit(f"gpu_agents: needs two GPUs of one kind; this host has {have}")
        hw = gpus[0].alias
        print(
            f"host {detect().host}: " + ", ".join(f"GPU {g.index} {g.name} {g.uuid}" for g in gpus)
        )
        for link in detect().links:
            print(f"  GPUs {link.gpus[0]} and {link.gpus[1]}: {link.label}")

    spec = SweepSpec(
        models=models.split(","),
        frameworks=["torch"],
        batch_sizes=batch_sizes,
        hw=[hw],
        iterations=iterations,
        warmup=3,
        min_seconds=min_seconds,
    )
    with tempfile.TemporaryDirectory(prefix="mlms-gpu-agents-") as folder:
        root = Path(folder)
        home, store_url = root / "home", str(root / "store")
        env.update(MLMS_HOME=str(home), MLMS_STORE=store_url)
        store = store_from_url(store_url)
        for model in spec.models:  # before any clock: the agents would race to build them
            AssetManager(store, home / "cache").ensure(get_model(model), "torch")
        etcd = EtcdServer(root / "etcd").start()
        server = None
        try:
            env["MLMS_REGISTRY"] = etcd.url
            server = MlmsProcess.serving(["server", "--grace", "2"], root / "server.log", env)
            address = server.address()
            walls: dict[int, list[float]] = {1: [], 2: []}
            for round_ in range(args.rounds):
                for count in (1, 2):
                    walls[count].append(_sweep(address, root, env, spec, hw, count, dry, round_))
        finally:
            if server is not None:
                server.stop()
            etcd.kill()
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    ratio = two / one
    print(
        f"sweep of {len(spec.models)} models x {len(batch_sizes)} batch sizes on {hw}: "
        f"one GPU agent {one:.1f} s, two {two:.1f} s; ratio {ratio:.3f} (target <= 0.55)"
        + (
            "  [--dry: both measure the one CPU, in turn; the ratio says nothing of GPUs]"
            if dry
            else ""
        )
    )
    if args.out is not None:
        results = {"hw": hw, "models": spec.models, "batch_sizes": batch_sizes, "dry": dry,
                   "iterations": iterations, "min_seconds": min_seconds,
                   "one_agent_s": walls[1], "two_agents_s": walls[2], "ratio": ratio}  # fmt: skip
        args.out.write_text(json.dumps(results, indent=2))


def _sweep(
    address: str, root: Path, env: dict[str, str], spec: SweepSpec, hw: str, count: int,
    dry: bool, round_: int,
) -> float:  # fmt: skip
    """The sweep's wall time through the agents of ``count`` GPUs (0, then 0 and 1)."""
    gpus = ",".join(str(i) for i in range(count))
    log = root / f"agents-{count}-{round_}.log"
    agents = MlmsProcess.serving(
        ["agent", "--framework", "torch", "--gpus", gpus, "--grace", "2"], log, env
    )
    try:
        agents.address(300)  # every worker registered
        with RemoteClient(address) as client:
            wait_for(lambda: len(client.list_agents()) == count, 120, f"{count} agents listed")
            gpu_of = {a.id: a.gpus for a in client.list_agents()}
            for index in range(count):  # CUDA's start and the weights, untimed, on each GPU
                client.evaluate(
                    EvaluationRequest(
                        model=spec.models[0],
                        framework="torch",
                        hw=hw if dry else f"{hw}:{index}",
                        batch_sizes=[spec.batch_sizes[0]],
                        iterations=1,
                        warmup=1,
                        min_seconds=0,
                    )
                )
            started = time.perf_counter()
            state = client.sweep(spec, None, lambda _state: None)
            wall = time.perf_counter() - started
            if state.count("completed") != len(state.cells):
                failed = [
                    f"{c.describe()}: {c.error}" for c in state.cells if c.state != "completed"
                ]
                raise SystemExit(f"gpu_agents: {len(failed)} cells did not complete: {failed[0]}")
            _report(state, wall, count, gpu_of)
            return wall
    finally:
        agents.stop()
        with RemoteClient(address) as client:
            wait_for(lambda: not client.list_agents(), 60, "the agents to leave")


def _report(
    state: SweepState, wall: float, count: int, gpu_of: dict[str, list[int] | None]
) -> None:
    print(f"{count} GPU agent{'s' * (count > 1)}: wall {wall:.1f} s")
    for cell in state.cells:
        seconds = (cell.finished_at - cell.started_at).total_seconds()
        gpus = gpu_of.get(cell.agent_id or "")
        print(
            f"  {cell.describe():44s} GPU {','.join(map(str, gpus or [])) or '?'} "
            f"(agent {cell.agent_id})  {seconds:5.1f} s  p50 {cell.p50_ms:.3f} ms"
        )


if __name__ == "__main__":
    main()
