"""Options and parsing shared by several commands."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click

from mlms.client import Client, EmbeddedClient
from mlms.errors import InvalidArgument

if TYPE_CHECKING:
    from mlms.analysis.engine import Spans
    from mlms.evaluation.record import EvaluationRecord

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: Where the connection options are kept in the click context (``ctx.meta``).
_CONNECTION = "mlms.connection"


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta.setdefault(_CONNECTION, {})[param.name] = value
    return value


def connection_options(command):
    """``--token``, ``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--insecure`` (each also
    an ``MLMS_*`` variable): how to reach a server. They are kept for ``connect`` rather than
    passed to the command."""
    kept = {"expose_value": False, "callback": _remember}
    options = [
        click.option("--token", envvar="MLMS_TOKEN", metavar="TOKEN", **kept,
                     help="Bearer token; default: MLMS_TOKEN, else the file $MLMS_HOME/token."),
        *tls_options(
            ca="CA to verify the server with; default: the system's (TLS is used unless the "
               "server is on loopback and no CA is given).",
            cert="Client certificate, for servers that ask for one.",
            key="The client certificate's key.",
            insecure="Plaintext even off loopback (no token is sent then).",
            **kept,
        ),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def tls_options(*, ca: str, cert: str, key: str, insecure: str, **settings: object) -> list:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--insecure``, each also an ``MLMS_*``
    variable, with the help for the command's side of the connection."""
    return [
        click.option("--tls-ca", envvar="MLMS_TLS_CA", metavar="PEM", help=ca, **settings),
        click.option("--tls-cert", envvar="MLMS_TLS_CERT", metavar="PEM", help=cert, **settings),
        click.option("--tls-key", envvar="MLMS_TLS_KEY", metavar="PEM", help=key, **settings),
        click.option("--insecure", envvar="MLMS_INSECURE", is_flag=True, default=False,
                     help=insecure, **settings),
    ]  # fmt: skip


def server_option(command):
    """``--server HOST:PORT[,HOST:PORT...]`` (or MLMS_SERVER): talk to an mlms server (or the
    servers of one fleet, the next taking over when one is down) instead of embedding; with the
    connection options."""
    command = connection_options(command)
    return click.option(
        "--server",
        envvar="MLMS_SERVER",
        default=None,
        metavar="HOST:PORT[,...]",
        help="An mlms server, or several of one fleet separated by commas (the next is used "
        "when one is down); without it everything runs in this process.",
    )(command)


def connect(server: str):  # -> RemoteClient; imported lazily so the CLI starts fast
    """A client of the server(s) at ``server`` with this command's connection options."""
    from mlms.remote_client import RemoteClient
    from mlms.security.tls import TlsFiles

    given = click.get_current_context().meta.get(_CONNECTION, {})
    return RemoteClient(
        server,
        tls=TlsFiles.load(given.get("tls_ca"), given.get("tls_cert"), given.get("tls_key")),
        insecure=bool(given.get("insecure")),
        token=given.get("token") or saved_token(),
    )


def saved_token() -> str | None:
    """The token in ``$MLMS_HOME/token`` (written by ``mlms token create --save``)."""
    from mlms.config import mlms_home

    path = mlms_home() / "token"
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidArgument(f"cannot read the token file {path}: {exc.strerror}") from None


def store_option(command):
    """``--store URL`` (or MLMS_STORE): the object store; default: the local folder store."""
    return click.option(
        "--store",
        envvar="MLMS_STORE",
        default=None,
        help="s3://HOST:PORT/BUCKET or a folder; default: $MLMS_HOME/store.",
    )(command)


def client_for(server: str | None) -> Client:
    return EmbeddedClient() if server is None else connect(server)


def spans_for(client: Client, records: Sequence[EvaluationRecord]) -> Spans:
    """The span archives of ``records`` (those that have a trace), ready for the analyses."""
    from mlms.analysis.engine import Spans

    return Spans.from_parquet([client.span_archive(r.trace_id) for r in records if r.trace_id])


def without_collector(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a short command with the cyclic garbage collector off: the pandas, pyarrow, DuckDB
    and pydantic it loads make a few hundred thousand objects, whose collections (0.07-0.1 s
    of ``mlms import kineto`` or ``mlms analyze``) find a thousand objects of garbage; the
    command's own data are Arrow buffers, not cycles. Back on after, for a caller in-process."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():
            return command(*args, **kwargs)
        gc.disable()
        try:
            return command(*args, **kwargs)
        finally:
            # What the command made goes to the oldest generation: the collector back on would
            # otherwise walk all of it in its next young collection.
            gc.freeze()
            gc.unfreeze()
            gc.enable()

    return run
