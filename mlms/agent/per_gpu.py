"""``mlms agent --gpus all|0,1``: one agent process per GPU of this host
(docs/DESIGN.md, "Dispatch").

The parent runs no agent itself: it starts one worker (``mlms agent`` with the same flags) per
GPU named, with ``CUDA_VISIBLE_DEVICES`` set to that GPU's UUID, so that the worker sees it as
``cuda:0`` and no other. Each worker registers on its own (its record's ``gpus`` names the
GPU's index; ``hardware.gpus`` its UUID), serves on a port of its own and holds its own device
lock and energy meter, both keyed by the UUID.

- ``--gpus all``: the GPUs this process sees (every GPU of the host unless
  ``CUDA_VISIBLE_DEVICES`` says fewer); ``--gpus 0,1``: GPUs by NVML's index (nvidia-smi's).
- Ports: ``--listen HOST:PORT`` gives the k-th GPU named (from 0) PORT + k; ``HOST:0`` gives
  each any free port. ``--advertise HOST:PORT`` the same.
- ``--address-file F``: once every worker is registered, F holds their addresses, one a line in
  the order of ``--gpus``; written again when a restarted worker serves elsewhere.
- A worker that exits before it first registered (a bad flag, a port taken, the framework
  missing) ends the parent: it stops the other workers and exits with one line naming the GPU
  and the worker's last output line. A worker that dies after it registered is started again
  after ``RESTART_DELAY`` seconds, up to ``MAX_RESTARTS`` times in ``RESTART_WINDOW`` seconds
  per GPU; one death more ends the parent the same way.
- SIGTERM or SIGINT: SIGTERM to every worker (each stops gracefully within ``--grace``), then
  SIGKILL to any left ``KILL_AFTER`` seconds after that; the parent exits once none is left.
  A parent killed outright takes its workers with it: each asks the kernel for SIGTERM when
  its parent dies (``die_with_parent``, Linux's PR_SET_PDEATHSIG).

Each worker's output goes to the parent's stderr, every line prefixed with ``gpu N:``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mlms.errors import HardwareNotFound, InvalidArgument, Unavailable
from mlms.hardware import GpuInfo, HardwareInfo, visible_gpus
from mlms.parent_death import end_with_parent
from mlms.rpc.serving import split_address, write_address_file

log = logging.getLogger(__name__)

#: Seconds between a worker's death and its restart.
RESTART_DELAY = 2.0
#: Restarts of one GPU's worker allowed within ``RESTART_WINDOW`` seconds.
MAX_RESTARTS = 5
RESTART_WINDOW = 600.0
#: Seconds past the workers' grace period before SIGKILL.
KILL_AFTER = 10.0
#: How often the parent looks at its workers.
POLL_SECONDS = 0.2
#: Set in each worker's environment: the parent's pid (``die_with_parent``).
PARENT_VARIABLE = "MLMS_AGENT_PARENT"


def parse_gpus(text: str, info: HardwareInfo) -> list[GpuInfo]:
    """The GPUs ``--gpus`` names on this host; one line naming what the host has otherwise."""
    value = text.strip().lower()
    have = ", ".join(gpu.label for gpu in info.gpus) or "no NVIDIA GPU (NVML lists none)"
    if value == "all":
        gpus = visible_gpus(info)
        if not gpus:
            raise HardwareNotFound(
                f"--gpus all: host {info.host} has {have}"
                if not info.gpus
                else f"--gpus all: this process sees no GPU of host {info.host} "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}); it "
                f"has {have}"
            )
        return gpus
    parts = [part.strip() for part in value.split(",")]
    if not parts or not all(part.isdigit() for part in parts):
        raise InvalidArgument(
            f"--gpus {text!r}: expected all, or GPU indices as nvidia-smi numbers them (0,1)"
        )
    chosen: list[GpuInfo] = []
    for index in map(int, parts):
        gpu = next((g for g in info.gpus if g.index == index), None)
        if gpu is None:
            raise HardwareNotFound(
                f"--gpus {text}: host {info.host} has no GPU {index}; it has {have}"
            )
        if gpu in chosen:
            raise InvalidArgument(f"--gpus {text}: GPU {index} is named twice")
        chosen.append(gpu)
    return chosen


def offset_address(address: str | None, offset: int) -> str | None:
    """``HOST:PORT`` with PORT + ``offset`` (PORT 0 stays 0: any free port)."""
    if address is None:
        return None
    host, port = split_address(address)
    if port and port + offset > 65535:
        raise InvalidArgument(f"{address} + {offset}: past the last port")
    return f"{host}:{port + offset if port else 0}"


def pinned_environment(gpu: GpuInfo) -> dict[str, str]:
    """A worker's environment: this one, with only ``gpu`` visible to CUDA."""
    env = {key: value for key, value in os.environ.items() if key != "MLMS_GPUS"}
    # By UUID: no numbering to agree on. Where NVML gave no UUID, by index in PCI order,
    # which is NVML's.
    env["CUDA_VISIBLE_DEVICES"] = gpu.uuid or str(gpu.index)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env[PARENT_VARIABLE] = str(os.getpid())
    return env


