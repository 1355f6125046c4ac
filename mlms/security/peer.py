"""What a TLS peer proves: its certificate, fetched with a handshake of our own.

gRPC's Python client does not show the server's certificate to the caller, so before the
server accepts an agent from the registry it opens one TLS connection to the advertised
address with Python's ``ssl`` (the same CA and client certificate as its gRPC channels), which
checks the chain and that the certificate is for that address, and reads the roles it names.
"""

from __future__ import annotations

import socket
import ssl

from mlms.errors import PermissionDenied, Unavailable
from mlms.rpc.serving import split_address
from mlms.security.ca import roles_of
from mlms.security.tls import TlsFiles

#: Seconds for the connection and handshake: a registered agent that cannot answer that fast
#: is checked again on the registry's next change.
TIMEOUT_S = 3.0


def peer_roles(
    address: str, tls: TlsFiles, server_name: str | None = None, timeout: float = TIMEOUT_S
) -> frozenset[str]:
    """The fleet roles of the certificate served at ``address``, which must be valid for
    ``server_name`` (default: the address's host). ``PermissionDenied`` when the certificate
    does not verify; ``Unavailable`` when nothing answers."""
    host, port = split_address(address)
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cadata=tls.ca.decode() if tls.ca else None
    )
    if tls.cert_path and tls.key_path:
        context.load_cert_chain(tls.cert_path, tls.key_path)
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((host.strip("[]"), port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=server_name or host.strip("[]")) as wrapped,
        ):
            der = wrapped.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        raise PermissionDenied(
            f"the certificate at {address} does not verify: {exc.verify_message}"
        ) from None
    except (OSError, ssl.SSLError) as exc:
        raise Unavailable(f"no TLS handshake with {address}: {exc}") from None
    if der is None:
        raise PermissionDenied(f"{address} showed no certificate")
    return roles_of(ssl.DER_cert_to_PEM_cert(der).encode())


def require_role(address: str, tls: TlsFiles, role: str, server_name: str | None = None) -> None:
    roles = peer_roles(address, tls, server_name)
    if role not in roles:
        raise PermissionDenied(
            f"the certificate at {address} is not an mlms {role}'s: it names "
            f"{', '.join(sorted(roles)) or 'no mlms role'}"
        )
