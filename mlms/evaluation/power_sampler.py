"""Power sampled beside a measured run, in a child process of its own.

The evaluation's process runs no thread of ours while it measures: the child reads the
device's power ``hz`` times a second between ``start`` and ``stop`` and answers with the peak,
the mean and the count. One child serves a whole evaluation (its idle window and every batch
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

from mlms.evaluation.counters import NoCounter, open_counter

#: Power samples per second beside a run.
SAMPLE_HZ = 20
#: The longest wait for the child's answer (its start includes NVML's init).
ANSWER_SECONDS = 30.0


@dataclass(frozen=True)
class PowerSamples:
    """The power read between ``start`` and ``stop``; ``peak`` and ``mean`` unset without a
    sample."""

    count: int
    peak: float | None
    mean: float | None


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
        return PowerSamples(answer["count"], answer["peak"], answer["mean"])

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


def serve(read: Callable[[], float], hz: float, commands: IO[bytes], answers: IO[str]) -> None:
    """The child's loop: ``read`` (watts) every ``1 / hz`` s between ``start`` and ``stop`` on
    ``commands`` (unbuffered, so that select sees every line), until ``commands`` ends."""
    interval = 1 / hz
    samples: list[float] | None = None
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
                samples, due = [], time.monotonic() + interval
                _answer(answers, {"started": True})
            elif command == "stop":
                taken = samples or []
                peak, mean = (max(taken), sum(taken) / len(taken)) if taken else (None, None)
                _answer(answers, {"count": len(taken), "peak": peak, "mean": mean})
                samples = None
            else:
                _answer(answers, {"error": f"unknown command {command!r}: expected start or stop"})
        elif samples is not None:
            due += interval
            try:
                samples.append(read())
            except Exception:  # a reading the driver failed: one sample less, never the run
                continue


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
        _answer(sys.stdout, {"ready": True})
        serve(counter.watts, float(hz), sys.stdin.buffer.raw, sys.stdout)
    finally:
        counter.close()


if __name__ == "__main__":
    main(sys.argv[1:])
