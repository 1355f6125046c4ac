"""``mlms token`` (bearer tokens for the Evaluator API) and ``mlms certs`` (a development CA).

Tokens live in the object store the servers use (``--store``), so these commands run where
that store is reachable with write access: an operator's credential, not a user's.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from mlms.cli.common_options import store_option
from mlms.cli.files import writable, write_file
from mlms.cli.render import out, rows_table
from mlms.errors import InvalidArgument


def _tokens(store: str | None):
    from mlms.security.tokens import Tokens
    from mlms.store.factory import store_from_url

    return Tokens(store_from_url(store))


@click.group()
def token() -> None:
    """Create, list and revoke the bearer tokens servers accept."""


@token.command("create")
@click.option("--name", required=True, help="Who or what the token is for.")
@click.option(
    "--role",
    "roles",
    default="read",
    show_default=True,
    help="Comma-separated roles: read (list, get, spans, analyze), run (evaluate, predict), "
    "models (add and remove models).",
)
@click.option("--save", is_flag=True, help="Also write it to $MLMS_HOME/token (mode 0600).")
@store_option
def create(name: str, roles: str, save: bool, store: str | None) -> None:
    """Make a token; it is printed once and only its digest is kept."""
    from mlms.config import mlms_home
    from mlms.security.tokens import parse_roles

    entry, secret = _tokens(store).create(name, parse_roles(roles))
    if save:
        path = mlms_home() / "token"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, lambda staged: _write_private(staged, secret + "\n"))
        click.echo(f"token {entry.id} ({entry.name}, {','.join(entry.roles)}) saved to {path}",
                   err=True)  # fmt: skip
    click.echo(secret)


def _write_private(path: Path, text: str) -> None:
    """Created readable by its owner only, never briefly by others."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(text)


@token.command("list")
@store_option
def list_tokens(store: str | None) -> None:
    """The tokens (never their secrets), revoked ones included."""
    rows = [
        {
            "id": t.id,
            "name": t.name,
            "roles": ",".join(t.roles),
            "created": t.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "revoked": t.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if t.revoked_at else "",
        }
        for t in _tokens(store).list()
    ]
    if not rows:
        out.print("no tokens ('mlms token create --name NAME --role read,run')")
        return
    out.print(rows_table(rows, "tokens"))


@token.command("revoke")
@click.argument("id_or_name")
@store_option
def revoke(id_or_name: str, store: str | None) -> None:
    """Revoke a token by id (or by name, when one active token has it)."""
    revoked = _tokens(store).revoke(id_or_name)
    click.echo(f"revoked token {revoked.id} ({revoked.name})")


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--host",
    "hosts",
    multiple=True,
    default=("localhost", "127.0.0.1"),
    show_default=True,
    help="A name or address the certificates are valid for (repeat for each).",
)
def certs(folder: Path, hosts: tuple[str, ...]) -> None:
    """Write a development CA and a certificate per role (server, agent, client) to FOLDER."""
    from mlms.security.ca import write_fleet_pki

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(f"cannot write {folder}: {exc.strerror}") from None
    writable(folder / "ca.pem")
    written = write_fleet_pki(folder, list(hosts))
    for name, path in written.items():
        click.echo(f"{name:12s} {path}")
    click.echo(f"valid for {', '.join(hosts)}; keep ca-key.pem away from the fleet", err=True)
