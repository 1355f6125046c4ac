"""What the server refuses for load, before it queues more than it can answer in time.

Two limits, both answered RESOURCE_EXHAUSTED (``mlms.errors.Overloaded``) at once, with gRPC's
standard ``grpc-retry-pushback-ms`` trailer saying when to try again, instead of latencies that
grow without bound behind a queue:

- Calls at once: at most ``max_calls`` unary calls (listings, records, predicts) run together,
  up to ``max_queued`` more wait for one of them to end (blocked, not competing for the
  interpreter: more threads running Python at once would only take turns, and a call waiting on
  the registry would wait for its turn after each read), and at most ``max_streams`` streaming
  calls (evaluations, sweeps, uploads, span archives: they last as long as their work) are open.
  The pushback is the recent mean duration of a unary call times the calls ahead per slot (at
  least ``MIN_PUSHBACK_S``), with jitter so that refused callers do not come back together.
- Quotas: each caller (its token's name under tokens, else its host) may make ``quota`` calls a
  second on average, up to one second's worth at once (a token bucket); ``token_quotas`` sets
  it per token name. The pushback is when the caller's next call is allowed.

Health and reflection are never refused: load balancers must see a busy server as alive.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from mlms.errors import InvalidArgument, MlmsError, Overloaded
from mlms.rpc.status import ERROR_KEY, PUSHBACK_KEY, status_of
from mlms.security.auth import OPEN_SERVICES
from mlms.security.bearer import HEADER
from mlms.security.tokens import Tokens

#: The least a refused caller is told to wait.
MIN_PUSHBACK_S = 0.05
#: How much of the mean a new unary call's duration makes.
_WEIGHT = 0.05


@dataclass(frozen=True)
class Limits:
    #: Unary calls the server runs at once.
    max_calls: int = 16
    #: Unary calls that wait for one of those to end; more are refused.
    max_queued: int = 128
    #: Streaming calls the server holds open at once.
    max_streams: int = 128
    #: Calls a second each caller may make on average; 0: no quota.
    quota: float = 0.0
    #: Calls a second by token name, instead of ``quota``.
    token_quotas: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value, least in (
            ("max calls", self.max_calls, 1),
            ("max queued", self.max_queued, 0),
            ("max streams", self.max_streams, 1),
        ):
            if value < least:
                raise InvalidArgument(f"{name} {value}: expected at least {least}")
        for name, rate in {"every caller": self.quota, **self.token_quotas}.items():
            if not math.isfinite(rate) or rate < 0:
                raise InvalidArgument(
                    f"quota {rate} for {name}: expected calls a second, 0 or more (0: none)"
                )

    @property
    def threads(self) -> int:
        """Threads the server needs: every call it holds, and some to refuse the rest."""
        return self.max_calls + self.max_queued + self.max_streams + 16


def parse_token_quota(text: str) -> tuple[str, float]:
    """``NAME=RATE`` (calls a second) -> (name, rate), naming the bad value otherwise."""
    name, sep, rate = text.partition("=")
    try:
        value = float(rate)
    except ValueError:
        value = -1.0
    if not sep or not name or not math.isfinite(value) or value < 0:
        raise InvalidArgument(
            f"token quota {text!r}: expected NAME=CALLS_PER_SECOND like alice=20 (0: none)"
        )
    return name, value


class TokenBucket:
    """``rate`` calls a second on average, ``max(1, rate)`` at once."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """0 when a call may go now (and is counted); else the seconds until one may."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self.rate


