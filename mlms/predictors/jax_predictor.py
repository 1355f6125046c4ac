"""JAX predictor: the Keras model of the TensorFlow agent's asset (``.keras``) on Keras 3's JAX
backend, run as one XLA executable compiled with ``jax.jit``.

Keras picks its backend once per process, from ``KERAS_BACKEND``: this module sets it before
Keras is imported, and the framework runs in an agent of its own (``mlms.frameworks``). The
predict function is the model's stateless call with its weights as arguments; it is lowered and
compiled once per input shape, at the first batch of that shape (the warm-up), and each
compile's seconds go into the record's settings. Matrix products and convolutions run in strict
fp32: JAX's "highest" matmul precision for the whole process (XLA's default runs f32 products as
TF32 on NVIDIA GPUs, or as bf16 passes).

Layer profiling runs JAX's own profiler over the stretch, with each predict call wrapped in a
``TraceAnnotation`` whose start is matched to the host clock taken at the call. XLA reports what
its executable ran: on the CPU one thunk per HLO instruction, on a GPU the kernels CUPTI saw,
each named for its instruction. ``mlms.tracer.hlo_join`` maps them through the compiled module's
``op_name`` metadata to the Keras layers they ran for; a fused kernel serving several layers
becomes one span named for all of them (``conv1+bn1+relu1``).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from mlms.assets.keras_models import import_keras_on_jax
from mlms.errors import UnsupportedFramework
from mlms.predictors.base import InputCopy, LayerCapture, PredictAnchor, Predictor, anchor
from mlms.tracer.hlo_join import (
    HloModule,
    Kernel,
    LayerTree,
    assign_kernels,
    layer_classes,
    layer_of_op,
    layer_spans,
    parse_hlo,
)
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

MARK = "mlms::predict"
PRECISION = "highest"
#: Layer classes whose kind says less than the layers fused with them.
GENERIC_KINDS = frozenset({"add", "mul", "reshape", "activation", "other"})


def import_keras() -> Any:
    """``keras`` on its JAX backend; an error where this process loaded it on another."""
    keras = import_keras_on_jax()
    if keras.backend.backend() != "jax":
        raise UnsupportedFramework(
            f"Keras in this process runs on {keras.backend.backend()!r}; the jax framework "
            "needs a process of its own (KERAS_BACKEND=jax)"
        )
    return keras


class JaxPredictor(Predictor):
    framework = "jax"
    stages_on_gpu = True
    # XLA's profiler subscribes to CUPTI for the layer capture; a second subscriber fails.
    gpu_collectors = False

    def __init__(self, manifest, asset_path, options):
        super().__init__(manifest, asset_path, options)
        self.require_precision(("fp32",))
        keras = import_keras()
        import jax

        self._jax = jax
        # Process-wide: the jit cache keys on it, and this agent's process runs only this model.
        jax.config.update("jax_default_matmul_precision", PRECISION)
        self.device = _jax_device(jax, options.device)
        with jax.default_device(self.device):
            model = keras.models.load_model(asset_path, compile=False)
        self.model = model
        self._trainable = jax.device_put([v.value for v in model.trainable_variables], self.device)
        self._fixed = jax.device_put([v.value for v in model.non_trainable_variables], self.device)

        def forward(trainable: Any, fixed: Any, batch: Any) -> Any:
            return model.stateless_call(trainable, fixed, batch, training=False)[0]

        self._jitted = jax.jit(forward)
        self._compiled: dict[tuple, Any] = {}  # (shape, dtype) -> executable
        self._modules: dict[tuple, HloModule] = {}
        self.compile_seconds: dict[str, float] = {}
        self._layers: LayerTree = _sublayers(model)
        self._classes = layer_classes(self._layers)
        self._anchors: list[tuple[PredictAnchor, tuple]] | None = None

    @classmethod
    def framework_version(cls) -> str:
        import jax

        return jax.__version__

    def settings(self) -> dict[str, Any]:
        import keras

        return {
            "device": self.options.device,
            "jax_device": str(self.device),
            "dtype": "float32",
            "matmul_precision": PRECISION,
            "mode": "jax.jit (XLA), Keras stateless call, inference",
            "keras": keras.__version__,
            # One scalar per compiled input shape (settings hold scalars only).
            **{f"jit_compile_s.{shape}": s for shape, s in self.compile_seconds.items()},
        }

    def stage(self, batch: np.ndarray) -> tuple[Any, InputCopy | None]:
        if not self.copies_input:
            return batch, None
        start = time.perf_counter()
        on_device = self._jax.device_put(batch, self.device).block_until_ready()
        return on_device, InputCopy(batch.nbytes, time.perf_counter() - start)

    def _executable(self, batch: Any) -> Any:
        """The compiled predict for this batch's shape, compiled (and timed) on first use."""
        key = (batch.shape, batch.dtype)
        compiled = self._compiled.get(key)
        if compiled is None:
            start = time.perf_counter()
            compiled = self._jitted.lower(self._trainable, self._fixed, batch).compile()
            self.compile_seconds["x".join(map(str, batch.shape))] = round(
                time.perf_counter() - start, 3
            )
            self._compiled[key] = compiled
            self._modules[key] = parse_hlo(compiled.as_text())
        return compiled

    def predict(self, batch: Any) -> np.ndarray:
        compiled = self._executable(batch)
        if self._anchors is None:
            start = time.perf_counter_ns()
            logits = compiled(self._trainable, self._fixed, batch)
            self.launches.append(time.perf_counter_ns() - start)
            return np.asarray(logits)
        self._anchors.append((anchor(), (batch.shape, batch.dtype)))
        with self._jax.profiler.TraceAnnotation(MARK):
            logits = compiled(self._trainable, self._fixed, batch).block_until_ready()
        return np.asarray(logits)

    def close(self) -> None:
        self.model = self._jitted = self._trainable = self._fixed = None
        self._compiled.clear()

    def _layer_events(self) -> Iterator[LayerCapture]:
        jax = self._jax
        capture = LayerCapture()
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        with tempfile.TemporaryDirectory() as logdir:
            self._anchors = []
            jax.profiler.start_trace(logdir, profiler_options=options)
            try:
                yield capture
            finally:
                jax.profiler.stop_trace()
                anchors, self._anchors = self._anchors, None
            pattern = os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")
            files = sorted(glob.glob(pattern))
            if not files:
                raise RuntimeError(f"the JAX profiler wrote no XPlane file under {logdir}")
            marks, kernels = read_profile(
                jax.profiler.ProfileData.from_file(files[-1]),
                gpu=self.device.platform == "gpu",
            )
        if len(marks) != len(anchors):
            raise RuntimeError(
                f"the JAX profiler recorded {len(marks)} predict annotations for "
                f"{len(anchors)} predict calls"
            )
        capture.events = []
        slots: dict[str, int] = {}  # a span's place in the order spans first ran
        for (where, key), (mark, ran) in zip(anchors, per_predict(marks, kernels), strict=True):
            module = self._modules[key]
            mine = [kernel for name, kernel in ran if name in (module.name, None)]
            capture.events += self._spans(module, mine, where.start_ns - mark, where, slots)

    def _spans(
        self,
        module: HloModule,
        ran: list[Kernel],
        offset: int,
        where: PredictAnchor,
        slots: dict[str, int],
    ) -> list[TimedEvent]:
        """One predict's layer spans, moved onto the host clock by ``offset``."""
        assigned = assign_kernels(module, ran, lambda op: layer_of_op(op, self._layers))
        events = []
        for span in layer_spans(ran, assigned):
            events.append(
                TimedEvent(
                    name=span.name,
                    kind=_kind(span.layers, self._classes),
                    level=TraceLevel.FRAMEWORK,
                    start_ns=span.start_ns + offset,
                    end_ns=span.end_ns + offset,
                    thread=where.thread,
                    layer_index=slots.setdefault(span.name, len(slots)),
                    attributes={
                        "layers": list(span.layers),
                        "fused": len(span.layers) > 1,
                        "hlo_instructions": list(span.instructions),
                        "kernel_names": list(span.kernel_names),
                        "kernels": span.kernels,
                        "kernel_ns": span.kernel_ns,
                        "joined_by": span.how,
                    },
                )
            )
        return events


