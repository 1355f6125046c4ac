"""What ``mlms agent`` and ``mlms server``, the fleet's long-running processes, share.

Every flag can also come from an ``MLMS_*`` variable (MLMS_REGISTRY, MLMS_STORE, ...), the
way container deployments pass settings; S3 credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. Both serve TLS with ``--tls-cert``/``--tls-key`` (agents demand the
server's certificate from ``--tls-ca``: mutual TLS) and refuse plaintext off loopback unless
``--insecure``; see ``mlms.security``.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click

from mlms.cli.common_options import store_option, tls_options
from mlms.errors import InvalidArgument


@dataclass(frozen=True)
class ProcessFlags:
    """The flags of ``process_options``, as given."""

    listen: str
    registry: str
    store: str | None
    ttl: float
    otlp_endpoint: str | None
    grace: float
    address_file: Path | None
    tls_ca: str | None
    tls_cert: str | None
    tls_key: str | None
    insecure: bool

    def settings(self) -> dict[str, Any]:
        """What an ``AgentConfig`` or a ``ServerConfig`` takes from these flags."""
        from mlms.security.tls import TlsFiles

        return {
            "listen": self.listen,
            "registry": self.registry,
            "store": self.store,
            "ttl": self.ttl,
            "otlp_endpoint": self.otlp_endpoint,
            "grace": self.grace,
            "tls": TlsFiles.load(self.tls_ca, self.tls_cert, self.tls_key),
            "insecure": self.insecure,
            "address_file": self.address_file,
        }

    def passed_on(self) -> list[str]:
        """These flags for a worker process of the same command, less where to listen and to
        write the address (each worker has its own)."""
        given = {
            "--registry": self.registry,
            "--store": self.store,
            "--ttl": str(self.ttl),
            "--otlp-endpoint": self.otlp_endpoint,
            "--grace": str(self.grace),
            "--tls-ca": self.tls_ca,
            "--tls-cert": self.tls_cert,
            "--tls-key": self.tls_key,
        }
        flags = [arg for flag, value in given.items() if value is not None for arg in (flag, value)]
        return flags + ["--insecure"] * self.insecure


def process_options(default_listen: str):
    """The flags the server and the agent share (they differ in the default port), passed to
    the command as one ``ProcessFlags``, its first argument."""
    names = [field.name for field in fields(ProcessFlags)]

    def apply(command):
        @functools.wraps(command)
        def run(**params: Any) -> Any:
            flags = ProcessFlags(**{name: params.pop(name) for name in names})
            return command(flags, **params)

        return _with_options(run, default_listen)

    return apply


def database_option(help: str):
    """``--database`` (MLMS_DATABASE): the evaluation index, which each process uses its way."""
    return click.option(
        "--database", envvar="MLMS_DATABASE", default=None, metavar="URL", help=help
    )


def _with_options(command, default_listen: str):
    for option in reversed(
        [
            click.option(
                "--listen",
                envvar="MLMS_LISTEN",
                default=default_listen,
                show_default=True,
                metavar="HOST:PORT",
                help="Where to serve gRPC (port 0: any free port).",
            ),
            click.option(
                "--registry",
                envvar="MLMS_REGISTRY",
                default="memory://",
                show_default=True,
                help="etcd://HOST:PORT, or memory:// for a single process.",
            ),
            store_option,
            click.option(
                "--ttl",
                envvar="MLMS_TTL",
                default=5.0,
                show_default=True,
                type=click.FloatRange(min=1.0),
                help="Seconds the registry keeps this process's entries after it dies.",
            ),
            click.option(
                "--otlp-endpoint",
                envvar="MLMS_OTLP_ENDPOINT",
                default=None,
                metavar="URL",
                help="Also send spans to an OTLP/gRPC collector, e.g. http://127.0.0.1:4317.",
            ),
            click.option(
                "--grace",
                envvar="MLMS_GRACE",
                default=10.0,
                show_default=True,
                type=click.FloatRange(min=0.0),
                help="Seconds calls in flight may finish after SIGTERM.",
            ),
            click.option(
                "--address-file",
                type=click.Path(dir_okay=False, writable=True, path_type=Path),
                default=None,
                help="Write the address this process serves on to this file once it serves (an "
                "agent: once it is registered); with --listen HOST:0, how a script learns the "
                "port.",
            ),
            *tls_options(
                ca="The fleet's CA: verifies agents (server) or the server (agent).",
                cert="This process's certificate; with it, every port is TLS.",
                key="The certificate's private key.",
                insecure="Allow plaintext on an address that is not loopback.",
            ),
        ]
    ):
        command = option(command)
    return command


def log_to_stderr() -> None:
    """The process's log lines, on stderr where its supervisor (a container, systemd) keeps them."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def check_writable_folder(path: Path) -> None:
    """Before the process starts: its address is written there only once it serves."""
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise InvalidArgument(
            f"--address-file {str(path)!r}: expected a file in a writable folder; "
            f"{str(path.parent)!r} is not one"
        )
