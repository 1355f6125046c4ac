"""``mlms agents``: the live agents a server sees (address, framework, hardware, load)."""

from __future__ import annotations

import click

from mlms.cli.common_options import connect, connection_options
from mlms.cli.render import out, rows_table


@click.command()
@click.option(
    "--server",
    envvar="MLMS_SERVER",
    required=True,
    metavar="HOST:PORT[,...]",
    help="The mlms server whose fleet to list, or several of the fleet (the next is used "
    "when one is down).",
)
@connection_options
def agents(server: str) -> None:
    """List the fleet's live agents."""
    with connect(server) as client:
        fleet = client.list_agents()
    if not fleet:
        out.print(f"no live agents registered with the server at {server}")
        return
    rows = [
        {
            "id": a.id,
            "address": a.address,
            "framework": f"{a.framework} {a.framework_version}",
            "hardware": ", ".join(a.hardware.aliases()),
            "cpu": f"{a.hardware.cpu_brand} ({a.hardware.cpu_cores_logical} cores)",
            # Each GPU it evaluates on: index, name and UUID.
            "gpus": "\n".join(g.label + (f" ({g.uuid})" if g.uuid else "") for g in a.usable_gpus())
            or "-",
            "models": len(a.models),
            "in flight": a.in_flight,
        }
        for a in fleet
    ]
    out.print(rows_table(rows, f"agents of {server}"))
