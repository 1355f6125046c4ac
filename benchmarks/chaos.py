"""Chaos on a fleet of network-namespace hosts: evaluations keep coming while a seeded schedule
kills (-9), restarts and partitions the agents, the servers and etcd, and cuts links in one
direction only. Nothing may be lost.

The fleet is the tests' (``tests/netns_fleet.py``): etcd and S3 (moto) on host ``store``,
``--servers`` servers on hosts ``server``, ``server2``..., one torch agent per host ``agentN``,
TLS between servers and agents, a token at the servers, short leases (``--ttl``). Clients are
given every server's address and move to the next when one is down. Needs root (``ip netns``).

One-way faults are blackhole routes on one side (iptables is not installed on the machine this
was written on, and its kernel has no netem): ``agent-mute`` drops what the agent sends to
every other host (it hears the servers, they never hear it back); ``agent-deaf`` drops what the
servers send to the agent. Both ways: ``*-partition`` takes a host's link down.

Evaluations (the small zoo model, ``--min-seconds`` each so that faults land mid-measurement)
are submitted one every ``--every`` seconds, at most ``--concurrency`` at a time, each from a
client thread of this process with a deadline. Each carries its own ``seed`` (its number), so
that the records in the store, whatever id the fleet gave them, say which submission they
belong to. Afterwards, once the fleet is quiet, every submission is one of:

- ``completed``: the client got the record, and the store holds that record, written once;
- ``failed``: the client got an mlms error with a reason (``failed+stored`` when an agent
  finished it anyway and its record is in the store: a server killed mid-stream);
- ``lost``: no answer by the deadline, an error without a reason, or a record the client got
  that the store does not hold;
- ``duplicated``: two records in the store for one submission, or one record written twice
  (the bucket is versioned: each write of a record is a version).

Copies refused: an evaluation moved to another agent (its first agent cut off, not dead) can
finish twice; the later copy finds the id taken (claimed in the evaluation index, or its
record stored) and is dropped with its span archive. The summary counts those refusals from
the agents' logs (``refused_copies``); a refused copy is no duplicate.

Faults run one after another (so that each heal is its own): after a fault ends (link up,
process restarted and serving, etcd healthy) the script measures how long until the fleet has
healed: every live agent registered in etcd and, for the server's faults, the server answering
with every agent in view. Targets: every submission completed or failed with a reason, 0 lost,
0 completed twice, every agent back in the registry within 2 x TTL after its fault ends.

    sudo .venv/bin/python benchmarks/chaos.py [--seed 16] [--evaluations 50] [--agents 3]
        [--servers 2] [--ttl 2] [--every 2] [--concurrency 3] [--min-seconds 1] [--keep DIR]

The soak: ``--evaluations 500 --every 0.5 --concurrency 4``; the schedule of faults repeats
(reshuffled) until the last submission ends.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fleet, from a checkout

from mlms import errors
from mlms.evaluation.record import EvaluationRecord
from tests import netns
from tests.netns_fleet import (
    BUCKET,
    MultiHostFleet,
    multihost_fleet,
    request,
    wait_until,
)

DEADLINE_S = 300.0  # one evaluation, however many retries and faults it meets
HEAL_LIMIT_S = 120.0  # waiting longer than this is a failure of the run, reported as such
#: What an agent logs when it drops its copy of an evaluation stored first by another: found
#: stored before its span archive was written, or refused when it claimed the id.
REFUSED = ("already; dropping this copy", "was stored by another copy first")


@dataclass
class Submission:
    number: int
    submitted: float = 0.0
    ended: float | None = None
    record: EvaluationRecord | None = None
    error: BaseException | None = None
    outcome: str = ""
    detail: str = ""


@dataclass
class Fault:
    kind: str
    target: str
    duration: float
    started: float = 0.0
    ended: float = 0.0  # when the fault was undone: link up, or the restart serving
    restart_s: float | None = None  # process start to serving, for restarts
    left_s: float | None = None  # an agent's: fault start to gone from the registry
    heal_s: float | None = None  # fault end to healed
    affects_agents: list[str] = field(default_factory=list)


class Chaos:
    def __init__(self, fleet: MultiHostFleet, args: argparse.Namespace) -> None:
        self.fleet = fleet
        self.args = args
        self.rng = random.Random(args.seed)
        self.begin = time.monotonic()
        self.submissions = [Submission(n) for n in range(1, args.evaluations + 1)]
        self.slots = threading.Semaphore(args.concurrency)
        self.threads: list[threading.Thread] = []
        self.faults: list[Fault] = []
        self.done = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self.begin

    # -- the evaluations ------------------------------------------------------------------
    def submit_all(self) -> None:
        for submission in self.submissions:
            self.slots.acquire()
            submission.submitted = self.now()
            thread = threading.Thread(target=self._evaluate, args=(submission,), daemon=True)
            thread.start()
            self.threads.append(thread)
            time.sleep(self.args.every)  # the pace of the submissions, not a wait on anything
        for thread, submission in zip(self.threads, self.submissions, strict=True):
            thread.join(max(0.0, submission.submitted + DEADLINE_S - self.now()))
        self.done.set()

    def _evaluate(self, submission: Submission) -> None:
        try:
            with self.fleet.client() as client:
                submission.record = client.evaluate(
                    request(
                        iterations=4,
                        min_seconds=self.args.min_seconds,
                        seed=submission.number,
                    )
                )
        except BaseException as exc:
            submission.error = exc
        finally:
            submission.ended = self.now()
            self.slots.release()

    # -- the faults -----------------------------------------------------------------------
    def schedule(self) -> list[Fault]:
        agents = sorted(self.fleet.agent_hosts)
        servers = sorted(self.fleet.server_hosts)
        kinds = ["agent-kill", "agent-kill", "agent-partition", "agent-partition"]
        kinds += ["agent-partition-long", "server-kill", "server-partition"]
        kinds += ["etcd-kill", "store-partition", "agent-mute", "agent-deaf"]
        self.rng.shuffle(kinds)
        faults = []
        for kind in kinds:
            role = kind.split("-")[0]
            target = (
                self.rng.choice(servers)
                if role == "server"
                else {"etcd": "etcd", "store": "store"}.get(role) or self.rng.choice(agents)
            )
            # A short partition heals before the channels' keepalive (15 s) gives up on the
            # stream; a long one outlasts it, so the server moves the evaluation elsewhere.
            duration = {
                "agent-partition-long": self.rng.uniform(18, 25),
                "agent-partition": self.rng.uniform(3, 8),
                "server-partition": self.rng.uniform(3, 8),
                "store-partition": self.rng.uniform(3, 8),
                "agent-mute": self.rng.uniform(3, 8),
                "agent-deaf": self.rng.uniform(3, 8),
            }.get(kind, self.rng.uniform(1, 4))
            faults.append(Fault(kind, target, round(duration, 1)))
        return faults

    def run_faults(self) -> None:
        time.sleep(self.args.first_fault)  # let evaluations get going before the first fault
        while not self.done.is_set():
            for fault in self.schedule():
                if self.done.is_set():
                    return
                self._inject(fault)
                self.faults.append(fault)
                time.sleep(self.rng.uniform(2, 6))  # the seeded gap between faults

    def _inject(self, fault: Fault) -> None:
        fleet = self.fleet
        live = sorted(fleet.agent_hosts)
        fault.affects_agents = live
        fault.started = self.now()
        print(f"[{fault.started:7.1f}s] fault: {fault.kind} {fault.target} {fault.duration}s")
        kind = fault.kind
        if kind.startswith("agent"):
            address = fleet.agent_address(fault.target)
            fault.affects_agents = [fault.target]
            one_way = self._one_way(kind, fault.target)
            if kind == "agent-kill":
                fleet.agents[fault.target].kill()
            elif one_way:
                _blackhole(one_way, add=True)
            else:
                fleet.agent_hosts[fault.target].partition()
            threading.Thread(target=self._time_leaving, args=(fault, address), daemon=True).start()
            time.sleep(fault.duration)
            if kind == "agent-kill":
                restarted = time.monotonic()
                fleet.start_agent(fault.target)
                wait_until(lambda: _listening(address), HEAL_LIMIT_S, f"{address} serving")
                fault.restart_s = time.monotonic() - restarted
            elif one_way:
                _blackhole(one_way, add=False)
            else:
                fleet.agent_hosts[fault.target].heal()
        elif kind == "server-kill":
            fleet.servers[fault.target].kill()
            time.sleep(fault.duration)
            restarted = time.monotonic()
            fleet.start_server(fault.target, wait=False)
            address = fleet.address_of_server(fault.target)
            wait_until(lambda: _listening(address), HEAL_LIMIT_S, f"the server {fault.target}")
            fault.restart_s = time.monotonic() - restarted
        elif kind == "server-partition":
            fleet.server_hosts[fault.target].partition()
            time.sleep(fault.duration)
            fleet.server_hosts[fault.target].heal()
        elif kind == "etcd-kill":
            assert fleet.etcd is not None
            fleet.etcd.kill()
            time.sleep(fault.duration)
            restarted = time.monotonic()
            fleet.start_etcd()  # same data folder, as an operator's restart
            fault.restart_s = time.monotonic() - restarted
        elif kind == "store-partition":
            fleet.store_host.partition()
            time.sleep(fault.duration)
            fleet.store_host.heal()
        ended = time.monotonic()
        fault.ended = ended - self.begin
        try:
            self._wait_healed(fault)
        except AssertionError as exc:  # reported as not healed; the next fault still runs
            print(f"[{self.now():7.1f}s] NOT healed: {fault.kind} {fault.target}: {exc}")
            return
        fault.heal_s = time.monotonic() - ended
        print(f"[{self.now():7.1f}s] healed: {fault.kind} {fault.target} in {fault.heal_s:.2f}s")

    def _wait_healed(self, fault: Fault) -> None:
        fleet = self.fleet
        wanted = {fleet.agent_address(n) for n in fault.affects_agents}
        wait_until(lambda: wanted <= set(fleet.registered()), HEAL_LIMIT_S, f"{wanted} back")
        if fault.kind.startswith("server"):
            with fleet.client(only=fault.target) as client:
                every = {fleet.agent_address(n) for n in fleet.agent_hosts}
                wait_until(
                    lambda: every <= {a.address for a in client.list_agents()},
                    HEAL_LIMIT_S,
                    "the server's view",
                )

    def _one_way(self, kind: str, agent: str) -> list[tuple[str, str]]:
        """(namespace, address) routes to blackhole for a one-way fault of ``agent``."""
        fleet = self.fleet
        host = fleet.agent_hosts[agent]
        if kind == "agent-mute":  # what the agent sends, to every other host
            others = [h for h in fleet.network.hosts.values() if h is not host]
            return [(host.namespace, other.address) for other in others]
        if kind == "agent-deaf":  # what the servers send to the agent
            return [(server.namespace, host.address) for server in fleet.server_hosts.values()]
        return []

    def _time_leaving(self, fault: Fault, address: str) -> None:
        start = self.begin + fault.started
        try:
            wait_until(lambda: address not in self.fleet.registered(), 30, f"{address} leaving")
            fault.left_s = time.monotonic() - start
        except AssertionError:
            fault.left_s = None

    # -- the verdict ------------------------------------------------------------------------
    def quiet(self) -> None:
        """Until no agent runs anything (a moved evaluation's first copy ends in the dark)."""

        def idle() -> bool:
            with self.fleet.client() as client:
                return not client.list_evaluations().in_flight and all(
                    a.in_flight == 0 for a in client.list_agents()
                )

        wait_until(idle, HEAL_LIMIT_S, "the fleet to be idle")

    def classify(self) -> None:
        stored = self._stored()  # seed -> [(evaluation id, versions, agent)]
        for s in self.submissions:
            copies = stored.get(s.number, [])
            writes = sum(v for _, v, _ in copies)
            if s.ended is None:
                s.outcome, s.detail = "lost", f"no answer in {DEADLINE_S:.0f}s"
            elif len(copies) > 1 or writes > 1:
                s.outcome = "duplicated"
                s.detail = ", ".join(f"{i[:12]} x{v} by {a}" for i, v, a in copies)
            elif s.record is not None:
                if copies and copies[0][0] == s.record.id:
                    s.outcome = "completed"
                    s.detail = f"{s.record.id[:12]} on {s.record.agent.get('address')}"
                else:
                    s.outcome, s.detail = "lost", f"record {s.record.id[:12]} not in the store"
            elif isinstance(s.error, errors.MlmsError) and str(s.error).strip():
                s.outcome = "failed+stored" if copies else "failed"
                s.detail = " ".join(str(s.error).split())[:160]
            else:
                s.outcome, s.detail = "lost", f"error without a reason: {s.error!r}"[:160]

    def _stored(self) -> dict[int, list[tuple[str, int, str]]]:
        s3 = self.fleet._s3
        versions = self.fleet.record_versions()
        found: dict[int, list[tuple[str, int, str]]] = {}
        for evaluation_id, count in versions.items():
            body = s3.get_object(Bucket=BUCKET, Key=f"evaluations/{evaluation_id}.json")
            record = json.loads(body["Body"].read())
            seed = record["request"]["seed"]
            found.setdefault(seed, []).append(
                (evaluation_id, count, record.get("agent", {}).get("address", "?"))
            )
        return found

    def report(self) -> dict:
        print("\nper evaluation (seed = submission number):")
        print(f"{'#':>3} {'submitted':>9} {'took':>6}  {'outcome':<13} detail")
        for s in self.submissions:
            took = f"{s.ended - s.submitted:6.1f}" if s.ended is not None else "     -"
            print(f"{s.number:>3} {s.submitted:9.1f} {took}  {s.outcome:<13} {s.detail}")
        print("\nfaults (times in s from the start; heal: from the fault's end):")
        print(
            f"{'kind':<21} {'target':<7} {'at':>6} {'for':>5} {'restart':>7} {'left':>5} "
            f"{'heal':>6}  agents back <= 2xTTL"
        )
        limit = 2 * self.args.ttl
        for f in self.faults:
            restart = f"{f.restart_s:7.2f}" if f.restart_s is not None else "      -"
            left = f"{f.left_s:5.2f}" if f.left_s is not None else "    -"
            heal = f"{f.heal_s:6.2f}" if f.heal_s is not None else "     -"
            ok = "yes" if f.heal_s is not None and f.heal_s <= limit else "NO"
            print(
                f"{f.kind:<21} {f.target:<7} {f.started:6.1f} {f.duration:5.1f} {restart} "
                f"{left} {heal}  {ok}"
            )
        counts = Counter(s.outcome for s in self.submissions)
        refused = sum(
            path.read_text(errors="replace").count(phrase)
            for path in (self.fleet.root / "logs").glob("agent*.log")
            for phrase in REFUSED
        )
        healed = [f for f in self.faults if f.heal_s is not None and f.heal_s <= limit]
        summary = {
            "seed": self.args.seed,
            "evaluations": len(self.submissions),
            "outcomes": dict(sorted(counts.items())),
            "faults": len(self.faults),
            "refused_copies": refused,
            "healed_within_2xTTL": len(healed),
            "max_heal_s": round(max((f.heal_s or 0) for f in self.faults), 2)
            if self.faults
            else None,
            "wall_s": round(self.now(), 1),
        }
        print("\n" + json.dumps(summary))
        return summary


def _blackhole(routes: list[tuple[str, str]], *, add: bool) -> None:
    """Drop (or stop dropping) what each namespace sends to each address: one direction."""
    for namespace, address in routes:
        verb = ["replace"] if add else ["del"]
        subprocess.run(
            ["ip", "-n", namespace, "route", *verb, "blackhole", f"{address}/32"],
            check=add,
            capture_output=True,
        )


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--evaluations", type=int, default=50)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between submissions")
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--first-fault", type=float, default=5.0)
    parser.add_argument("--keep", type=Path, help="keep logs here (default: a temp folder)")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason is not None:
        print(f"chaos: {reason}", file=sys.stderr)
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="mlms-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {args.seed}, logs in {root / 'logs'}")
    with multihost_fleet(root, agents=args.agents, servers=args.servers, ttl=args.ttl) as fleet:
        chaos = Chaos(fleet, args)
        faults = threading.Thread(target=chaos.run_faults, daemon=True)
        faults.start()
        chaos.submit_all()
        faults.join(HEAL_LIMIT_S * 3)
        chaos.quiet()
        chaos.classify()
        summary = chaos.report()
    outcomes = summary["outcomes"]
    good = outcomes.get("completed", 0) + outcomes.get("failed", 0)
    good += outcomes.get("failed+stored", 0)
    met = (
        good == summary["evaluations"]
        and summary["healed_within_2xTTL"] == summary["faults"]
        and not outcomes.get("lost")
        and not outcomes.get("duplicated")
    )
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