#: Kernels of a predict may show a little after its annotation ends (the device's clock is
#: mapped onto the host's).
SLACK_NS = 100_000
#: Device work that no HLO instruction launched.
_COPIES = ("memcpy", "memset")


def read_profile(
    profile: Any, *, gpu: bool
) -> tuple[list[tuple[int, int]], list[tuple[str | None, Kernel]]]:
    """(predict annotations as (start, end), (module, kernel) of XLA's executables) from JAX's
    ProfileData, by start on the profiler's clock: the GPU's kernels, or the CPU's thunks. A
    GPU kernel without a module (where XLA's annotation did not reach it) keeps None."""
    marks: list[tuple[int, int]] = []
    kernels: list[tuple[str | None, Kernel]] = []
    for plane in profile.planes:
        host = plane.name == "/host:CPU"
        if not host and not (gpu and plane.name.startswith("/device:GPU")):
            continue
        for line in _event_lines(plane):
            for event in line.events:
                start = int(event.start_ns)
                end = start + int(event.duration_ns)
                if host and event.name == MARK:
                    marks.append((start, end))
                    continue
                if host == gpu:
                    continue
                stats = dict(event.stats)
                module = stats.get("hlo_module")
                if module is None and (host or event.name.lower().startswith(_COPIES)):
                    continue
                kernel = Kernel(event.name, start, end, stats.get("hlo_op") or None)
                kernels.append((module, kernel))
    marks.sort()
    kernels.sort(key=lambda item: item[1].start_ns)
    return marks, kernels


