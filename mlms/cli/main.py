"""The ``mlms`` command: one click group; each command lives in its own module."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

import click

from mlms import __version__
from mlms.config import mlms_home
from mlms.errors import MlmsError
from mlms.library_errors import TRACEBACKS, log_traceback

#: Each command: where it is, and its line in ``mlms --help``. A command's module (and what it
#: imports) loads only when that command runs; the list of commands is read from here, so that
#: ``mlms --help`` loads none of them. A command's own ``--help`` shows its docstring.
COMMANDS: dict[str, tuple[str, str]] = {
    "advise": ("mlms.cli.advise:advise", "Recommend how to run a model, verified by evaluations."),
    "agent": ("mlms.cli.agent:agent", "Serve one framework here, registered in the fleet."),
    "agents": ("mlms.cli.agents:agents", "List the fleet's live agents."),
    "analyze": ("mlms.cli.analyze:analyze", "Tables of an evaluation: latency, layers, energy."),
    "assets": ("mlms.cli.assets:assets", "Build model assets into a store, or verify them."),
    "bound": ("mlms.cli.bound:bound", "Lower-bound a model's latency from its layers."),
    "certs": ("mlms.cli.security:certs", "Write a development CA and a certificate per role."),
    "compare": ("mlms.cli.compare:compare", "Evaluate a model on several frameworks, compared."),
    "datasets": ("mlms.cli.datasets:datasets", "List, add and remove the store's data sets."),
    "db": ("mlms.cli.database:db", "The evaluation index: its status, or rebuild it."),
    "eval": ("mlms.cli.evaluate:evaluate", "Evaluate a model: latency, throughput, accuracy."),
    "evals": ("mlms.cli.listing:evals", "List stored evaluations and those in flight."),
    "import": ("mlms.cli.import_trace:import_trace", "Import another profiler's trace."),
    "loadgen": ("mlms.cli.loadgen:loadgen", "Drive a model's predict path with MLPerf LoadGen."),
    "models": ("mlms.cli.models:models", "List the zoo and the added models; add or remove."),
    "report": ("mlms.cli.report:report", "Write an HTML report of evaluations."),
    "server": ("mlms.cli.server:server", "Serve the Evaluator API, routing to the agents."),
    "site": ("mlms.cli.site:site", "Write a static results site of a sweep."),
    "sweep": ("mlms.cli.sweep:sweep", "Evaluate every combination of models, frameworks, ..."),
    "token": ("mlms.cli.security:token", "Create, list and revoke bearer tokens."),
    "trace": ("mlms.cli.trace:trace", "Work with the span archive of evaluations."),
    "ui": ("mlms.ui.command:ui", "Serve the web UI."),
}


class _Commands(click.Group):
    """The commands of ``COMMANDS``, each imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, _, name = COMMANDS[cmd_name][0].partition(":")
        return getattr(importlib.import_module(module), name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in sorted(COMMANDS.items())])

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


class _LogFile(logging.FileHandler):
    """The command's log file, made when the first record comes (most commands write none)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, delay=True)
        self.used = False

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        self.used = True
        return super()._open()


def _log_tracebacks() -> _LogFile:
    """Tracebacks go to ``$MLMS_HOME/logs/mlms.log``, never to the terminal."""
    handler = _LogFile(mlms_home() / "logs" / "mlms.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s: %(message)s"))
    TRACEBACKS.addHandler(handler)
    TRACEBACKS.propagate = False
    return handler


def main() -> None:
    """Entry point: every error is one line on stderr, no traceback (that goes to the log
    file the line names): exit status 1 for what mlms refused, 2 for a command line it could
    not parse."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # torch.profiler's C++ start/stop chatter
    # TensorFlow's C++ info lines, for whichever process this one starts loads it (an asset
    # builder or exporter, a child agent), not only those that import it through
    # mlms.assets.keras_models, which says the same before its import.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # mlms uses no pydantic plugin; looking for them reads the metadata of every installed
    # distribution when the first model class is built (a tenth of a second at start-up).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    log_file = _log_tracebacks()
    try:
        cli.main(standalone_mode=False, prog_name="mlms")
    except MlmsError as exc:
        log_traceback(exc)
        click.echo(f"mlms: error: {exc}{_see(log_file)}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("mlms: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # a malformed command line: one line too, exit status 2
        command = exc.ctx.command_path if exc.ctx else "mlms"
        click.echo(f"mlms: error: {exc.format_message()} (see '{command} -h')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"mlms: error: {exc.format_message()}{_see(log_file)}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("mlms: interrupted", err=True)
        sys.exit(130)


def _see(log_file: _LogFile) -> str:
    return f" (traceback in {log_file.baseFilename})" if log_file.used else ""
