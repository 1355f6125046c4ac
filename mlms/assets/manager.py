"""Model assets in the object store: built locally or downloaded once, always sha256-verified.

Layout (docs/DESIGN.md, "Object store layout"): ``models/<name>/<version>/<framework>/<file>``
beside ``asset.json``, which records the file's name, size and sha256. Every load hashes the
bytes again and refuses a mismatch. A manifest's URL source carries its own sha256; the
download is checked against it before anything is stored.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlms.assets.architectures import build, with_weights
from mlms.assets.exporters import EXPORTERS
from mlms.assets.formats import listing_sha256, open_artifact
from mlms.assets.keys import ASSET_INFO, asset_key, asset_prefix, info_key
from mlms.errors import AssetError, ChecksumMismatch, UnsupportedFramework
from mlms.frameworks import asset_framework
from mlms.isolation import call_in_own_process
from mlms.library_errors import calling
from mlms.manifest import BuildSource, FileSource, ModelManifest, UrlSource
from mlms.store.base import ObjectStore
from mlms.store.local import LocalStore

CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    """A verified artifact on local disk."""

    model: str
    version: str
    framework: str
    path: Path
    sha256: str
    size: int
    source: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class AssetManager:
    """Finds, builds or downloads assets; ``cache_dir`` holds local copies of remote objects."""

    def __init__(self, store: ObjectStore, cache_dir: Path) -> None:
        self.store = store
        self.cache_dir = Path(cache_dir)

    def ensure(self, manifest: ModelManifest, framework: str) -> Asset:
        """The verified asset of ``manifest`` for ``framework``, creating it on first use (a
        framework that runs another's asset, such as jax the Keras file, gets that one)."""
        framework = asset_framework(framework)
        original = manifest.file_source
        if original is not None and original.path:
            return self._in_place(manifest, framework, original)
        prefix = asset_prefix(manifest, framework)
        if not self.store.exists(info_key(prefix)):
            with _building(self.store, prefix):
                # Another process sharing the store may have made it while this one waited.
                if not self.store.exists(info_key(prefix)):
                    self._make(manifest, framework)
        return self.load(manifest, framework)

    def _make(self, manifest: ModelManifest, framework: str) -> None:
        """Download, export or build the asset of ``manifest`` for ``framework``."""
        source = manifest.source_for(framework)
        if isinstance(source, UrlSource):
            self._download(manifest, source)
        elif isinstance(source, FileSource):
            if source.framework == framework:
                raise AssetError(
                    f"model {manifest.name!r} version {manifest.version}: its artifact is "
                    f"missing from {self.store.url} ({asset_prefix(manifest, framework)}); "
                    "add it again with 'mlms models add ... --replace'"
                )
            made = self._export_file(
                manifest, framework, self.ensure(manifest, source.framework).path
            )
            with made as (folder, name):
                self._store(manifest, framework, folder / name, f"export:{source.format}")
        else:
            self._build(manifest, framework, source)

    def _in_place(self, manifest: ModelManifest, framework: str, source: FileSource) -> Asset:
        """A model read where it lies (a file, a Hub folder): checked against the sha256 it
        was read with; another framework's artifact is exported once into the cache."""
        path = Path(source.path)
        actual = open_artifact(path).sha256
        if actual != source.sha256:
            raise ChecksumMismatch(
                f"model file {source.path!r} changed since it was read: expected sha256 "
                f"{source.sha256}, got {actual}"
            )
        if framework == source.framework:
            return Asset(manifest.name, manifest.version, framework, path, actual, source.size,
                         f"file:{source.path}")  # fmt: skip
        target = self.cache_dir / "exports" / source.sha256 / framework
        done = target / ASSET_INFO
        if not done.is_file():
            with self._export_file(manifest, framework, path) as (folder, name):
                target.mkdir(parents=True, exist_ok=True)
                (folder / name).replace(target / name)
                done.write_text(json.dumps({"file": name}))
        name = json.loads(done.read_text())["file"]
        exported = target / name
        return Asset(manifest.name, manifest.version, framework, exported, sha256_of(exported),
                     exported.stat().st_size, f"export:{source.format}")  # fmt: skip

    @contextlib.contextmanager
    def _export_file(self, manifest: ModelManifest, framework: str, path: Path):
        """A temporary folder and the name of ``framework``'s artifact exported there from the
        user's artifact at ``path`` (a Hugging Face folder to ONNX: torch.onnx's exporter), in
        a process of its own."""
        if framework not in EXPORTERS:
            raise UnsupportedFramework(f"no exporter builds {framework!r} artifacts")
        with tempfile.TemporaryDirectory() as tmp:
            name = call_in_own_process(
                calling,
                f"{manifest.name} on {framework}",
                export_file_artifact,
                manifest,
                framework,
                path,
                Path(tmp),
                what=f"the {framework} exporter of {manifest.name!r}",
                error=AssetError,
            )
            yield Path(tmp), name

    def load(self, manifest: ModelManifest, framework: str) -> Asset:
        prefix = asset_prefix(manifest, framework)
        info = json.loads(self.store.get_bytes(info_key(prefix)))
        key = asset_key(prefix, info["file"])
        if "files" in info:
            path = self._folder(key, info)
            actual = listing_sha256({n: sha256_of(path / n) for n in info["files"]})
        elif isinstance(self.store, LocalStore):
            path = self.store.path_of(key)
            actual = sha256_of(path)
        else:
            path = self.cache_dir / key
            if not path.is_file() or sha256_of(path) != info["sha256"]:
                self.store.get_file(key, path)
            actual = sha256_of(path)
        if actual != info["sha256"]:
            raise ChecksumMismatch(
                f"checksum mismatch for {key} in {self.store.url}: expected sha256 "
                f"{info['sha256']}, got {actual}; delete the object to rebuild it"
            )
        return Asset(
            manifest.name, manifest.version, framework, path, actual, info["size"], info["source"]
        )

    def _folder(self, key: str, info: dict) -> Path:
        """A folder artifact on local disk: in place in a local store, else each file fetched
        into the cache where missing or different."""
        if isinstance(self.store, LocalStore):
            return self.store.path_of(key)
        folder = self.cache_dir / key
        for name, digest in info["files"].items():
            local = folder / name
            if not local.is_file() or sha256_of(local) != digest:
                self.store.get_file(asset_key(key, name), local)
        return folder

    def _store(self, manifest: ModelManifest, framework: str, path: Path, source: str) -> None:
        """Put the file at ``path`` (one this manager made: built, exported or downloaded into
        a temporary folder, and moved, not copied, into a local store) as the asset."""
        prefix = asset_prefix(manifest, framework)
        info = {
            "file": path.name,
            "sha256": sha256_of(path),
            "size": path.stat().st_size,
            "source": source,
        }
        self.store.put_file(asset_key(prefix, path.name), path, move=True)
        # asset.json last: its presence says the asset is complete.
        self.store.put_bytes(info_key(prefix), json.dumps(info, indent=1).encode())

    def _build(self, manifest: ModelManifest, framework: str, source: BuildSource) -> None:
        """Export ``framework``'s artifact from the canonical torch weights, in a process of its
        own: an exporter loads its framework (TensorFlow, or torch.export's compiler stack),
        which must not land in the caller's process (``mlms.isolation``)."""
        if framework not in EXPORTERS:
            raise UnsupportedFramework(
                f"no exporter builds {framework!r} assets; expected one of: "
                f"{', '.join(sorted(EXPORTERS))}"
            )
        _require_torch(manifest)
        origin = f"build:{source.builder}"
        if framework == "torch":
            with tempfile.TemporaryDirectory() as tmp:
                name = self._in_builder(export_artifact, manifest, framework, None, Path(tmp))
                self._store(manifest, framework, Path(tmp) / name, origin)
            return
        if isinstance(manifest.source_for("torch"), UrlSource):
            raise AssetError(
                f"model {manifest.name!r}: exporting from a downloaded torch "
                "asset is not supported; give each framework its own URL"
            )
        torch_prefix = asset_prefix(manifest, "torch")
        with _building(self.store, torch_prefix), tempfile.TemporaryDirectory() as tmp:
            if self.store.exists(info_key(torch_prefix)):
                weights = self.load(manifest, "torch").path
                name = self._in_builder(export_artifact, manifest, framework, weights, Path(tmp))
            else:
                # The torch weights are missing too: one builder makes them and exports from
                # the very module it built (an interpreter and a weight initialisation saved).
                torch_name, name = self._in_builder(
                    build_and_export, manifest, framework, Path(tmp)
                )
                self._store(manifest, "torch", Path(tmp) / "torch" / torch_name, origin)
                name = f"{framework}/{name}"
            self._store(manifest, framework, Path(tmp) / name, origin)

    def _in_builder(self, function: Any, manifest: ModelManifest, framework: str, *args: Any):
        """``function(manifest, framework, *args)`` in the asset builder's own process."""
        return call_in_own_process(
            calling,
            f"{manifest.name} on {framework}",
            function,
            manifest,
            framework,
            *args,
            what=f"the {framework} asset builder of {manifest.name!r}",
            error=AssetError,
        )

    def canonical_module(self, manifest: ModelManifest) -> Any:
        """The torch module whose weights every framework's artifact is exported from: the
        torch asset's weights (built first where missing: seeded, or trained for digits), so
        that all frameworks share the very same weights. Loads torch into this process."""
        _require_torch(manifest)
        return canonical_module(manifest, self.ensure(manifest, "torch").path)

    def _download(self, manifest: ModelManifest, source: UrlSource) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / source.filename
            digest = hashlib.sha256()
            try:
                with contextlib.closing(urllib.request.urlopen(source.url, timeout=60)) as reply:
                    with open(path, "wb") as out:
                        while chunk := reply.read(CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise AssetError(f"cannot download {source.url}: {exc}") from exc
            if digest.hexdigest() != source.sha256:
                raise ChecksumMismatch(
                    f"checksum mismatch for {source.url}: expected sha256 {source.sha256}, "
                    f"got {digest.hexdigest()}; nothing was stored"
                )
            self._store(manifest, source.framework, path, f"url:{source.url}")


@contextlib.contextmanager
def _building(store: ObjectStore, prefix: str) -> Iterator[None]:
    """One maker of the asset under ``prefix`` at a time among the processes on this machine
    that share a local store: an exclusive ``flock`` on the asset's folder (a lock file would
    be an object of the store). Builds are not byte-identical everywhere (threaded training,
    saved-model ids), and two makers' files and ``asset.json`` could pair up wrongly."""
    if not isinstance(store, LocalStore):
        yield
        return
    folder = store.path_of(prefix)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _require_torch(manifest: ModelManifest) -> None:
    if importlib.util.find_spec("torch") is None:
        raise AssetError(
            f"the {manifest.name!r} assets are built from torch, which this environment "
            f"({sys.prefix}) lacks: build them once from the main environment (any "
            "'mlms eval' of this model there) into the same store"
        )


def canonical_module(manifest: ModelManifest, weights: Path | None) -> Any:
    """The torch module of ``manifest``: ``weights`` (a stored torch asset) loaded into the
    bare network, or, without them, the network built from its seed (and trained)."""
    import torch

    if weights is None:
        source = manifest.source_for("torch")
        return build(source.builder, source.seed)
    state = torch.load(weights, weights_only=True, map_location="cpu")
    return with_weights(manifest, state).eval()


def export_file_artifact(manifest: ModelManifest, framework: str, path: Path, folder: Path) -> str:
    """Write ``framework``'s artifact of a user's model into ``folder`` from its torch module
    (loaded from ``path``); the file's name. Runs in the exporter's own process."""
    from mlms.assets.torch_files import eval_mode, load_torch_module

    return EXPORTERS[framework](
        eval_mode(load_torch_module(manifest, path).layers), manifest, folder
    )


def export_artifact(
    manifest: ModelManifest, framework: str, weights: Path | None, folder: Path
) -> str:
    """Write ``framework``'s artifact of ``manifest`` into ``folder`` from the canonical torch
    module (``weights``, or built when None); the file's name. Runs in the asset builder's
    own process."""
    return EXPORTERS[framework](canonical_module(manifest, weights), manifest, folder)


def build_and_export(manifest: ModelManifest, framework: str, folder: Path) -> tuple[str, str]:
    """Build the canonical torch module (seeded, trained where it has a trainer), write its
    weights into ``folder/torch`` and ``framework``'s artifact, exported from that same module,
    into ``folder/<framework>``; the two files' names. Runs in the asset builder's own
    process."""
    module = canonical_module(manifest, None)
    (folder / "torch").mkdir()
    (folder / framework).mkdir()
    weights = EXPORTERS["torch"](module, manifest, folder / "torch")
    return weights, EXPORTERS[framework](module, manifest, folder / framework)
