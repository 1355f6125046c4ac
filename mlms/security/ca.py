"""A development certificate authority, made with ``cryptography`` (never by hand).

``mlms certs DIR --host ...`` writes a CA and one certificate per fleet role into DIR; tests
make theirs the same way. Each certificate names its role in a URI subject-alternative name,
``spiffe://mlms/<role>`` (SPIFFE's form of a workload identity), which is how an agent proves
it is an agent and the server that it is the server; its host names and addresses are DNS and
IP SANs, which TLS checks against the address a peer was dialled at.

Production fleets use their own CA (cert-manager, Vault, a corporate PKI) issuing the same SANs.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mlms.errors import InvalidArgument

#: The roles a fleet certificate can carry.
ROLES = ("server", "agent", "client")
SPIFFE_PREFIX = "spiffe://mlms/"
#: Development certificates last a year; the CA ten.
CERT_DAYS = 365
CA_DAYS = 3650
_BOTH_ENDS = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


def role_uri(role: str) -> str:
    if role not in ROLES:
        raise InvalidArgument(f"unknown certificate role {role!r}: expected one of {ROLES}")
    return SPIFFE_PREFIX + role


def make_ca(name: str = "mlms development CA") -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Pem(_cert_pem(cert), _key_pem(key))


def issue(ca: Pem, role: str, hosts: list[str], name: str | None = None) -> Pem:
    """A certificate for ``role`` valid for ``hosts`` (names or IP addresses), signed by
    ``ca``; usable on both ends of a TLS connection (servers dial agents and answer users)."""
    uri = role_uri(role)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(uri)]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name or f"mlms {role}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(_BOTH_ENDS),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return Pem(_cert_pem(cert), _key_pem(key))


@functools.lru_cache(maxsize=256)  # an agent reads its caller's on every call
def roles_of(cert_pem: bytes) -> frozenset[str]:
    """The fleet roles a certificate carries (its ``spiffe://mlms/<role>`` SANs)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return frozenset(u.removeprefix(SPIFFE_PREFIX) for u in uris if u.startswith(SPIFFE_PREFIX))


def write_fleet_pki(folder: Path, hosts: list[str]) -> dict[str, Path]:
    """A CA and a certificate per role in ``folder``: ``ca.pem`` (with ``ca-key.pem``, kept
    apart from the fleet) and ``<role>.pem``/``<role>-key.pem``. Returns what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    ca = make_ca()
    written["ca"] = _write(folder / "ca.pem", ca.cert, private=False)
    written["ca-key"] = _write(folder / "ca-key.pem", ca.key, private=True)
    for role in ROLES:
        pem = issue(ca, role, hosts)
        written[role] = _write(folder / f"{role}.pem", pem.cert, private=False)
        written[f"{role}-key"] = _write(folder / f"{role}-key.pem", pem.key, private=True)
    return written


def _write(path: Path, data: bytes, *, private: bool) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
