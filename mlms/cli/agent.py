"""``mlms agent`` and ``mlms server``: the fleet's long-running processes.

Every flag can also come from an ``MLMS_*`` variable (MLMS_REGISTRY, MLMS_STORE, ...), the
way container deployments pass settings; S3 credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. Both serve TLS with ``--tls-cert``/``--tls-key`` (agents demand the
server's certificate from ``--tls-ca``: mutual TLS) and refuse plaintext off loopback unless
``--insecure``; see ``mlms.security``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from mlms.cli.options import store_option, tls_options
from mlms.errors import InvalidArgument
from mlms.frameworks import FRAMEWORKS


def _common(default_listen: str):
    """The flags the server and the agent share; they differ in the default port."""

    def apply(command):
        return _with_options(command, default_listen)

    return apply


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


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@click.command()
@click.option(
    "--framework",
    envvar="MLMS_FRAMEWORK",
    required=True,
    type=click.Choice(sorted(FRAMEWORKS)),
    help="The framework this agent runs.",
)
@click.option(
    "--advertise",
    envvar="MLMS_ADVERTISE",
    default=None,
    metavar="HOST:PORT",
    help="The address servers reach this agent at; default: --listen with the bound port.",
)
@click.option(
    "--database",
    envvar="MLMS_DATABASE",
    default=None,
    metavar="URL",
    help="The fleet's evaluation index (postgresql://USER@HOST:PORT/NAME): each record's id is "
    "claimed there before it is stored, so of two copies of one evaluation only the first is "
    "kept. Without it the servers index what this agent stores.",
)
@click.option(
    "--gpus",
    envvar="MLMS_GPUS",
    default=None,
    metavar="all|0,1",
    help="One agent process per GPU: all (the GPUs this process sees) or indices as nvidia-smi "
    "numbers them. Each is pinned to its GPU (CUDA_VISIBLE_DEVICES=its UUID) and registers on "
    "its own; --listen HOST:PORT gives the k-th PORT+k (HOST:0: any free port each), and "
    "--address-file gets one address a line.",
)
@_common("127.0.0.1:50052")
def agent(
    framework: str,
    gpus: str | None,
    address_file: Path | None,
    database: str | None,
    advertise: str | None,
    listen: str,
    registry: str,
    store: str | None,
    ttl: float,
    otlp_endpoint: str | None,
    grace: float,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
) -> None:
    """Serve one framework on this machine and register in the fleet's registry."""
    if gpus is not None:
        flags = {
            "--framework": framework,
            "--database": database,
            "--registry": registry,
            "--store": store,
            "--ttl": str(ttl),
            "--otlp-endpoint": otlp_endpoint,
            "--grace": str(grace),
            "--tls-ca": tls_ca,
            "--tls-cert": tls_cert,
            "--tls-key": tls_key,
        }
        _agents_per_gpu(
            gpus,
            [arg for flag, value in flags.items() if value is not None for arg in (flag, value)]
            + ["--insecure"] * insecure,
            listen=listen,
            advertise=advertise,
            registry=registry,
            grace=grace,
            address_file=address_file,
        )
        return
    from mlms.agent.child import exec_in_own_interpreter
    from mlms.agent.per_gpu import die_with_parent

    die_with_parent()  # a worker of 'mlms agent --gpus': ends with its parent
    exec_in_own_interpreter(framework)  # mxnet: continue as this command in its own virtualenv
    if address_file is not None:
        _check_writable_folder(address_file)
    from mlms.agent.process import Agent, AgentConfig
    from mlms.rpc.serving import StopSignal
    from mlms.security.tls import TlsFiles

    _logging()
    signalled = StopSignal()
    process = Agent(
        AgentConfig(
            framework=framework,
            database=database,
            listen=listen,
            advertise=advertise,
            registry=registry,
            store=store,
            ttl=ttl,
            otlp_endpoint=otlp_endpoint,
            grace=grace,
            tls=TlsFiles.load(tls_ca, tls_cert, tls_key),
            insecure=insecure,
            address_file=address_file,
        )
    ).start()
    signalled.wait_then(process.stop)


