"""``mlms server``: the Evaluator API, routing evaluations and predicts to the fleet's agents
(flags and settings as for the agent: ``mlms.cli.fleet``)."""

from __future__ import annotations

import click

from mlms.cli.fleet import (
    ProcessFlags,
    check_writable_folder,
    database_option,
    log_to_stderr,
    process_options,
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
@database_option(
    "The evaluation index, the same for every server of the fleet: "
    "postgresql://USER@HOST:PORT/NAME, or sqlite:///PATH for one server; default: SQLite "
    "under $MLMS_HOME."
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
@click.option(
    "--max-calls",
    envvar="MLMS_MAX_CALLS",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Unary calls (listings, records, predicts) run at once by each server process.",
)
@click.option(
    "--max-queued",
    envvar="MLMS_MAX_QUEUED",
    default=128,
    show_default=True,
    type=click.IntRange(min=0),
    help="Unary calls that wait for one of those; more are refused RESOURCE_EXHAUSTED with when "
    "to retry.",
)
@click.option(
    "--max-streams",
    envvar="MLMS_MAX_STREAMS",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Streaming calls (evaluations, sweeps, uploads) held open at once; more are refused "
    "the same way.",
)
@click.option(
    "--quota",
    envvar="MLMS_QUOTA",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Calls a second each caller (token, else host) may make on average; 0: no quota.",
)
@click.option(
    "--token-quota",
    "token_quotas",
    multiple=True,
    metavar="NAME=RATE",
    help="A token's own quota in calls a second, instead of --quota; repeat for each token.",
)
@click.option(
    "--workers",
    envvar="MLMS_SERVER_WORKERS",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    help="Server processes sharing the port (SO_REUSEPORT): one per core the server may use.",
)
@process_options("127.0.0.1:50051")
def server(
    flags: ProcessFlags,
    max_calls: int,
    max_queued: int,
    max_streams: int,
    quota: float,
    token_quotas: tuple[str, ...],
    workers: int,
    database: str | None,
    record_cache: int,
    listing_cache: int,
    agent_tls_name: str | None,
    auth: bool | None,
) -> None:
    """Serve the Evaluator API: route evaluations and predicts to the fleet's agents."""
    if flags.address_file is not None:
        check_writable_folder(flags.address_file)
    from mlms.rpc.serving import StopSignal
    from mlms.server.backpressure import Limits, parse_token_quota
    from mlms.server.process import ServerConfig, serve

    limits = Limits(
        max_calls=max_calls,
        max_queued=max_queued,
        max_streams=max_streams,
        quota=quota,
        token_quotas=dict(parse_token_quota(text) for text in token_quotas),
    )

    log_to_stderr()
    signalled = StopSignal()
    config = ServerConfig(
        auth=auth,
        agent_tls_name=agent_tls_name,
        database=database,
        record_cache=record_cache,
        listing_cache=listing_cache,
        limits=limits,
        **flags.settings(),
    )
    if workers > 1:
        from mlms.server import workers as server_workers

        server_workers.serve(config, workers, signalled.wait)
    else:
        serve(config, signalled)