def die_with_parent() -> None:
    """In a worker: SIGTERM when the parent that started it dies (Linux), and exit now if it
    has died already. Does nothing outside a worker of ``mlms agent --gpus``. The variable
    that says so is taken out of the environment: the worker's own children (a child agent,
    the power sampler) have another parent."""
    parent = os.environ.pop(PARENT_VARIABLE, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    end_with_parent()
    if os.getppid() != int(parent):
        raise SystemExit(f"mlms: error: the agent's parent {parent} is gone")


@dataclass
class Worker:
    """One GPU's agent process and what the parent knows of it."""

    gpu: GpuInfo
    position: int  # in the order of --gpus
    address_file: Path
    process: subprocess.Popen | None = None
    address: str = ""  # once registered
    registered_once: bool = False
    last_line: str = ""
    deaths: collections.deque = field(default_factory=collections.deque)
    restart_at: float | None = None
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"GPU {self.gpu.label}" + (f" ({self.gpu.uuid})" if self.gpu.uuid else "")


class GpuAgents:
    """The parent of one agent process per GPU; ``command(worker)`` is a worker's argv."""

    def __init__(
        self,
        gpus: list[GpuInfo],
        command: Callable[[Worker], list[str]],
        *,
        grace: float,
        address_file: Path | None = None,
        output: IO[str] | None = None,
    ) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="mlms-gpu-agents-"))
        self.workers = [
            Worker(gpu, position, self._folder / f"gpu-{gpu.index}.address")
            for position, gpu in enumerate(gpus)
        ]
        self._command = command
        self._grace = grace
        self._address_file = address_file
        self._output = output or sys.stderr
        self._output_lock = threading.Lock()
        self._written: list[str] | None = None

    def run(self, stopped: Callable[[float], bool]) -> None:
        """Start the workers and keep them running until ``stopped(seconds)`` (which waits up
        to that long) says so; raises ``Unavailable`` naming a worker that failed for good.
        Every worker is gone when this returns or raises."""
        try:
            for worker in self.workers:
                self._start(worker)
            while not stopped(POLL_SECONDS):
                for worker in self.workers:
                    self._look_at(worker)
                self._publish_addresses()
        finally:
            self.stop()

    def _start(self, worker: Worker) -> None:
        worker.address_file.unlink(missing_ok=True)
        worker.address = ""
        worker.restart_at = None
        worker.process = subprocess.Popen(
            self._command(worker),
            env=pinned_environment(worker.gpu),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        worker.reader = threading.Thread(
            target=self._forward,
            args=(worker, worker.process.stdout),
            name=f"gpu-{worker.gpu.index}-output",
            daemon=True,
        )
        worker.reader.start()
        log.info("started the agent of %s (pid %d)", worker.name, worker.process.pid)

    def _forward(self, worker: Worker, stream: IO[str]) -> None:
        for line in stream:
            text = line.rstrip("\n")
            if text.strip():
                worker.last_line = text.strip()
            with self._output_lock:
                self._output.write(f"gpu {worker.gpu.index}: {text}\n")
                self._output.flush()
        stream.close()

    def _look_at(self, worker: Worker) -> None:
        process = worker.process
        if process is None:
            if worker.restart_at is not None and time.monotonic() >= worker.restart_at:
                self._start(worker)
            return
        code = process.poll()
        if code is None:
            if not worker.address and worker.address_file.exists():
                worker.address = worker.address_file.read_text().strip()
                worker.registered_once = True
            return
        if worker.reader is not None:
            worker.reader.join(5)  # its last lines, for the message
        worker.process = None
        worker.address = ""
        if not worker.registered_once:
            raise Unavailable(
                f"the agent of {worker.name} exited ({code}) before it registered: "
                f"{worker.last_line or 'no output'}"
            )
        now = time.monotonic()
        worker.deaths.append(now)
        while worker.deaths and worker.deaths[0] < now - RESTART_WINDOW:
            worker.deaths.popleft()
        if len(worker.deaths) > MAX_RESTARTS:
            raise Unavailable(
                f"the agent of {worker.name} exited ({code}) {len(worker.deaths)} times in "
                f"{RESTART_WINDOW:.0f} s: {worker.last_line or 'no output'}"
            )
        log.warning(
            "the agent of %s exited (%s): %s; starting it again in %.0f s",
            worker.name,
            code,
            worker.last_line or "no output",
            RESTART_DELAY,
        )
        worker.restart_at = now + RESTART_DELAY

    def _publish_addresses(self) -> None:
        addresses = [worker.address for worker in self.workers]
        if self._address_file is None or not all(addresses) or addresses == self._written:
            return
        write_address_file(self._address_file, "\n".join(addresses) + "\n")
        self._written = addresses

    def stop(self) -> None:
        """SIGTERM to every worker, SIGKILL to those left after the grace period."""
        running = [w.process for w in self.workers if w.process is not None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._grace + KILL_AFTER
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("agent pid %d did not stop in time: killing it", process.pid)
                process.kill()
                process.wait()
        for worker in self.workers:
            worker.process = None
            if worker.reader is not None:
                worker.reader.join(5)
        shutil.rmtree(self._folder, ignore_errors=True)