def _event_lines(plane: Any) -> list[Any]:
    """A plane's lines of recorded events: on a GPU its streams, not the timelines the profiler
    derives from them (XLA Ops, XLA Modules, Steps...), which would count each kernel again."""
    lines = list(plane.lines)
    if plane.name.startswith("/device:GPU"):
        streams = [line for line in lines if line.name.startswith("Stream")]
        return streams or [line for line in lines if line.name not in _DERIVED]
    return lines


#: Lines the profiler derives from a GPU's streams.
_DERIVED = frozenset(
    {"XLA Modules", "XLA Ops", "XLA TraceMe", "Steps", "Launch Stats", "Source code",
     "Framework Name Scope", "Framework Ops", "TensorFlow Name Scope", "TensorFlow Ops"}
)  # fmt: skip


def per_predict(
    marks: list[tuple[int, int]], kernels: list[tuple[str | None, Kernel]]
) -> list[tuple[int, list[tuple[str | None, Kernel]]]]:
    """(annotation start, the kernels that started within it) for each predict annotation (a
    little past its end, never past the next one's start)."""
    result: list[tuple[int, list[tuple[str | None, Kernel]]]] = []
    position = 0
    for index, (start, end) in enumerate(marks):
        limit = end + SLACK_NS
        if index + 1 < len(marks):
            limit = min(limit, marks[index + 1][0])
        while position < len(kernels) and kernels[position][1].start_ns < start:
            position += 1
        mine: list[tuple[str | None, Kernel]] = []
        while position < len(kernels) and kernels[position][1].start_ns < limit:
            mine.append(kernels[position])
            position += 1
        result.append((start, mine))
    return result


def _kind(layers: tuple[str, ...], classes: dict[str, str]) -> str:
    """The kind of the first layer that says more than an elementwise step (a fused
    convolution + bias + ReLU is a conv), else of the first layer."""
    kinds = [normalise_kind(classes.get(layer, layer.rpartition("/")[2])) for layer in layers]
    return next((k for k in kinds if k not in GENERIC_KINDS), kinds[0] if kinds else "other")


def _sublayers(layer: Any) -> LayerTree:
    """Layer name -> (class name, its own sublayers), for the layers ``layer`` holds."""
    return {
        child.name: (type(child).__name__, _sublayers(child))
        for child in layer._flatten_layers(include_self=False, recursive=False)
    }


def _jax_device(jax: Any, device: str) -> Any:
    if not device.startswith("cuda"):
        return jax.devices("cpu")[0]
    index = int(device.partition(":")[2] or 0)
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if index >= len(gpus):
        raise UnsupportedFramework(
            f"device {device!r} asked for, but this JAX sees {len(gpus)} GPU(s) (install "
            "jax[cuda13] for NVIDIA GPUs)"
        )
    return gpus[index]
