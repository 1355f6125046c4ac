"""ML_LIBRARY level: cuDNN API calls, with the engine (algorithm) cuDNN ran for each.

Source: cuDNN's own API log. cuDNN 9 logs every API call twice, on entry with its arguments
(for ``cudnnBackendExecute``: the operation graph, tensor shapes, ``engine_id`` and the knob
choices of the execution plan) and on exit with its status, each stamped to the microsecond
with the calling thread. Entry and exit make the call's interval. In-process, the log is
switched on at run time with ``cudnnSetCallback`` and routed to us, so no environment variable
has to be set before cuDNN loads; the parser also reads a log file written with
``CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=<file>``.

What was tried and not used (H100, torch 2.11, cuDNN 9.19, cuBLAS 13.1): cuBLAS's and
cuBLASLt's API logs (``CUBLAS_LOGINFO_DBG``, ``CUBLASLT_LOG_LEVEL``) stamp calls to the second,
too coarse for spans. Not tried: NVTX ranges through CUPTI's NVTX domain, which needs NVTX
injection configured before the process starts. So cuBLAS calls appear only as their kernels
(HARDWARE) and launch calls (SYSTEM_LIBRARY). cuDNN's legacy batch-norm call logs no exit, so
it becomes an instant at its entry.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mlms.errors import Unavailable
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

_HEADER = re.compile(r"function (\w+)\(\) called:")
_TIME = re.compile(r"Time: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)")
_THREAD = re.compile(r"Thread=(\d+)")
# Log-file lines start with "i!"; the callback's lines come without it.
_STATUS = re.compile(r"^\s*(?:i!)?\s*status: type=cudnnStatus_t; val=(\w+)", re.MULTILINE)
_VALUE = re.compile(r"^\s*(?:i!)?\s*(\w+): type=[^;]*; val=([^;]*);", re.MULTILINE)
#: Argument values worth carrying as attributes (the first of each in a call's entry block).
_KEPT = ("engine_id", "operation", "dimA", "mode", "enable_tf32")
#: Calls that do work on the device; the rest (descriptor set-up) are dropped.
WORK_CALLS = frozenset(
    {"cudnnBackendExecute", "cudnnConvolutionForward", "cudnnBatchNormalizationForwardInference"}
)


@dataclass
class Message:
    """One log block: a call's entry or exit."""

    function: str
    time_ns: int
    thread: int
    text: str

    @property
    def is_exit(self) -> bool:
        return _STATUS.search(self.text) is not None


def parse_log(text: str) -> list[Message]:
    """The blocks of a cuDNN API log file (``CUDNN_LOGDEST_DBG``), in order."""
    messages = []
    for block in re.split(r"\n\s*\n", text):
        header, stamp, thread = _HEADER.search(block), _TIME.search(block), _THREAD.search(block)
        if header and stamp and thread:
            when = int(datetime.fromisoformat(stamp.group(1)).timestamp() * 1e6) * 1000
            messages.append(Message(header.group(1), when, int(thread.group(1)), block))
    return messages


def to_events(messages: list[Message], threads: dict[int, int] | None = None) -> list[TimedEvent]:
    """ML_LIBRARY events for the device-work calls, entry paired with exit per thread.

    ``threads`` maps the log's thread ids (the kernel's, ``gettid``) to the tracer's
    (``threading.get_ident``); unmapped ids are kept as they are.
    """
    threads = threads or {}
    open_calls: dict[tuple[int, str], list[Message]] = {}
    pairs: list[tuple[Message, Message | None]] = []
    for message in messages:
        if message.function not in WORK_CALLS:
            continue
        key = (message.thread, message.function)
        if not message.is_exit:
            open_calls.setdefault(key, []).append(message)
        elif open_calls.get(key):
            pairs.append((open_calls[key].pop(), message))
    # Some legacy calls (cudnnBatchNormalizationForwardInference) log no exit: an instant.
    pairs += [(entry, None) for stack in open_calls.values() for entry in stack]
    pairs.sort(key=lambda pair: pair[0].time_ns)
    return [_event(entry, exit_, threads) for entry, exit_ in pairs]