def _agents_per_gpu(
    gpus: str,
    flags: list[str],
    *,
    listen: str,
    advertise: str | None,
    registry: str,
    grace: float,
    address_file: Path | None,
) -> None:
    """``mlms agent --gpus``: one worker per GPU, supervised here (``mlms.agent.per_gpu``)."""
    import sys

    from mlms.agent.per_gpu import GpuAgents, offset_address, parse_gpus
    from mlms.registry.hardware import detect
    from mlms.rpc.serving import StopSignal

    if registry.strip().lower().startswith("memory:"):
        raise InvalidArgument(
            f"--gpus with --registry {registry}: each agent would register in a registry of its "
            "own process, where no server finds it; give the fleet's (etcd://HOST:PORT)"
        )
    if address_file is not None:
        _check_writable_folder(address_file)
    chosen = parse_gpus(gpus, detect())
    for position in range(len(chosen)):  # every port in range before any worker starts
        offset_address(listen, position)
        offset_address(advertise, position)
    _logging()
    signalled = StopSignal()

    def command(worker) -> list[str]:
        listen_at = offset_address(listen, worker.position)
        advertise_at = offset_address(advertise, worker.position)
        return [
            sys.executable, "-m", "mlms", "agent", *flags,
            "--listen", listen_at,
            *(["--advertise", advertise_at] if advertise_at else []),
            "--address-file", str(worker.address_file),
        ]  # fmt: skip

    GpuAgents(chosen, command, grace=grace, address_file=address_file).run(signalled.wait)


def _check_writable_folder(path: Path) -> None:
    """Before the process starts: its address is written there only once it serves."""
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise InvalidArgument(
            f"--address-file {str(path)!r}: expected a file in a writable folder; "
            f"{str(path.parent)!r} is not one"
        )


@click.command()
@click.option(
    "--agent-tls-name",
    envvar="MLMS_AGENT_TLS_NAME",
    metavar="NAME",
    help="The name agent certificates carry, checked instead of each agent's address "
    "(agents that advertise pod IPs and share one certificate).",
)
@click.option(
    "--auth/--no-auth",
    envvar="MLMS_AUTH",
    default=None,
    help="Require bearer tokens ('mlms token'); default: required unless --listen is loopback.",
)
@click.option(
    "--database",
    envvar="MLMS_DATABASE",
    default=None,
    metavar="URL",
    help="The evaluation index, the same for every server of the fleet: "
    "postgresql://USER@HOST:PORT/NAME, or sqlite:///PATH for one server; default: SQLite "
    "under $MLMS_HOME.",
)
@click.option(
    "--record-cache",
    envvar="MLMS_RECORD_CACHE",
    default=4096,
    show_default=True,
    type=click.IntRange(min=0),
    help="Evaluation records kept in memory for GetEvaluation (they never change); 0: none.",
)
@click.option(
    "--listing-cache",
    envvar="MLMS_LISTING_CACHE",
    default=256,
    show_default=True,
    type=click.IntRange(min=0),
    help="ListEvaluations pages kept in memory, answered again while the index is unchanged; "
    "0: none.",
)
@_common("127.0.0.1:50051")
def server(
    address_file: Path | None,
    database: str | None,
    record_cache: int,
    listing_cache: int,
    agent_tls_name: str | None,
    auth: bool | None,
    listen: str,
    registry: str,
    store: str | None,
    ttl: float,
    otlp_endpoint: str | None,
    grace: float,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
) -> None:
    """Serve the Evaluator API: route evaluations and predicts to the fleet's agents."""
    if address_file is not None:
        _check_writable_folder(address_file)
    from mlms.rpc.serving import StopSignal
    from mlms.security.tls import TlsFiles
    from mlms.server.process import Server, ServerConfig

    _logging()
    signalled = StopSignal()
    process = Server(
        ServerConfig(
            listen=listen,
            registry=registry,
            store=store,
            ttl=ttl,
            otlp_endpoint=otlp_endpoint,
            grace=grace,
            tls=TlsFiles.load(tls_ca, tls_cert, tls_key),
            insecure=insecure,
            auth=auth,
            agent_tls_name=agent_tls_name,
            database=database,
            record_cache=record_cache,
            listing_cache=listing_cache,
            address_file=address_file,
        )
    ).start()
    signalled.wait_then(process.stop)
