"""CUPTI activity collector: CUDA API calls (SYSTEM_LIBRARY) and GPU work (HARDWARE).

Built on cupti-python, NVIDIA's official bindings (the optional ``gpu`` extra). The collector
records activities into large buffers that CUPTI hands back only when full or flushed, so the
measured loop pays for the records and nothing else; the buffers are sized so that a run of
minutes fits in a few, and CUPTI's count of dropped records is read and reported on exit.

Each thread that calls CUDA writes its API records into a buffer of its own (CUPTI's per-thread
activity buffers) instead of one buffer for the process behind one lock, which the launching
thread would share with CUPTI's own thread copying the GPU's kernel records in. On the H200s
the two measured alike within the hosts' noise (resnet50, batch 1, 24 paired rounds:
``benchmarks/layer_capture_overhead.py``, configuration ``mlms layers+cupti shared buffer``).

Records are kept as plain dicts on CUPTI's clock (``RawRecord``: what a fixture stores) together
with a ``ClockMap`` onto the host clock (``time.time_ns``), calibrated by pairing CUPTI's
timestamp with the host clock at start and at stop. ``to_events`` turns them into TimedEvents.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlms.errors import Unavailable
from mlms.tracer.communication import COMMUNICATION, is_communication
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

RawRecord = dict[str, Any]

#: Bytes per host activity buffer. A resnet50 step makes about 600 records of ~200 bytes, so one
#: buffer holds hundreds of steps and CUPTI's completion callback runs only at flush. Past
#: glibc's mmap ceiling, yet its pages take no faults inside the measured predicts, and 8 MiB
#: buffers cost the predicts no less (``benchmarks/layer_capture_overhead.py``, configuration
#: ``mlms layers+cupti 8MiB``).
BUFFER_BYTES = 64 << 20

API_KINDS = ("RUNTIME", "DRIVER")
#: API calls recorded by default: those that launch, copy, set, allocate, free or wait. The rest
#: (cudaGetDevice, cudaStreamIsCapturing, cuGetProcAddress, ...) are ten times as many as the
#: launches in a PyTorch step; recording them costs host time on every call and adds nothing to
#: the layer -> call -> kernel tree. ``all_api=True`` records every call.
API_CALLS = re.compile(
    r"Launch|Memcpy|Memset|Synchronize|Malloc|Free|MemAlloc|EventRecord|StreamWait|EventSync"
)
GPU_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")


@dataclass(frozen=True)
class ClockMap:
    """Linear map from CUPTI's timestamp to ``time.time_ns``, from two paired samples."""

    cupti_start: int
    host_start: int
    cupti_end: int
    host_end: int

    @property
    def slope(self) -> float:
        span = self.cupti_end - self.cupti_start
        return (self.host_end - self.host_start) / span if span > 0 else 1.0

    def to_host(self, cupti_ns: int) -> int:
        return self.host_start + round((cupti_ns - self.cupti_start) * self.slope)

    def to_dict(self) -> dict[str, int]:
        return {
            "cupti_start": self.cupti_start,
            "host_start": self.host_start,
            "cupti_end": self.cupti_end,
            "host_end": self.host_end,
        }


@dataclass
class CuptiCapture:
    """What one collection saw: raw records, the clock map, and how many records CUPTI dropped."""

    records: list[RawRecord] = field(default_factory=list)
    clock: ClockMap | None = None
    dropped: int = 0
    #: CUPTI's thread id (the low 32 bits of pthread_self) -> ``threading.get_ident()``.
    threads: dict[int, int] = field(default_factory=dict)

    def events(self, level: TraceLevel = TraceLevel.HARDWARE) -> list[TimedEvent]:
        if self.clock is None:
            return []
        return to_events(self.records, self.clock, level, self.threads)


def thread_key(ident: int) -> int:
    """CUPTI's default thread id for a ``threading.get_ident()`` value (pthread_t, truncated)."""
    return ident & 0xFFFFFFFF


def to_events(
    records: Iterable[RawRecord],
    clock: ClockMap,
    level: TraceLevel = TraceLevel.HARDWARE,
    threads: dict[int, int] | None = None,
) -> list[TimedEvent]:
    """SYSTEM_LIBRARY events for API calls, HARDWARE events for kernels, copies and sets."""
    threads = threads or {}
    events = []
    for record in records:
        is_api = record["kind"] in ("runtime", "driver")
        event_level = TraceLevel.SYSTEM_LIBRARY if is_api else TraceLevel.HARDWARE
        if event_level > level:
            continue
        attributes = {
            key: value
            for key, value in record.items()
            if key not in _EVENT_FIELDS and value is not None
        }
        events.append(
            TimedEvent(
                name=record["name"],
                kind=record["kind"],
                level=event_level,
                start_ns=clock.to_host(record["start"]),
                end_ns=clock.to_host(record["end"]),
                thread=threads.get(record["thread"], record["thread"]) if is_api else None,
                device=None if is_api else f"cuda:{record['device']}",
                stream=None if is_api else record.get("stream"),
                correlation_id=record["correlation_id"],
                attributes=attributes,
            )
        )
    return events


