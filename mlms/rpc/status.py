"""mlms errors <-> gRPC status codes, by one table in each direction.

Servers: ``ErrorInterceptor`` turns an ``MlmsError`` raised by a servicer into its status code
and one-line message, with the error's class name in the trailing metadata ``mlms-error`` so
that a Python client raises the same class; anything else becomes INTERNAL with a generic
message (the traceback goes to the server's log, not to the caller). Request bytes that do not
parse as the method's message are INVALID_ARGUMENT naming the method and the message type
expected, with one line in the log.
Clients: ``error_from_rpc`` turns a ``grpc.RpcError`` back into an ``MlmsError``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from mlms import errors
from mlms.library_errors import log_traceback
from mlms.rpc.options import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

ERROR_KEY = "mlms-error"
#: gRPC's standard trailer saying when to retry a call refused for load, in milliseconds.
PUSHBACK_KEY = "grpc-retry-pushback-ms"

#: ``mlms.errors.STATUS``: the first class an error is an instance of gives its code.
TO_STATUS: list[tuple[type[errors.MlmsError], grpc.StatusCode]] = [
    (cls, grpc.StatusCode[code]) for cls, code, _http in errors.STATUS
]

FROM_STATUS: dict[grpc.StatusCode, type[errors.MlmsError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: errors.InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.InvalidArgument,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: errors.UnsupportedFramework,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.ABORTED: errors.RankFailed,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.Unavailable,
    grpc.StatusCode.DATA_LOSS: errors.AssetError,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
}

_CLASSES = {
    cls.__name__: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.MlmsError)
}


_TRANSPORT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
}


def transport_failure(exc: grpc.RpcError) -> bool:
    """True when the far end went away, False when it answered with an error of its own."""
    if any(key == ERROR_KEY for key, _ in exc.trailing_metadata() or ()):  # type: ignore[attr-defined]
        return False
    code = exc.code()  # type: ignore[attr-defined]
    details = exc.details() or ""  # type: ignore[attr-defined]
    # A process killed mid-stream may show as a reset HTTP/2 stream rather than UNAVAILABLE.
    return code in _TRANSPORT or (
        code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
        and ("RST_STREAM" in details or "Stream removed" in details)
    )


def status_of(error: errors.MlmsError) -> grpc.StatusCode:
    return next(
        (code for cls, code in TO_STATUS if isinstance(error, cls)), grpc.StatusCode.INTERNAL
    )


def error_from_rpc(exc: grpc.RpcError, peer: str) -> errors.MlmsError:
    """The mlms error a failed call stands for; ``peer`` names the far end in messages."""
    code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
    details: str = exc.details() or code.name  # type: ignore[attr-defined]
    trailing = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
    cls = _CLASSES.get(trailing.get(ERROR_KEY, ""))
    if cls is errors.Overloaded:
        pushback = str(trailing.get(PUSHBACK_KEY, ""))
        return errors.Overloaded(details, int(pushback) / 1000 if pushback.isdigit() else None)
    if cls is not None:
        return cls(details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return errors.InvalidArgument(
            f"{details} (the limit is {MAX_MESSAGE_BYTES // 2**20} MiB per message; "
            "send smaller batches)"
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return errors.Unavailable(f"cannot reach {peer}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.Unavailable(f"{peer} did not answer in time: {details}")
    return FROM_STATUS.get(code, errors.MlmsError)(f"{peer}: {details} ({code.name})")


class ErrorInterceptor(grpc.ServerInterceptor):
    def intercept_service(
        self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        expected = _message_name(handler.request_deserializer)
        decode = _tolerant(handler.request_deserializer)
        serialize = handler.response_serializer
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, method, _one(method, expected)),
                request_deserializer=decode,
                response_serializer=serialize,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _streaming(handler.unary_stream, method, _one(method, expected)),
                request_deserializer=decode,
                response_serializer=serialize,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _unary(handler.stream_unary, method, _each(method, expected)),
                request_deserializer=decode,
                response_serializer=serialize,
            )
        if handler.stream_stream:  # server reflection
            return grpc.stream_stream_rpc_method_handler(
                _streaming(handler.stream_stream, method, _each(method, expected)),
                request_deserializer=decode,
                response_serializer=serialize,
            )
        return handler


@dataclass(frozen=True)
class _Undecodable:
    """What ``_tolerant`` hands on instead of raising: grpc answers a raising deserializer with
    INTERNAL and a traceback in the log, before any interceptor could map the error."""

    size: int
    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or whatever a custom deserializer raises
            return _Undecodable(len(data), _reason(exc))

    return deserialize


def _reason(exc: Exception) -> str:
    text = _PARSE_PREFIX.sub("", " ".join(str(exc).split())) or type(exc).__name__
    return text[:1].lower() + text[1:]


# protobuf's DecodeError repeats the type, which the message names already.
_PARSE_PREFIX = re.compile(r"^Error parsing message with type '[^']*': ")


def _message_name(deserializer: Callable[[bytes], Any] | None) -> str:
    """``a serialized mlms.v2.PredictRequest`` for a generated ``PredictRequest.FromString``."""
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    return (
        "the method's request message"
        if descriptor is None
        else f"a serialized {descriptor.full_name}"
    )


def _decoded(request: Any, method: str, expected: str) -> Any:
    if isinstance(request, _Undecodable):
        message = (
            f"request to {method} does not parse: expected {expected}, got {request.size} "
            f"bytes ({request.reason})"
        )
        log.warning("refused: %s", message)
        raise errors.InvalidArgument(message)
    return request


def _one(method: str, expected: str) -> Callable[[Any], Any]:
    return lambda request: _decoded(request, method, expected)


def _each(method: str, expected: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    return lambda requests: (_decoded(request, method, expected) for request in requests)


def _unary(
    behaviour: Callable[..., Any], method: str, decoded: Callable[[Any], Any]
) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behaviour(decoded(request), context)
        except Exception as exc:
            _abort(context, exc, method)

    return call


def _streaming(
    behaviour: Callable[..., Iterator[Any]], method: str, decoded: Callable[[Any], Any]
) -> Callable[..., Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from behaviour(decoded(request), context)
        except Exception as exc:
            _abort(context, exc, method)

    return call


def _abort(context: grpc.ServicerContext, exc: Exception, method: str) -> None:
    if isinstance(exc, errors.MlmsError):
        log_traceback(exc)
        context.set_trailing_metadata(((ERROR_KEY, type(exc).__name__),))
        context.abort(status_of(exc), str(exc))
    if _is_abort(exc, context):
        raise exc  # context.abort() inside the servicer: already a status
    log.exception("unexpected error in %s", method)
    context.abort(
        grpc.StatusCode.INTERNAL,
        f"internal error in {method} ({type(exc).__name__}); the details are in the server log",
    )


def _is_abort(exc: Exception, context: grpc.ServicerContext) -> bool:
    # grpc raises a bare Exception from context.abort(); the code is then set on the context.
    return type(exc) is Exception and context.code() is not None  # type: ignore[attr-defined]
