"""Power sampled beside a measured run, in a child process of its own.

The evaluation's process runs no thread of ours while it measures: the child reads the
device's power ``hz`` times a second between ``start`` and ``stop`` and answers with the peak,
the mean and the count; on a GPU also the SM clock's mean and lowest reading and every reason
the driver gave for holding the clocks down meanwhile (what moves a run's latency without the
model changing). One child serves a whole evaluation (its idle window and every batch
size), so its start (a Python interpreter and NVML's init, a fraction of a second) is paid
once, before the idle window.

The child speaks one JSON line per command on its stdout; its stdin carries the commands
``start`` and ``stop``, one a line, and its end tells the child to exit.
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mlms.evaluation.counters import Clocks, NoCounter, open_counter

#: Power samples per second beside a run.
SAMPLE_HZ = 20
#: The longest wait for the child's answer (its start includes NVML's init).
ANSWER_SECONDS = 30.0


@dataclass(frozen=True)
class PowerSamples:
    """The power read between ``start`` and ``stop``; ``peak`` and ``mean`` unset without a
    sample. The SM clock's mean and lowest reading are unset without a clock (a CPU), and
    ``limits`` is NVML's clock event reasons of every sample OR-ed together."""

    count: int
    peak: float | None
    mean: float | None
    sm_mhz_mean: float | None = None
    sm_mhz_min: float | None = None
    limits: int = 0


class SamplerFailed(Exception):
    """The child did not answer as it should; the message says how."""


class PowerSampler:
    """The parent's side: a child sampling the power of ``device`` (``cpu``: RAPL under
    ``powercap``; ``cuda:N``: NVML). NoCounter when the child cannot read it."""

    def __init__(self, device: str, powercap: Path, hz: float = SAMPLE_HZ) -> None:
        command = [sys.executable, "-m", __name__, device, str(powercap), str(hz)]
        self._child = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            answer = self._answer()
        except SamplerFailed as exc:
            self.close()
            raise NoCounter(f"the power sampler did not start: {exc}") from None
        if "error" in answer:
            self.close()
            raise NoCounter(answer["error"])
        #: The device's highest SM clock (None without a clock).
        self.max_sm_mhz: float | None = answer.get("max_sm_mhz")

    def _answer(self) -> dict[str, Any]:
        stdout = self._child.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], ANSWER_SECONDS)
        line = stdout.readline() if ready else ""
        if not line:
            code = self._child.poll()
            raise SamplerFailed(
                f"no answer in {ANSWER_SECONDS:.0f} s" if code is None else f"it exited ({code})"
            )
        return json.loads(line)

    def _send(self, command: str) -> dict[str, Any]:
        stdin = self._child.stdin
        assert stdin is not None
        try:
            stdin.write(f"{command}\n")
            stdin.flush()
        except OSError as exc:
            raise SamplerFailed(f"it exited ({exc})") from None
        return self._answer()

    def start(self) -> None:
        """Sampling from now on: returns once the child has begun."""
        self._send("start")

    def stop(self) -> PowerSamples:
        """The samples since ``start``."""
        answer = self._send("stop")
        return PowerSamples(
            answer["count"],
            answer["peak"],
            answer["mean"],
            answer.get("sm_mhz_mean"),
            answer.get("sm_mhz_min"),
            answer.get("limits", 0),
        )

    def close(self) -> None:
        """Ends the child: its stdin closed, it exits."""
        if self._child.stdin:
            with contextlib.suppress(OSError):  # a child already gone: nothing to flush to
                self._child.stdin.close()
        try:
            self._child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        if self._child.stdout:
            self._child.stdout.close()


def serve(
    read: Callable[[], float],
    hz: float,
    commands: IO[bytes],
    answers: IO[str],
    clocks: Callable[[], Clocks | None] = lambda: None,
) -> None:
    """The child's loop: ``read`` (watts) and ``clocks`` every ``1 / hz`` s between ``start``
    and ``stop`` on ``commands`` (unbuffered, so that select sees every line), until
    ``commands`` ends."""
    interval = 1 / hz
    samples: list[float] | None = None
    clocked: list[Clocks] = []
    due = 0.0
    while True:
        wait = None if samples is None else max(0.0, due - time.monotonic())
        ready, _, _ = select.select([commands], [], [], wait)
        if ready:
            line = commands.readline()
            if not line:
                return
            command = line.decode().strip()
            if command == "start":
                samples, clocked, due = [], [], time.monotonic() + interval
                _answer(answers, {"started": True})
            elif command == "stop":
                _answer(answers, _summary(samples or [], clocked))
                samples = None
            else:
                _answer(answers, {"error": f"unknown command {command!r}: expected start or stop"})
        elif samples is not None:
            due += interval
            # A reading the driver failed is one sample less, never the run; a driver without
            # the clock's reasons (NOT_SUPPORTED) still gives the power.
            with contextlib.suppress(Exception):
                samples.append(read())
            with contextlib.suppress(Exception):
                if (reading := clocks()) is not None:
                    clocked.append(reading)


def _summary(watts: list[float], clocked: list[Clocks]) -> dict[str, Any]:
    """The stop's answer: the power's count, peak and mean; the SM clock's mean and lowest,
    and the reasons OR-ed together."""
    peak, mean = (max(watts), sum(watts) / len(watts)) if watts else (None, None)
    summary: dict[str, Any] = {"count": len(watts), "peak": peak, "mean": mean}
    if clocked:
        mhz = [reading.sm_mhz for reading in clocked]
        limits = 0
        for reading in clocked:
            limits |= reading.limits
        summary |= {"sm_mhz_mean": sum(mhz) / len(mhz), "sm_mhz_min": min(mhz), "limits": limits}
    return summary


def _answer(answers: IO[str], message: dict[str, Any]) -> None:
    answers.write(json.dumps(message) + "\n")
    answers.flush()


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group: the parent ends the child by closing its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    device, powercap, hz = argv
    try:
        counter = open_counter(device, Path(powercap))
    except NoCounter as exc:
        _answer(sys.stdout, {"error": str(exc)})
        return
    try:
        try:
            max_sm_mhz = counter.max_sm_mhz()
        except Exception:  # a driver that cannot say: no share of the maximum, power still read
            max_sm_mhz = None
        _answer(sys.stdout, {"ready": True, "max_sm_mhz": max_sm_mhz})
        serve(counter.watts, float(hz), sys.stdin.buffer.raw, sys.stdout, counter.clocks)
    finally:
        counter.close()


if __name__ == "__main__":
    main(sys.argv[1:])
