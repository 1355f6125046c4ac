"""The bearer token on the client side: an ``authorization`` header on every call.

A client interceptor adds it in the calling thread; gRPC's own access-token credentials run a
metadata plugin on another thread for each call, which cost 0.1-0.3 ms a call here. Where the
token may travel (TLS, or plaintext on loopback only) is decided by ``open_channel``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

HEADER = "authorization"


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _Details(_CallDetails, grpc.ClientCallDetails):
    pass


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._header = (HEADER, f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _Details(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self._header],
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)
