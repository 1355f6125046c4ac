"""The predictor interface every framework implements (one module per framework).

A predictor owns one loaded model on one device. The evaluation loop calls ``predict`` on
preprocessed batches; ``profile_layers`` wraps a stretch of predict calls with the framework's
own profiler and hands back FRAMEWORK-level events on the host clock. Preprocessing and top-k
are shared (``mlms.tasks.preprocess``) so that every framework sees the same input tensor.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from mlms.errors import InvalidArgument
from mlms.manifest import ModelManifest
from mlms.predictors.ranks import SOLO, Ranks
from mlms.tasks.postprocess import Step, no_step, postprocess
from mlms.tasks.preprocess import preprocess
from mlms.tracer.spans import TimedEvent


@dataclass(frozen=True)
class PredictorOptions:
    device: str = "cpu"  # "cpu" or "cuda:N"
    intra_op_threads: int | None = None  # None: the framework's default
    inter_op_threads: int | None = None
    precision: str = "fp32"  # fp32, tf32, fp16 or bf16: what the framework computes in
    compile: str | None = None  # a mode of the framework's ``compile_modes``; None: as shipped
    channels_last: bool = False  # torch: NHWC memory format for 4-D image batches
    cudnn_benchmark: bool = False  # torch: cuDNN's autotuning of convolution algorithms


@dataclass(frozen=True)
class InputCopy:
    """One host-to-device copy of a batch, timed on the device."""

    bytes: int
    seconds: float


@dataclass
class LayerCapture:
    """Filled when ``profile_layers`` exits: one event per layer execution."""

    events: list[TimedEvent] = field(default_factory=list)
    dropped: int = 0


@dataclass(frozen=True)
class PredictAnchor:
    """Where one predict call sat on the host clock, to map a profiler's own clock onto it."""

    start_ns: int
    thread: int


class Predictor(ABC):
    framework: ClassVar[str]
    #: What ``--compile`` may name for this framework (the first is what a bare flag means);
    #: empty where it has none.
    compile_modes: ClassVar[tuple[str, ...]] = ()
    #: Each compile mode whose kernels another of its modes replays as one CUDA graph on a GPU,
    #: to that mode: the two do the same work on the device, and the graph's one launch costs
    #: the host no more than launching the kernels one by one (at the fixed input shapes an
    #: evaluation times; a graph is recorded once per shape, in the warm-up).
    graphed_modes: ClassVar[dict[str, str]] = {}
    #: Whether tracing layers still works on a compiled model. Where it does not, a compiled
    #: model's GPU levels still trace its kernels, under the model's spans.
    layers_when_compiled: ClassVar[bool] = True
    #: Whether ``channels_last`` exists for it.
    has_channels_last: ClassVar[bool] = False
    #: Whether ``cudnn_benchmark`` (cuDNN's autotuning switch) exists for it.
    has_cudnn_benchmark: ClassVar[bool] = False
    #: Whether ``stage`` puts batches on a GPU (``--input-on-device`` keeps them there).
    stages_on_gpu: ClassVar[bool] = False
    #: Whether it has ``generate`` (``TokenGenerator``).
    generates: ClassVar[bool] = False
    #: Whether mlms's GPU collectors (cuDNN's log, CUPTI: ml_library and deeper) can run beside
    #: its layer capture.
    gpu_collectors: ClassVar[bool] = True
    #: The processes it runs in: one, or a split model's ranks, which agree on each iteration.
    ranks: Ranks = SOLO

    def __init__(self, manifest: ModelManifest, asset_path: Path, options: PredictorOptions):
        self.manifest = manifest
        self.asset_path = asset_path
        self.options = options
        #: Of each untraced predict, where the framework returns before the device is done
        #: (CUDA's queue, JAX's dispatch): host nanoseconds from handing it the batch until it
        #: returned, the host's part of the predict. Empty where the framework returns only
        #: once done, and for traced predicts (the tracing waits on the device).
        self.launches: list[int] = []

    @classmethod
    def has_layers(cls, compile_mode: str | None) -> bool:
        """Whether ``profile_layers`` sees layers of the model run in ``compile_mode`` (None:
        as shipped)."""
        return compile_mode is None or cls.layers_when_compiled

    @classmethod
    def precisions(cls, capability: tuple[int, int] | None) -> tuple[str, ...]:
        """What ``--precision`` may be on a device: ``capability`` is a GPU's compute
        capability, None for the CPU."""
        return ("fp32",)

    def require_precision(self, supported: Sequence[str]) -> None:
        """One error naming ``--precision`` and what this framework takes on this device,
        unless it is one of ``supported``: a run must never be recorded as a precision it did
        not compute in."""
        if self.options.precision not in supported:
            raise InvalidArgument(
                f"--precision {self.options.precision}: {self.framework} on "
                f"{self.options.device} supports {', '.join(supported)}"
            )

    @classmethod
    @abstractmethod
    def framework_version(cls) -> str: ...

    @abstractmethod
    def predict(self, batch: Any) -> np.ndarray:
        """Logits for a preprocessed batch (or one ``stage`` returned); returns only after the
        device has finished."""

    def device_times(self, batch: np.ndarray, predicts: int, launch_ns: int) -> list[int]:
        """Of ``predicts`` untraced predicts of ``batch``, the device's nanoseconds for each
        with its work run back to back, as if the host had launched it all at once: where a
        predict is launch-bound, what the device's work alone takes. ``launch_ns``: the
        longest launch measured (``launches``). Empty where the device cannot be held while
        the host launches (a framework that returns only once done)."""
        return []

    @property
    def copies_input(self) -> bool:
        """Whether ``stage`` moves the batch to another device (a step of its own to time)."""
        return self.stages_on_gpu and self.options.device.startswith("cuda")

    def stage(self, batch: np.ndarray) -> tuple[Any, InputCopy | None]:
        """The batch where ``predict`` reads it from, and the copy that took it there (None
        where nothing was copied). Frameworks that read host arrays take it as it is."""
        return batch, None

    @abstractmethod
    def _layer_events(self) -> Iterator[LayerCapture]:
        """Generator body of ``profile_layers``: enable the profiler, yield, convert."""

    def settings(self) -> dict[str, Any]:
        """Everything about this predictor that changes a measured number."""
        return {"device": self.options.device}

    def close(self) -> None:  # noqa: B027 - frameworks without resources to free keep this
        """Free the model and its device memory."""

    def preprocess(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return preprocess(images, self.manifest.inputs[0])

    def postprocess(
        self, outputs: np.ndarray, k: int = 5, step: Step = no_step
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best classes (or detections) per sample and their scores; ``step`` opens
        each post-processing step (``mlms.tasks.postprocess``)."""
        return postprocess(self.manifest, outputs, k, step)

    @contextmanager
    def profile_layers(self) -> Iterator[LayerCapture]:
        """Profile the predict calls made inside; the capture's events appear on exit."""
        yield from self._layer_events()

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@runtime_checkable
class TokenGenerator(Protocol):
    def generate(self, batch: Any, new_tokens: int) -> tuple[int, list[int]]:
        """Greedy decoding after each sequence: ns to the first token, ns of each later one."""
        ...


def anchor() -> PredictAnchor:
    return PredictAnchor(time.time_ns(), threading.get_ident())
