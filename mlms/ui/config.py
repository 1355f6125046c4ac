"""What ``mlms ui`` was started with."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mlms.security.tls import TlsFiles

#: Jaeger's query UI listens here beside its OTLP receiver (the deploy/ manifests' jaeger).
JAEGER_UI_PORT = 16686


@dataclass(frozen=True)
class UiConfig:
    #: An mlms server's HOST:PORT, or several of one fleet separated by commas (tried in
    #: turn); None: the embedded platform in this process.
    server: str | None = None
    #: CA, and certificate for the server when it asks; the certificate also serves HTTPS.
    tls: TlsFiles = field(default_factory=TlsFiles)
    insecure: bool = False
    #: Where Jaeger's UI is, to link an evaluation's trace; None: no link.
    jaeger_url: str | None = None

    @property
    def secure_cookies(self) -> bool:
        return self.tls.cert is not None


def jaeger_from_otlp(endpoint: str | None) -> str | None:
    """Jaeger's UI beside an OTLP endpoint (``http://jaeger:4317`` -> ``http://jaeger:16686``):
    the deployment runs both in one Jaeger."""
    if not endpoint:
        return None
    parts = urlsplit(endpoint if "//" in endpoint else f"http://{endpoint}")
    if not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"http://{host}:{JAEGER_UI_PORT}"
