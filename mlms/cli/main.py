"""The ``mlms`` command: one click group; each command lives in its own module."""

from __future__ import annotations

import os
import sys

import click

from mlms import __version__
from mlms.cli.advise import advise
from mlms.cli.agent import agent, server
from mlms.cli.agents import agents
from mlms.cli.analyze import analyze
from mlms.cli.assets import assets
from mlms.cli.bound import bound
from mlms.cli.compare import compare
from mlms.cli.database import db
from mlms.cli.datasets import datasets
from mlms.cli.evaluate import evaluate
from mlms.cli.import_trace import import_trace
from mlms.cli.listing import evals
from mlms.cli.loadgen import loadgen
from mlms.cli.models import models
from mlms.cli.report import report
from mlms.cli.security import certs, token
from mlms.cli.site import site
from mlms.cli.sweep import sweep
from mlms.cli.trace import trace
from mlms.errors import MlmsError
from mlms.ui.command import ui


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlms")
def cli() -> None:
    """Evaluate and profile machine-learning models across frameworks and hardware."""


cli.add_command(evaluate)
cli.add_command(models)
cli.add_command(evals)
cli.add_command(analyze)
cli.add_command(bound)
cli.add_command(advise)
cli.add_command(compare)
cli.add_command(sweep)
cli.add_command(trace)
cli.add_command(agent)
cli.add_command(server)
cli.add_command(agents)
cli.add_command(assets)
cli.add_command(report)
cli.add_command(site)
cli.add_command(import_trace)
cli.add_command(token)
cli.add_command(certs)
cli.add_command(ui)
cli.add_command(loadgen)
cli.add_command(datasets)
cli.add_command(db)


def main() -> None:
    """Entry point: every error is one line on stderr, no traceback: exit status 1 for what
    mlms refused, 2 for a command line it could not parse."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # torch.profiler's C++ start/stop chatter
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
