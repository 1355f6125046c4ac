"""TLS for every gRPC port: which files, which credentials, and when plaintext is allowed.

A process is given a CA, a certificate and its key (``--tls-ca``, ``--tls-cert``,
``--tls-key`` or ``MLMS_TLS_CA``, ``MLMS_TLS_CERT``, ``MLMS_TLS_KEY``). Servers and agents
serve TLS with their certificate; an agent also demands a client certificate from the CA
(mutual TLS: only the fleet's servers may call it), and the server dials agents with its own.

Plaintext is allowed only where nobody else can listen in: every listen address on loopback,
or when asked for with ``--insecure``. Otherwise starting is refused with one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from mlms.client_tls import is_loopback, pem_file
from mlms.errors import InvalidArgument
from mlms.security.bearer import BearerToken

ENV = {"ca": "MLMS_TLS_CA", "cert": "MLMS_TLS_CERT", "key": "MLMS_TLS_KEY"}


@dataclass(frozen=True)
class TlsFiles:
    """PEM bytes read once at start (a missing or unreadable file is an error then, not at
    the first call)."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    #: Where the certificate and key came from (Python's ssl module loads chains from files).
    cert_path: str | None = None
    key_path: str | None = None

    @property
    def enabled(self) -> bool:
        return self.ca is not None or self.cert is not None

    @classmethod
    def load(
        cls, ca: str | None = None, cert: str | None = None, key: str | None = None
    ) -> TlsFiles:
        """From paths (``None``: the ``MLMS_TLS_*`` variable, if set). A certificate needs
        its key and a key its certificate."""
        paths = {
            name: given or os.environ.get(ENV[name]) or None
            for name, given in (("ca", ca), ("cert", cert), ("key", key))
        }
        if bool(paths["cert"]) != bool(paths["key"]):
            given, missing = ("cert", "key") if paths["cert"] else ("key", "cert")
            raise InvalidArgument(
                f"--tls-{given} {paths[given]!r} needs --tls-{missing} ({ENV[missing]}) too"
            )
        return cls(
            **{name: _read(name, path) for name, path in paths.items()},
            cert_path=paths["cert"],
            key_path=paths["key"],
        )

    def require_server_files(self, what: str) -> None:
        if self.cert is None:
            raise InvalidArgument(
                f"{what} needs --tls-cert and --tls-key (MLMS_TLS_CERT, MLMS_TLS_KEY) to serve TLS"
            )

    def server_credentials(self, *, require_client_cert: bool) -> grpc.ServerCredentials:
        assert self.cert is not None and self.key is not None, "require_server_files() first"
        if require_client_cert and self.ca is None:
            raise InvalidArgument(
                "mutual TLS needs --tls-ca (MLMS_TLS_CA), the CA of the fleet's certificates"
            )
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.ca,
            require_client_auth=require_client_cert,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The CA to trust (the system's when none is given) and this process's certificate,
        shown to servers that ask for one."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def _read(name: str, path: str | None) -> bytes | None:
    return None if path is None else Path(pem_file(f"--tls-{name}", path)).read_bytes()


def check_plaintext_allowed(what: str, listen: str, tls: TlsFiles, insecure: bool) -> None:
    """Refuse to serve plaintext on an address others can reach, unless asked to."""
    host = listen.rpartition(":")[0]
    if tls.cert is not None or insecure or is_loopback(host):
        return
    raise InvalidArgument(
        f"{what} would serve plaintext on {listen}, which is not a loopback address: give "
        "--tls-cert and --tls-key (MLMS_TLS_CERT, MLMS_TLS_KEY), or --insecure to accept it"
    )


def open_channel(
    address: str,
    tls: TlsFiles,
    *,
    insecure: bool,
    options: list,
    token: str | None = None,
    server_name: str | None = None,
) -> grpc.Channel:
    """A channel to ``address``: TLS unless the peer is on loopback with no CA given, or
    plaintext was asked for. A bearer ``token`` rides on every call, and is never sent in
    plaintext off loopback. ``server_name``: the name the peer's certificate must carry
    instead of the address's host (pods dialled by IP, with one certificate for the role)."""
    host = address.rpartition(":")[0]
    loopback = is_loopback(host)
    if insecure or (not tls.enabled and loopback):
        if token is not None and not loopback:
            raise InvalidArgument(
                f"a token is sent over TLS only, and {address} is reached in plaintext "
                "(--insecure): give --tls-ca (MLMS_TLS_CA) instead"
            )
        channel = grpc.insecure_channel(address, options=options)
    else:
        if server_name:
            options = [*options, ("grpc.ssl_target_name_override", server_name)]
        channel = grpc.secure_channel(address, tls.channel_credentials(), options=options)
    return channel if token is None else grpc.intercept_channel(channel, BearerToken(token))
