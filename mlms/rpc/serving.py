"""A gRPC server as every mlms process runs it: limits, error interceptor, health, reflection.

``start_server`` returns the running server and its bound port (pass port 0 in tests);
``advertised`` is the address others reach it at, which ``write_address_file`` tells whoever
started the process with port 0. ``stop_server`` is the graceful shutdown: health NOT_SERVING
first, so that load balancers and the mlms server stop sending work, then a stop with a grace
period for calls in flight.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mlms.errors import InvalidArgument, Unavailable
from mlms.rpc.options import SERVER_OPTIONS
from mlms.rpc.status import ErrorInterceptor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Service:
    """A servicer and what registers it: ``add`` is the generated ``add_XServicer_to_server``."""

    name: str  # the full service name, e.g. "mlms.v2.Predictor"
    servicer: Any
    add: Callable[[Any, grpc.Server], None]


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer
    services: tuple[str, ...]

    def stop(self, grace: float) -> None:
        for name in (*self.services, ""):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.stop(grace).wait()


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), naming the bad value otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise InvalidArgument(f"bad address {address!r}: expected HOST:PORT like 127.0.0.1:50051")
    return host, int(port)


def advertised(listen: str, advertise: str | None, port: int) -> str:
    """The address others reach this process at: ``advertise``, else ``listen`` with the
    bound port (a wildcard host becomes this machine's name)."""
    if advertise:
        split_address(advertise)
        return advertise
    host, _ = split_address(listen)
    if host in ("0.0.0.0", "[::]", "::"):
        host = socket.getfqdn()
    return f"{host}:{port}"


def write_address_file(path: Path, address: str) -> None:
    """``address`` in ``path``, which a reader finds either absent or whole: written once the
    process serves there, so that whoever started it with port 0 learns the port."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(address)
    partial.replace(path)


def start_server(
    listen: str,
    services: Sequence[Service],
    *,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    max_workers: int = 32,
    reuse_port: bool = False,
) -> RunningServer:
    """Serve ``services`` on ``listen``: TLS with ``credentials``, plaintext without (the
    caller has checked that plaintext is allowed there). ``interceptors`` (authentication)
    run before the one that turns errors into statuses. ``reuse_port``: share the port with
    other processes that bind it so (the kernel spreads connections over them); off, a port
    taken is an error."""
    split_address(listen)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        interceptors=[*interceptors, ErrorInterceptor()],
        options=[*SERVER_OPTIONS, ("grpc.so_reuseport", int(reuse_port))],
    )
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in services:
        service.add(service.servicer, server)
    names = tuple(s.name for s in services)
    reflection.enable_server_reflection(
        (
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError as exc:
        raise Unavailable(f"cannot listen on {listen}: {exc}") from exc
    server.start()
    for name in (*names, ""):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, health_servicer, names)


class StopSignal:
    """SIGTERM and SIGINT caught from the moment this is made, so a signal that arrives while
    the process starts (after it registered, before it serves) still stops it gracefully."""

    def __init__(self) -> None:
        self._received = threading.Event()
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        log.info("received %s", signal.Signals(signum).name)
        self._received.set()

    def wait(self, seconds: float) -> bool:
        """Whether a signal came (or had come), waiting up to ``seconds`` for one."""
        return self._received.wait(seconds)

    def wait_then(self, stop: Callable[[], None]) -> None:
        """Block until a signal came (or had come), then call ``stop``, the graceful shutdown."""
        while not self._received.wait(0.5):  # a timed wait lets the handler run promptly
            pass
        stop()
