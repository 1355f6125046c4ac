"""A fleet's store gets its model assets from the session's store: copied, not built again.

The session's store keeps each built asset once for all the workers of a run
(``tests/conftest.py``); a fleet with a store of its own (S3) would otherwise train or export
the same model again before its agents start.
"""

from __future__ import annotations

from mlms.assets.keys import asset_prefix
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.config import mlms_home
from mlms.store.base import ObjectStore


def copy_asset(source: ObjectStore, target: ObjectStore, model: str, framework: str) -> None:
    """``model``'s asset for ``framework`` as ``source`` has it (built there first when
    missing), put into ``target`` as the asset builder stores one."""
    manifest = get_model(model)
    asset = AssetManager(source, mlms_home() / "cache").ensure(manifest, framework)
    prefix = asset_prefix(manifest, framework)
    target.put_file(f"{prefix}/{asset.path.name}", asset.path)
    # asset.json last: its presence says the asset is complete.
    target.put_bytes(f"{prefix}/asset.json", source.get_bytes(f"{prefix}/asset.json"))
