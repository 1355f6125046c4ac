"""``mlms ui``: serve the web app, over the embedded platform or an ``mlms server``."""

from __future__ import annotations

import os
import socket

import click

from mlms.errors import InvalidArgument


@click.command("ui")
@click.option(
    "--server",
    envvar="MLMS_SERVER",
    default=None,
    metavar="HOST:PORT[,...]",
    help="An mlms server, or several of one fleet separated by commas (the next is used when "
    "one is down); without it everything runs in this process.",
)
@click.option(
    "--listen",
    envvar="MLMS_UI_LISTEN",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve the pages; off loopback only with TLS or --insecure.",
)
@click.option(
    "--jaeger",
    envvar="MLMS_JAEGER_URL",
    default=None,
    metavar="URL",
    help="Jaeger's UI, to link traces; default: port 16686 of MLMS_OTLP_ENDPOINT's host.",
)
@click.option("--tls-ca", envvar="MLMS_TLS_CA", metavar="PEM",
              help="CA to verify the server with; default: the system's.")  # fmt: skip
@click.option("--tls-cert", envvar="MLMS_TLS_CERT", metavar="PEM",
              help="Certificate to serve HTTPS with; with --tls-ca also shown to a server "
                   "that asks for one.")  # fmt: skip
@click.option("--tls-key", envvar="MLMS_TLS_KEY", metavar="PEM", help="The certificate's key.")
@click.option("--insecure", envvar="MLMS_INSECURE", is_flag=True, default=False,
              help="Plaintext even off loopback, to browsers and to the server.")  # fmt: skip
def ui(
    server: str | None,
    listen: str,
    jaeger: str | None,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
) -> None:
    """Serve the web UI: fleet, zoo, evaluations, reports, comparisons and a form to run one.

    When the server needs a token, each visitor logs in with one; it stays in this process."""
    import uvicorn

    from mlms.remote_client import server_addresses
    from mlms.rpc.serving import split_address
    from mlms.security.tls import TlsFiles, check_plaintext_allowed
    from mlms.ui.app import create_app
    from mlms.ui.config import UiConfig, jaeger_from_otlp

    host, port = split_address(listen)
    tls = TlsFiles.load(tls_ca, tls_cert, tls_key)
    check_plaintext_allowed("mlms ui", listen, tls, insecure)
    if server is not None:
        server_addresses(server)
    config = UiConfig(
        server=server,
        tls=tls,
        insecure=insecure,
        jaeger_url=jaeger or jaeger_from_otlp(os.environ.get("MLMS_OTLP_ENDPOINT")),
    )
    sock = bind(host, port)
    scheme = "https" if tls.cert else "http"
    bound = sock.getsockname()[1]
    where = f"the server at {server}" if server else "the embedded platform"
    click.echo(f"mlms ui: serving {where} on {scheme}://{listen.rpartition(':')[0]}:{bound}/",
               err=True)  # fmt: skip
    uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            ssl_certfile=tls.cert_path,
            ssl_keyfile=tls.key_path,
            log_level="warning",
            # A live page's polling or a report still building must not hold Ctrl-C for long.
            timeout_graceful_shutdown=5,
        )
    ).run(sockets=[sock])


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one), or one line saying why
    not."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it
    # a small answer on a kept-alive connection waits ~40 ms for the peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bare, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock
