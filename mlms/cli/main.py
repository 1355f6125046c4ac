"""The ``mlms`` command: one click group; each command lives in its own module."""

from __future__ import annotations

import importlib
import os
import sys

import click

from mlms import __version__
from mlms.errors import MlmsError

#: Each command and where it is: a command's module (and what it imports) loads only when that
#: command runs, or when the help lists them all.
COMMANDS = {
    "agent": "mlms.cli.agent:agent",
    "advise": "mlms.cli.advise:advise",
    "agents": "mlms.cli.agents:agents",
    "analyze": "mlms.cli.analyze:analyze",
    "assets": "mlms.cli.assets:assets",
    "bound": "mlms.cli.bound:bound",
    "certs": "mlms.cli.security:certs",
    "compare": "mlms.cli.compare:compare",
    "datasets": "mlms.cli.datasets:datasets",
    "db": "mlms.cli.database:db",
    "eval": "mlms.cli.evaluate:evaluate",
    "evals": "mlms.cli.listing:evals",
    "import": "mlms.cli.import_trace:import_trace",
    "loadgen": "mlms.cli.loadgen:loadgen",
    "models": "mlms.cli.models:models",
    "report": "mlms.cli.report:report",
    "server": "mlms.cli.agent:server",
    "site": "mlms.cli.site:site",
    "sweep": "mlms.cli.sweep:sweep",
    "token": "mlms.cli.security:token",
    "trace": "mlms.cli.trace:trace",
    "ui": "mlms.ui.command:ui",
}


class _Commands(click.Group):
    """The commands of ``COMMANDS``, each imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, _, name = where.partition(":")
        return getattr(importlib.import_module(module), name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            # click suggests among the commands added to the group, which are none here.
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=COMMANDS, ctx=ctx
            ) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlms")
def cli() -> None:
    """Evaluate and profile machine-learning models across frameworks and hardware."""


def main() -> None:
    """Entry point: every error is one line on stderr, no traceback: exit status 1 for what
    mlms refused, 2 for a command line it could not parse."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # torch.profiler's C++ start/stop chatter
    # mlms uses no pydantic plugin; looking for them reads the metadata of every installed
    # distribution when the first model class is built (a tenth of a second at start-up).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        cli.main(standalone_mode=False, prog_name="mlms")
    except MlmsError as exc:
        click.echo(f"mlms: error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("mlms: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # a malformed command line: one line too, exit status 2
        command = exc.ctx.command_path if exc.ctx else "mlms"
        click.echo(f"mlms: error: {exc.format_message()} (see '{command} -h')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"mlms: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("mlms: interrupted", err=True)
        sys.exit(130)
