"""``mlms agent``: serve one framework on this machine, or one worker per GPU (flags and
settings shared with the server: ``mlms.cli.fleet``)."""

from __future__ import annotations

import click

from mlms.cli.fleet import (
    ProcessFlags,
    check_writable_folder,
    database_option,
    log_to_stderr,
    process_options,
)
from mlms.errors import InvalidArgument
from mlms.frameworks import FRAMEWORKS


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
@database_option(
    "The fleet's evaluation index (postgresql://USER@HOST:PORT/NAME): each record's id is "
    "claimed there before it is stored, so of two copies of one evaluation only the first is "
    "kept. Without it the servers index what this agent stores."
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
@process_options("127.0.0.1:50052")
def agent(
    flags: ProcessFlags,
    framework: str,
    gpus: str | None,
    database: str | None,
    advertise: str | None,
) -> None:
    """Serve one framework on this machine and register in the fleet's registry."""
    if gpus is not None:
        own = {"--framework": framework, "--database": database}
        _agents_per_gpu(
            gpus,
            [arg for flag, value in own.items() if value is not None for arg in (flag, value)]
            + flags.passed_on(),
            flags,
            advertise=advertise,
        )
        return
    from mlms.agent.child import exec_in_own_interpreter
    from mlms.agent.per_gpu import die_with_parent

    die_with_parent()  # a worker of 'mlms agent --gpus': ends with its parent
    exec_in_own_interpreter(framework)  # mxnet: continue as this command in its own virtualenv
    if flags.address_file is not None:
        check_writable_folder(flags.address_file)
    from mlms.agent.process import Agent, AgentConfig
    from mlms.rpc.serving import StopSignal

    log_to_stderr()
    signalled = StopSignal()
    process = Agent(
        AgentConfig(framework=framework, database=database, advertise=advertise, **flags.settings())
    ).start()
    signalled.wait_then(process.stop)


def _agents_per_gpu(
    gpus: str, args: list[str], flags: ProcessFlags, *, advertise: str | None
) -> None:
    """``mlms agent --gpus``: one worker per GPU, supervised here (``mlms.agent.per_gpu``)."""
    import sys

    from mlms.agent.per_gpu import GpuAgents, offset_address, parse_gpus
    from mlms.hardware import detect
    from mlms.rpc.serving import StopSignal

    if flags.registry.strip().lower().startswith("memory:"):
        raise InvalidArgument(
            f"--gpus with --registry {flags.registry}: each agent would register in a registry of "
            "its own process, where no server finds it; give the fleet's (etcd://HOST:PORT)"
        )
    if flags.address_file is not None:
        check_writable_folder(flags.address_file)
    chosen = parse_gpus(gpus, detect())
    for position in range(len(chosen)):  # every port in range before any worker starts
        offset_address(flags.listen, position)
        offset_address(advertise, position)
    log_to_stderr()
    signalled = StopSignal()

    def command(worker) -> list[str]:
        listen_at = offset_address(flags.listen, worker.position)
        advertise_at = offset_address(advertise, worker.position)
        return [
            sys.executable, "-m", "mlms", "agent", *args,
            "--listen", listen_at,
            *(["--advertise", advertise_at] if advertise_at else []),
            "--address-file", str(worker.address_file),
        ]  # fmt: skip

    GpuAgents(chosen, command, grace=flags.grace, address_file=flags.address_file).run(
        signalled.wait
    )
