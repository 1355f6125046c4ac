"""What a load run drives: one predict call on a loaded model, here or through a server."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mlms.errors import UnsupportedFramework
from mlms.evaluation.inputs import open_inputs
from mlms.manifest import ModelManifest

if TYPE_CHECKING:
    from mlms.protos.mlms.v2 import calls_pb2
    from mlms.remote_client import RemoteClient


@dataclass(frozen=True)
class TargetInfo:
    model: str
    framework: str
    framework_version: str
    device: str  # "cpu", "cuda:0"; what the server's agent resolved, over a server
    where: str  # "embedded" or "server HOST:PORT"
    manifest: ModelManifest  # its input is what the samples are made as
    #: A split model's ranks and their devices, rank by rank (one process: 1 and none).
    tensor_parallel: int = 1
    devices: tuple[str, ...] = ()


def synthetic_samples(info: TargetInfo, count: int, seed: int) -> np.ndarray:
    """``count`` distinct synthetic samples (no batch axis), made as an evaluation's are: token
    ids below the vocabulary for a token model, normal values for a tensor's."""
    return open_inputs(info.manifest, ["synthetic"], seed=seed, pool=count).take(0, count).tensor


class PredictTarget(Protocol):
    info: TargetInfo

    def predict(self, batch: np.ndarray) -> None:
        """Run one batch; return once the logits are back (the device has finished)."""
        ...

    def close(self) -> None: ...


class EmbeddedTarget:
    """A predictor loaded in this process, holding the device for the whole run (one
    measured run per device at a time, as evaluations do)."""

    def __init__(self, model: str, framework: str | None, hw: str) -> None:
        from mlms import hardware
        from mlms.assets.manager import AssetManager
        from mlms.catalog.resolve import resolve_model
        from mlms.config import mlms_home
        from mlms.evaluation.device_lock import exclusive_device, free_gpus
        from mlms.frameworks import runs_apart
        from mlms.predictors.base import PredictorOptions
        from mlms.predictors.registry import choose_framework, predictor_class
        from mlms.store.factory import default_store

        store = default_store()
        manifest = resolve_model(model, store)
        framework, version = choose_framework(manifest, framework)
        if runs_apart(framework):
            raise UnsupportedFramework(
                f"framework {framework!r} runs in a process of its own, not beside this one; "
                "drive it through an agent with --server"
            )
        device = hardware.resolve(hw, free=free_gpus(mlms_home() / "locks"))
        asset = AssetManager(store, mlms_home() / "cache").ensure(manifest, framework)
        self._held = ExitStack()
        self._held.enter_context(exclusive_device(mlms_home() / "locks", device))
        self._predictor = self._held.enter_context(
            predictor_class(framework)(manifest, asset.path, PredictorOptions(device))
        )
        self.info = TargetInfo(manifest.name, framework, version, device, "embedded", manifest)

    def predict(self, batch: np.ndarray) -> None:
        self._predictor.predict(batch)

    def close(self) -> None:
        self._held.close()


class ServerTarget:
    """Predict calls through an mlms server, which picks an agent and keeps its session."""

    def __init__(self, client: RemoteClient, model: str, framework: str | None, hw: str) -> None:
        self._client = client
        manifest = client.model(model)
        spec = manifest.inputs[0]
        self._spec = (model, framework or "", hw)
        # The first call opens the agent's session and says which agent and framework serve.
        reply = self._call(np.zeros((1, *spec.shape), dtype=spec.dtype))
        self.info = TargetInfo(
            model,
            framework or "(chosen by the server)",
            "",
            f"{hw} on agent {reply.agent_id}",
            f"server {client.address}",
            manifest,
        )

    def predict(self, batch: np.ndarray) -> None:
        self._call(batch)

    def _call(self, batch: np.ndarray) -> calls_pb2.PredictResponse:
        from mlms.protos.mlms.v2 import calls_pb2, types_pb2
        from mlms.rpc import tensors

        model, framework, hw = self._spec
        return self._client.predict(
            calls_pb2.PredictRequest(
                spec=types_pb2.ModelSpec(model=model, framework=framework, hw=hw),
                tensor=tensors.to_proto(batch),
            )
        )

    def close(self) -> None:
        self._client.close()


def open_target(
    model: str, framework: str | None, hw: str, client: RemoteClient | None = None
) -> PredictTarget:
    """``client`` drives an agent through its server; without one the model loads here."""
    if client is None:
        return EmbeddedTarget(model, framework, hw)
    return ServerTarget(client, model, framework, hw)