_EVENT_FIELDS = {"name", "kind", "start", "end", "thread", "device", "stream", "correlation_id"}


def available() -> str | None:
    """None when CUPTI can run here; otherwise why not, in one line."""
    try:
        from cupti import cupti  # noqa: F401
    except ImportError as exc:
        return f"cupti-python is not installed ({exc}); install mlms with the 'gpu' extra"
    except Exception as exc:  # the bindings load libcupti and the driver at import
        return f"CUPTI cannot load on this machine: {exc}"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device is visible to this process"
    except ImportError:
        pass
    return None


class CuptiCollector:
    """Context manager: collect CUPTI activities up to ``level`` while the block runs.

    ``SYSTEM_LIBRARY`` collects the CUDA runtime and driver API; ``HARDWARE`` adds kernels,
    memcpys and memsets; ``api`` names the API domains whose calls are recorded (the runtime's
    and the driver's by default); ``per_thread_buffers=False`` records into one buffer for the
    process (the module's docstring says why not by default); ``buffer_bytes`` sizes each
    activity buffer. Only one collector may be active in a process. CUPTI has one set of
    activity buffers per process: another client that takes them (torch.profiler with CUDA
    activities) is detected and reported as ``Unavailable``, at ``__enter__`` where CUPTI
    refuses our buffers, or at ``__exit__`` when CUPTI delivered no record at all for a block
    that ran.
    (The callback API's subscriber slot is no signal: PyTorch's profiler library holds it as
    soon as torch.profiler first runs, CPU-only too, and it is compatible with ours.)
    """

    _active_lock = threading.Lock()
    _active = False

    def __init__(
        self,
        level: TraceLevel = TraceLevel.HARDWARE,
        *,
        sync: Any = None,
        all_api: bool = False,
        api: Sequence[str] = API_KINDS,
        per_thread_buffers: bool = True,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        if level < TraceLevel.SYSTEM_LIBRARY:
            raise ValueError(f"CUPTI collects system_library and deeper, not {level.label!r}")
        if buffer_bytes < 1 << 20:
            raise ValueError(f"CUPTI buffer of {buffer_bytes} bytes: expected 1 MiB or more")
        if set(api) - set(API_KINDS):
            unknown = ", ".join(sorted(set(api) - set(API_KINDS)))
            raise ValueError(f"API domains {unknown!r}: expected among {', '.join(API_KINDS)}")
        reason = available()
        if reason:
            raise Unavailable(f"trace level {level.label!r} needs CUPTI: {reason}")
        from cupti import cupti

        self._cupti = cupti
        self._sync = sync  # called before reading the clock at stop, e.g. torch.cuda.synchronize
        self.level = level
        self.all_api = all_api
        self.per_thread_buffers = per_thread_buffers
        self.buffer_bytes = buffer_bytes
        self.capture = CuptiCapture()
        self._kinds = [
            getattr(cupti.ActivityKind, name)
            for name in (*api, *(GPU_KINDS if level >= TraceLevel.HARDWARE else ()))
        ]
        self._names: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> CuptiCapture:
        cupti = self._cupti
        with CuptiCollector._active_lock:
            if CuptiCollector._active:
                raise Unavailable("another mlms CUPTI collector is already active in this process")
            CuptiCollector._active = True
        ident = threading.get_ident()
        self.capture.threads[thread_key(ident)] = ident
        try:
            if self.per_thread_buffers:
                _set_flag(cupti, cupti.ActivityAttribute.ATTR_PER_THREAD_BUFFER, 1)
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for kind in self._kinds:
                cupti.activity_enable(kind)
        except cupti.cuptiError as exc:
            self._release()
            raise Unavailable(f"{_IN_USE}: CUPTI refused our activity buffers ({exc})") from exc
        except BaseException:
            self._release()
            raise
        if not self.all_api:
            _select_api_calls(cupti)
        if self._sync is not None:
            # A recorded call before the block: CUPTI asks for its first activity buffer
            # (``_buffer_requested``, on this thread) here rather than inside the block's
            # first call, which the caller may be timing.
            self._sync()
        self._start = _paired_sample(cupti)
        return self.capture

    def __exit__(self, *exc: object) -> None:
        cupti = self._cupti
        try:
            if self._sync is not None:
                self._sync()
            end = _paired_sample(cupti)
            cupti.activity_flush_all(1)
            for kind in self._kinds:
                cupti.activity_disable(kind)
            cupti.activity_flush_all(1)
            if self.per_thread_buffers:  # as found, for the next client in the process
                _set_flag(cupti, cupti.ActivityAttribute.ATTR_PER_THREAD_BUFFER, 0)
            self.capture.clock = ClockMap(self._start[0], self._start[1], end[0], end[1])
            self.capture.dropped += _dropped_records(cupti)
            # Detach CUPTI from the process, as torch.profiler does: an attached CUPTI keeps a
            # cost on every later CUDA call, which the model-level run must not pay.
            cupti.finalize()
        finally:
            self._release()
        if exc[0] is None and self._sync is not None and not self.capture.records:
            # The block synchronized the device at least once (our own sync), an API call that
            # CUPTI always records: none arriving means another client holds the buffers.
            raise Unavailable(f"{_IN_USE}: CUPTI delivered no records to mlms")

    def _release(self) -> None:
        with CuptiCollector._active_lock:
            CuptiCollector._active = False

    def _buffer_requested(self) -> tuple[int, int]:
        return self.buffer_bytes, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: Sequence[Any]) -> None:
        # A buffer that fills inside the block is completed on CUPTI's thread while the block
        # runs, holding the GIL for every record: the less Python a record costs here, the
        # less the block's own thread waits for the GIL.
        rows = [row for row in (self._row(a) for a in activities) if row is not None]
        with self._lock:
            self.capture.records.extend(rows)

    def _row(self, activity: Any) -> RawRecord | None:
        cupti = self._cupti
        kind = activity.kind
        if kind in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
            runtime = kind == cupti.ActivityKind.RUNTIME
            return {
                "kind": "runtime" if runtime else "driver",
                "name": self._api_name(runtime, activity.cbid),
                "start": activity.start,
                "end": activity.end,
                "correlation_id": activity.correlation_id,
                "thread": activity.thread_id,
                "cbid": activity.cbid,
            }
        common = {
            "start": activity.start,
            "end": activity.end,
            "correlation_id": activity.correlation_id,
            "device": activity.device_id,
            "stream": activity.stream_id,
        }
        if kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL):
            name = activity.name
            return {
                "kind": _kernel_kind(name),
                "name": name,
                **common,
                "grid": [activity.grid_x, activity.grid_y, activity.grid_z],
                "block": [activity.block_x, activity.block_y, activity.block_z],
                "registers_per_thread": activity.registers_per_thread,
                "shared_memory_bytes": activity.static_shared_memory
                + activity.dynamic_shared_memory,
            }
        if kind == cupti.ActivityKind.MEMCPY:
            copy = cupti.ActivityMemcpyKind(activity.copy_kind).name
            return {"kind": "memcpy", "name": f"memcpy {copy}", **common, "bytes": activity.bytes}
        if kind == cupti.ActivityKind.MEMSET:
            return {"kind": "memset", "name": "memset", **common, "bytes": activity.bytes}
        return None

    def _api_name(self, runtime: bool, cbid: int) -> str:
        domain = (
            self._cupti.CallbackDomain.RUNTIME_API
            if runtime
            else self._cupti.CallbackDomain.DRIVER_API
        )
        key = (int(domain), cbid)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = str(self._cupti.get_callback_name(domain, cbid))
        return name


