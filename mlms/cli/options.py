"""Options and parsing shared by several commands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import click
from pydantic import BaseModel, ValidationError

from mlms.analysis.engine import Spans
from mlms.client import Client, EmbeddedClient
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRecord


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,8,32"`` -> [1, 8, 32]; anything else names the bad part."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise InvalidArgument(
                f"bad batch size {part!r} in {text!r}: expected positive integers like '1,8,32'"
            )
        sizes.append(int(part))
    return sizes


Model = TypeVar("Model", bound=BaseModel)


def validated(cls: type[Model], /, **fields: object) -> Model:
    """``cls(**fields)``, or one line naming the first bad field."""
    try:
        return cls(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidArgument(f"bad value for {field}: {first['msg']}") from None


def server_option(command):
    """``--server HOST:PORT`` (or MLMS_SERVER): talk to an mlms server instead of embedding."""
    return click.option(
        "--server",
        envvar="MLMS_SERVER",
        default=None,
        metavar="HOST:PORT",
        help="An mlms server; without it everything runs in this process.",
    )(command)


def store_option(command):
    """``--store URL`` (or MLMS_STORE): the object store; default: the local folder store."""
    return click.option(
        "--store",
        envvar="MLMS_STORE",
        default=None,
        help="s3://HOST:PORT/BUCKET or a folder; default: $MLMS_HOME/store.",
    )(command)


def client_for(server: str | None) -> Client:
    if server is None:
        return EmbeddedClient()
    from mlms.client import remote_client

    return remote_client(server)


def spans_for(client: Client, records: Sequence[EvaluationRecord]) -> Spans:
    """The span archives of ``records`` (those that have a trace), ready for the analyses."""
    return Spans.from_parquet([client.span_archive(r.trace_id) for r in records if r.trace_id])