class Slots:
    """``size`` calls at once and ``queue`` more waiting for one; ``mean`` is the recent mean
    duration of the calls that ended."""

    def __init__(self, size: int, queue: int = 0) -> None:
        self.size = size
        self.queue = queue
        self.mean = 0.0
        self._held = 0  # running and waiting
        self._running = threading.Semaphore(size)
        self._lock = threading.Lock()

    def take(self) -> bool:
        """False when every slot and place in the queue is taken; else True once a slot is
        this call's (after a wait in the queue)."""
        with self._lock:
            if self._held >= self.size + self.queue:
                return False
            self._held += 1
        self._running.acquire()
        return True

    def give_back(self, seconds: float) -> None:
        self._running.release()
        with self._lock:
            self._held -= 1
            self.mean += _WEIGHT * (seconds - self.mean)

    def pushback(self) -> float:
        ahead = self._held / self.size
        return max(MIN_PUSHBACK_S, self.mean * ahead) * random.uniform(1.0, 1.5)


class Backpressure(grpc.ServerInterceptor):
    def __init__(self, limits: Limits, tokens: Tokens | None) -> None:
        """``tokens``: who callers are (by their token's name); None: callers by host."""
        self.limits = limits
        self.tokens = tokens
        self.calls = Slots(limits.max_calls, limits.max_queued)
        self.streams = Slots(limits.max_streams)
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def intercept_service(
        self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or details.method.startswith(OPEN_SERVICES):
            return handler
        metadata = dict(details.invocation_metadata or ())
        kinds = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, metadata), **kinds
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, metadata, self.streams), **kinds
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, metadata), **kinds
            )
        return handler

    def _unary(
        self, behaviour: Callable[..., Any], metadata: dict, slots: Slots | None = None
    ) -> Callable[..., Any]:
        slots = slots or self.calls

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            self._admit(slots, metadata, context)
            began = time.monotonic()  # from the slot: the mean is of the work, not the wait
            try:
                return behaviour(request, context)
            finally:
                slots.give_back(time.monotonic() - began)

        return call

    def _streaming(self, behaviour: Callable[..., Iterator[Any]], metadata: dict):
        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self._admit(self.streams, metadata, context)
            began = time.monotonic()
            try:
                yield from behaviour(request, context)
            finally:
                self.streams.give_back(time.monotonic() - began)

        return call

    def _admit(self, slots: Slots, metadata: dict, context: grpc.ServicerContext) -> None:
        """Take a slot of ``slots`` for this call, or refuse it (the call ends here)."""
        try:
            self._within_quota(metadata, context)
        except Overloaded as exc:
            _refuse(context, exc)
        if not slots.take():
            held = (
                f"{slots.size} calls at once and {slots.queue} waiting"
                if slots is self.calls
                else f"{slots.size} streaming calls at once"
            )
            wait = slots.pushback()
            _refuse(
                context,
                Overloaded(
                    f"the server is refusing calls: it holds {held}, its limit; "
                    f"retry in {wait:.2f} s",
                    wait,
                ),
            )

    def _within_quota(self, metadata: dict, context: grpc.ServicerContext) -> None:
        caller = self._caller(metadata, context)
        rate = self.limits.token_quotas.get(caller, self.limits.quota)
        if rate <= 0:
            return
        with self._lock:
            bucket = self._buckets.get(caller)
            if bucket is None or bucket.rate != rate:
                bucket = self._buckets[caller] = TokenBucket(rate)
        wait = bucket.take()
        if wait:
            raise Overloaded(
                f"caller {caller!r} is over its quota of {rate:g} calls a second; "
                f"retry in {wait:.2f} s",
                wait,
            )

    def _caller(self, metadata: dict, context: grpc.ServicerContext) -> str:
        """The token's name (checked by the token interceptor before this one), else the host."""
        header = str(metadata.get(HEADER, ""))
        if self.tokens is not None and header:
            try:
                return self.tokens.check(header.partition(" ")[2].strip()).name
            except MlmsError:
                pass  # refused by the token interceptor already
        return context.peer().rpartition(":")[0]


def _refuse(context: grpc.ServicerContext, exc: Overloaded) -> None:
    context.set_trailing_metadata(
        ((ERROR_KEY, type(exc).__name__), (PUSHBACK_KEY, str(round((exc.retry_after or 0) * 1000))))
    )
    context.abort(status_of(exc), str(exc))
