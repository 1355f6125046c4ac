"""Where a test run's CPU goes: every process's user+sys CPU, read from ``/proc/<pid>/stat``
every 0.3 s while a command runs, summed by kind of process (pytest workers, spawned
children, ``mlms agent`` by framework, ``mlms`` commands, browsers, services). A process that
ends between two reads loses its last fraction of a second; the table is an estimate.

    .venv/bin/python benchmarks/suite_cpu.py --out /tmp/suite-cpu.json -- \\
        .venv/bin/python -m pytest -p no:randomly -q
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def read(pid: str) -> tuple[int, float, str] | None:
    """(start time in ticks, CPU seconds, command line) of ``pid``; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / TICK, command[:300]


def kind(command: str) -> str:
    if "exec(eval(sys.stdin.readline()))" in command or "-m pytest" in command:
        return "pytest (main and xdist workers)"
    if "multiprocessing.spawn" in command or "multiprocessing.forkserver" in command:
        return "children (call_in_own_process's fork server and its forks; process pools)"
    if " agent" in command and "mlms" in command:
        framework = re.search(r"--framework (\S+)", command)
        return f"mlms agent ({framework[1] if framework else '?'})"
    if " server" in command and "mlms" in command:
        return "mlms server"
    if "-m mlms" in command or "bin/mlms" in command:
        return "mlms commands"
    if "chrom" in command:
        return "chromium"
    for service in ("etcd", "postgres", "moto"):
        if service in command:
            return service
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Every process, as JSON.")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    seen: dict[tuple[str, int], list] = {}
    began = time.monotonic()
    mine = str(os.getpid())
    since = read(mine)[0]  # processes started before this one are not the command's
    run = subprocess.Popen(command)
    while run.poll() is None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == mine:
                continue
            found = read(pid)
            if found is None or found[0] < since:
                continue
            start, cpu, line = found
            entry = seen.setdefault((pid, start), [0.0, line])
            entry[0] = max(entry[0], cpu)
        time.sleep(0.3)
    wall = time.monotonic() - began
    args.out.write_text(json.dumps([[pid, start, *v] for (pid, start), v in seen.items()]))
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for cpu, line in seen.values():
        totals[kind(line)][0] += 1
        totals[kind(line)][1] += cpu
    cpu = sum(t[1] for t in totals.values())
    print(f"{wall:.0f} s wall, {cpu:.0f} s CPU in {len(seen)} processes ({cpu / wall:.2f} cores)")
    for name, (count, seconds) in sorted(totals.items(), key=lambda t: -t[1][1]):
        print(f"{seconds:8.1f} s {100 * seconds / cpu:5.1f} % {count:5d}  {name}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
