"""Who may call what: bearer tokens on the Evaluator API, certificates on the agents' API.

``TokenInterceptor`` (the server): every call but health and reflection carries
``authorization: Bearer <token>``; no token or an invalid one is UNAUTHENTICATED, a token
without the method's role PERMISSION_DENIED. The request is not even decoded before that.

``PeerRoleInterceptor`` (agents, under mutual TLS): the caller's certificate, already checked
against the fleet's CA by the TLS handshake, must name the ``server`` role, so a user's or
another agent's certificate from the same CA cannot call ``Predict`` on an agent directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc

from mlms.errors import MlmsError, PermissionDenied, Unauthenticated
from mlms.rpc.status import ERROR_KEY, status_of
from mlms.security.bearer import HEADER
from mlms.security.ca import roles_of
from mlms.security.tokens import Role, Tokens

#: The Evaluator's methods and the role each needs.
EVALUATOR_ROLES: dict[str, Role] = {
    **{m: "read" for m in ("ListAgents", "ListModels", "GetEvaluation", "ListEvaluations",
                           "ListBounds", "GetSpans", "Analyze", "ViewEvaluations")},
    **{m: "run" for m in ("Evaluate", "Bound", "Predict", "Sweep")},
    **{m: "models" for m in ("AddModel", "RemoveModel")},
}  # fmt: skip
#: Services anyone may call: load balancers probe health, tools list services.
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, tokens: Tokens, service: str, roles: Mapping[str, Role]) -> None:
        self.tokens = tokens
        self.roles = {f"/{service}/{method}": role for method, role in roles.items()}

    def intercept_service(
        self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        method = details.method
        if method.startswith(OPEN_SERVICES):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None
        try:
            self._check(method, dict(details.invocation_metadata or ()))
        except MlmsError as exc:
            return _refusing(handler, exc)
        return handler

    def _check(self, method: str, metadata: dict[str, Any]) -> None:
        header = metadata.get(HEADER)
        if not header:
            raise Unauthenticated(
                f"{method} needs a token: send 'authorization: Bearer <token>' "
                "(--token, MLMS_TOKEN or $MLMS_HOME/token; 'mlms token create' makes one)"
            )
        scheme, _, token = str(header).partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("malformed authorization header: expected 'Bearer <token>'")
        entry = self.tokens.check(token.strip())
        needed = self.roles.get(method)
        if needed is None or needed not in entry.roles:
            raise PermissionDenied(
                f"token {entry.id} ({entry.name}, roles {','.join(entry.roles)}) may not call "
                f"{method}: it needs the role {needed or 'that no token has'!r}"
            )


class PeerRoleInterceptor(grpc.ServerInterceptor):
    """Only callers whose certificate names ``role`` get past health and reflection."""

    def __init__(self, role: str) -> None:
        self.role = role

    def intercept_service(
        self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or details.method.startswith(OPEN_SERVICES):
            return handler
        return _guarded(handler, functools.partial(self._check, details.method))

    def _check(self, method: str, context: grpc.ServicerContext) -> None:
        pems = context.auth_context().get("x509_pem_cert") or []
        roles = set().union(*(roles_of(pem) for pem in pems)) if pems else set()
        if self.role not in roles:
            raise PermissionDenied(
                f"{method} is for the fleet's {self.role}s: the caller's certificate names "
                f"{', '.join(sorted(roles)) or 'no mlms role'}"
            )


def _abort(context: grpc.ServicerContext, exc: MlmsError) -> None:
    context.set_trailing_metadata(((ERROR_KEY, type(exc).__name__),))
    context.abort(status_of(exc), str(exc))


def _refusing(handler: grpc.RpcMethodHandler, exc: MlmsError) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that answers ``exc`` without decoding the request."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        _abort(context, exc)

    def refuse_stream(_request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        _abort(context, exc)
        yield from ()

    # The bytes of a refused call are never parsed (grpc takes None for a failed decode).
    ignore = lambda _data: b""  # noqa: E731
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            refuse_stream, request_deserializer=ignore,
            response_serializer=handler.response_serializer,
        )  # fmt: skip
    return grpc.unary_unary_rpc_method_handler(
        refuse, request_deserializer=ignore, response_serializer=handler.response_serializer
    )


def _guarded(
    handler: grpc.RpcMethodHandler, check: Callable[[grpc.ServicerContext], None]
) -> grpc.RpcMethodHandler:
    """``handler`` with ``check(context)`` run before its behaviour."""

    def unary(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            check(context)
        except MlmsError as exc:
            _abort(context, exc)
        return handler.unary_unary(request, context)

    def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            check(context)
        except MlmsError as exc:
            _abort(context, exc)
        yield from handler.unary_stream(request, context)

    kinds = {"request_deserializer": handler.request_deserializer,
             "response_serializer": handler.response_serializer}  # fmt: skip
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, **kinds)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **kinds)
    return handler
