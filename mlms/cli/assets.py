"""``mlms assets``: build (or verify) model assets in a store ahead of the agents that load them.

Every framework's artifact is exported from the torch weights, so an environment without torch
(the MXNet agent's image and virtualenv) cannot build its own: a fleet runs this once from an
environment with torch into the shared store, before its MXNet agents start.
"""

from __future__ import annotations

import click

from mlms.cli.common_options import store_option
from mlms.cli.render import out, rows_table
from mlms.errors import UnsupportedFramework
from mlms.frameworks import FRAMEWORKS


@click.command()
@click.option(
    "--framework",
    "-f",
    "frameworks",
    multiple=True,
    required=True,
    type=click.Choice(FRAMEWORKS),
    help="Framework whose assets to build (repeatable).",
)
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    help="Zoo model (repeatable); default: every model that supports the framework.",
)
@store_option
def assets(frameworks: tuple[str, ...], models: tuple[str, ...], store: str | None) -> None:
    """Build model assets into a store, or verify the ones already there."""
    from mlms.assets.manager import AssetManager
    from mlms.catalog.resolve import all_models, resolve_model
    from mlms.config import mlms_home
    from mlms.store.factory import store_from_url

    target = store_from_url(store)
    manager = AssetManager(target, mlms_home() / "cache")
    manifests = [resolve_model(name, target) for name in models] or all_models(target)
    rows = []
    for framework in frameworks:
        for manifest in manifests:
            if framework not in manifest.framework_names:
                if models:  # asked for by name: say so instead of skipping it
                    raise UnsupportedFramework(
                        f"model {manifest.name!r} does not support framework {framework!r}; "
                        f"it supports {', '.join(manifest.framework_names)}"
                    )
                continue
            asset = manager.ensure(manifest, framework)
            rows.append(
                {
                    "model": manifest.name,
                    "version": manifest.version,
                    "framework": framework,
                    "sha256": asset.sha256[:16],
                    "MB": round(asset.size / 1e6, 1),
                }
            )
    out.print(rows_table(rows, f"assets in {target.url}"))