def _event(entry: Message, exit_: Message | None, threads: dict[int, int]) -> TimedEvent:
    attributes = _arguments(entry.text)
    status = _STATUS.search(exit_.text) if exit_ is not None else None
    attributes["status"] = status.group(1) if status else "no exit logged"
    return TimedEvent(
        name=entry.function,
        kind="cudnn",
        level=TraceLevel.ML_LIBRARY,
        start_ns=entry.time_ns,
        end_ns=max(exit_.time_ns, entry.time_ns) if exit_ is not None else entry.time_ns,
        thread=threads.get(entry.thread, entry.thread),
        attributes=attributes,
    )


def _arguments(text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    dims = []
    for name, raw in _VALUE.findall(text):
        if name == "dimA":
            dims.append(raw)
        elif name in _KEPT and name not in values:
            values[name] = int(raw) if raw.lstrip("-").isdigit() else raw
    if dims:
        values["dims"] = dims[:4]
    return values


# --- in-process collection through cudnnSetCallback ------------------------------------------


class _Debug(ctypes.Structure):
    _fields_ = [  # ctypes layout of cudnnDebug_t
        ("cudnn_version", ctypes.c_uint),
        ("ret_code", ctypes.c_int),
        ("time_sec", ctypes.c_uint),
        ("time_usec", ctypes.c_uint),
        ("time_delta", ctypes.c_uint),
        ("handle", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("pid", ctypes.c_ulonglong),
        ("tid", ctypes.c_ulonglong),
        ("cuda_device_id", ctypes.c_int),
        ("reserved", ctypes.c_int * 15),
    ]


_CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Debug), ctypes.c_void_p
)
SEV_INFO_EN = 1 << 3  # cudnnSeverity_t: FATAL 0, ERROR 1, WARNING 2, INFO 3


#: Said in every ML_LIBRARY run's trace, so that no one reads the absence as "no cuBLAS calls".
CUBLAS_UNAVAILABLE = (
    "cuBLAS calls are not traced: its API logs stamp calls to the second, too coarse for spans; "
    "its work shows as kernels (hardware level) and their launches (system_library level)"
)


@dataclass
class CudnnCapture:
    messages: list[Message] = field(default_factory=list)
    threads: dict[int, int] = field(default_factory=dict)
    #: Why nothing was collected (the model never loaded cuDNN), or None.
    unavailable: str | None = None

    def events(self) -> list[TimedEvent]:
        return to_events(self.messages, self.threads)

    def not_available(self) -> dict[str, str]:
        """Each ML library whose calls this run's spans lack, and why."""
        missing = {"cublas": CUBLAS_UNAVAILABLE}
        if self.unavailable:
            missing["cudnn"] = self.unavailable
        return missing


def cudnn_library() -> ctypes.CDLL | None:
    """The cuDNN the process already loaded (the framework's, after warm-up), not another copy."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudnn.so" in line}
    return ctypes.CDLL(sorted(paths)[0]) if paths else None


def _lines(address: int | None) -> str:
    """A callback message: lines each ending in NUL, the message ending in an empty line."""
    lines = []
    while address:
        line = ctypes.string_at(address)
        if not line:
            break
        lines.append(line.decode(errors="replace"))
        address += len(line) + 1
    return "\n".join(lines)


@contextmanager
def collect_cudnn() -> Iterator[CudnnCapture]:
    """Route cuDNN's API log to us while the block runs (INFO severity: every call).

    A model whose warm-up never loaded cuDNN (no convolution, no batch norm) gets an empty
    capture that says so, rather than a failed evaluation.
    """
    library = cudnn_library()
    capture = CudnnCapture()
    if library is None:
        capture.unavailable = "this model's framework did not load cuDNN (it makes no cuDNN call)"
        yield capture
        return
    capture.threads[threading.get_native_id()] = threading.get_ident()
    lock = threading.Lock()

    def receive(_severity: int, _data: Any, debug: Any, text: int | None) -> None:
        info = debug.contents
        block = _lines(text)
        header = _HEADER.search(block)
        if header is None:
            return
        when = (info.time_sec * 1_000_000 + info.time_usec) * 1000
        with lock:
            capture.messages.append(Message(header.group(1), when, int(info.tid), block))

    callback = _CALLBACK(receive)  # kept alive by this frame until the callback is removed
    status = library.cudnnSetCallback(ctypes.c_uint(SEV_INFO_EN), None, callback)
    if status != 0:
        raise Unavailable(f"cudnnSetCallback failed with cuDNN status {status}")
    try:
        yield capture
    finally:
        library.cudnnSetCallback(ctypes.c_uint(0), None, _CALLBACK())