@functools.lru_cache(maxsize=4096)
def _kernel_kind(name: str) -> str:
    """A kernel's kind by its name; a step launches the same few hundred names again and
    again, so each is classified once."""
    return COMMUNICATION if is_communication(name) else "kernel"


def _select_api_calls(cupti: Any) -> None:
    """Record only the API calls that ``API_CALLS`` names (per-callback-id switches)."""
    for enum, switch in (
        (cupti.RuntimeApiTraceCbid, cupti.activity_enable_runtime_api),
        (cupti.DriverApiTraceCbid, cupti.activity_enable_driver_api),
    ):
        for member in enum:
            if member.name in ("INVALID", "SIZE", "FORCE_INT"):
                continue
            try:
                switch(int(member), 1 if API_CALLS.search(member.name) else 0)
            except cupti.cuptiError:
                continue  # an id this driver does not have (retired or reserved)


_IN_USE = (
    "CUPTI is in use by another profiler in this process (for example torch.profiler with "
    "CUDA activities, or Nsight); stop it before tracing at system_library or deeper"
)


def _paired_sample(cupti: Any) -> tuple[int, int]:
    """(CUPTI ns, host ns) taken together; the host value is the midpoint of two reads."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):  # keep the tightest bracket: a preemption between reads widens it
        before = time.time_ns()
        stamp = cupti.get_timestamp()
        after = time.time_ns()
        if best is None or after - before < best[0]:
            best = (after - before, stamp, (before + after) // 2)
    assert best is not None
    return best[1], best[2]


def _set_flag(cupti: Any, attribute: int, value: int) -> None:
    """One of CUPTI's one-byte activity attributes; the bindings pass the value's size and the
    value on as C pointers, so both go as addresses."""
    size, flag = ctypes.c_size_t(1), ctypes.c_uint8(value)
    cupti.activity_set_attribute(attribute, ctypes.addressof(size), ctypes.addressof(flag))


def _dropped_records(cupti: Any) -> int:
    """Records CUPTI could not store for lack of buffer space (context and stream 0: all)."""
    dropped = ctypes.c_size_t(0)
    cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
    return int(dropped.value)
