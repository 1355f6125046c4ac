"""PyTorch predictor: torchvision architectures with state-dict weights, eager mode.

Layer profiling: every module gets forward hooks that open a ``record_function`` range named
after its path, then ``torch.profiler`` (CPU activities, shapes, flops) records the stretch. A
FRAMEWORK event is a leaf module's range, or an operator that runs outside any leaf module (a
residual add, a flatten), named after the module that runs it. The hooks exist only while
profiling, so the model-level run carries none.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from mlms.errors import ManifestError, UnsupportedFramework
from mlms.predictors.base import LayerCapture, PredictAnchor, Predictor, anchor
from mlms.predictors.torch_layer_hooks import hook_layer_events
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent
from mlms.zoo.architectures import architecture
from mlms.zoo.manifest import BuildSource, ModelManifest

MARK = "mlms::predict"
LEAF = "mlms.layer::"
MODULE = "mlms.module::"


def architecture_of(manifest: ModelManifest) -> Any:
    """The manifest's network, untrained: stored weights are loaded into it."""
    source = next((s for s in manifest.sources if isinstance(s, BuildSource)), None)
    if source is None:
        raise ManifestError(
            f"model {manifest.name!r}: the torch predictor needs a 'build' "
            "source naming the architecture"
        )
    return architecture(source.builder)


class TorchPredictor(Predictor):
    framework = "torch"

    def __init__(self, manifest, asset_path, options):
        super().__init__(manifest, asset_path, options)
        import torch

        if options.device.startswith("cuda") and not torch.cuda.is_available():
            raise UnsupportedFramework(
                f"device {options.device!r} asked for, but this torch build sees no CUDA device"
            )
        if options.intra_op_threads:
            torch.set_num_threads(options.intra_op_threads)
        if options.inter_op_threads:
            # Settable only before the first parallel work in the process.
            with contextlib.suppress(RuntimeError):
                torch.set_num_interop_threads(options.inter_op_threads)
        self._torch = torch
        self.device = torch.device(options.device)
        module = architecture_of(manifest)
        state = torch.load(asset_path, weights_only=True, map_location="cpu")
        module.load_state_dict(state)
        self.module = module.eval().to(self.device)
        self._anchors: list[PredictAnchor] | None = None

    @classmethod
    def framework_version(cls) -> str:
        import torch

        return torch.__version__

    def settings(self) -> dict[str, Any]:
        torch = self._torch
        values: dict[str, Any] = {
            "device": self.options.device,
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
            "dtype": "float32",
            "mode": "eager, inference_mode",
        }
        if self.device.type == "cuda":
            values |= {
                "cudnn_version": torch.backends.cudnn.version(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "cuda_version": torch.version.cuda,
            }
        return values

    def predict(self, batch: np.ndarray) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            tensor = torch.from_numpy(batch).to(self.device)
            if self._anchors is None:
                return self.module(tensor).cpu().numpy()
            self._anchors.append(anchor())
            with torch.profiler.record_function(MARK):
                logits = self.module(tensor)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
            return logits.cpu().numpy()

    def close(self) -> None:
        self.module = None
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()

    def _layer_events(self) -> Iterator[LayerCapture]:
        torch = self._torch
        if self.device.type == "cuda":
            # torch.profiler would take CUPTI's buffers from the GPU levels (torch_layer_hooks).
            yield from hook_layer_events(torch, self.module)
            return
        capture = LayerCapture()
        handles = _install_hooks(torch, self.module)
        self._anchors = []
        profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_flops=True
        )
        try:
            with native_stderr_silenced():
                profiler.start()
            yield capture
        finally:
            with native_stderr_silenced():
                profiler.stop()
            for handle in handles:
                handle.remove()
            anchors, self._anchors = self._anchors, None
        marks = [e for e in profiler.events() if e.name == MARK]
        if len(marks) != len(anchors):
            raise RuntimeError(
                f"torch.profiler recorded {len(marks)} predict ranges for "
                f"{len(anchors)} predict calls"
            )
        marks.sort(key=lambda e: e.time_range.start)
        for mark, where in zip(marks, anchors, strict=True):
            offset_ns = where.start_ns - int(mark.time_range.start * 1000)
            layers = list(_layers_under(mark, module_path=""))
            for index, (event, name, module_type) in enumerate(layers):
                capture.events.append(
                    _timed(event, name, module_type, index, offset_ns, where.thread)
                )


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Mute file descriptor 2 while Kineto starts or stops.

    Kineto's C++ logger prints "profiler_start"/"profiler_stop" lines (and, in CUDA builds on a
    machine without a GPU, a device-count error) straight to fd 2 whatever KINETO_LOG_LEVEL says;
    they would land in the middle of the progress bar.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _install_hooks(torch: Any, model: Any) -> list[Any]:
    local = threading.local()

    def pre_hook(label: str):
        def hook(_module, _inputs):
            ranges = getattr(local, "ranges", None)
            if ranges is None:
                ranges = local.ranges = []
            handle = torch.profiler.record_function(label)
            handle.__enter__()
            ranges.append(handle)

        return hook

    def post_hook(_module, _inputs, _output):
        local.ranges.pop().__exit__(None, None, None)

    handles = []
    for path, module in model.named_modules():
        if not path:
            continue
        leaf = next(module.children(), None) is None
        label = f"{LEAF if leaf else MODULE}{path}::{type(module).__name__}"
        handles.append(module.register_forward_pre_hook(pre_hook(label)))
        handles.append(module.register_forward_hook(post_hook))
    return handles


def _layers_under(event: Any, module_path: str) -> Iterator[tuple[Any, str, str]]:
    """(profiler event, layer name, module or op type) for each layer, in execution order."""
    for child in sorted(event.cpu_children, key=lambda e: e.time_range.start):
        if child.name.startswith(LEAF):
            path, module_type = child.name[len(LEAF) :].rsplit("::", 1)
            yield child, path, module_type
        elif child.name.startswith(MODULE):
            path, _ = child.name[len(MODULE) :].rsplit("::", 1)
            yield from _layers_under(child, path)
        else:
            op = child.name
            yield child, f"{module_path}/{op}" if module_path else op, op


def _timed(
    event: Any, name: str, module_type: str, index: int, offset_ns: int, thread: int
) -> TimedEvent:
    ops = list(_operators(event))
    flops = sum(int(op.flops or 0) for op in _flop_bearing(event))
    main = ops[0] if ops else event
    attributes: dict[str, Any] = {"op_type": module_type, "ops": [op.name for op in ops][:8]}
    if main.input_shapes:
        attributes["input_shapes"] = [list(shape) for shape in main.input_shapes if shape]
    if flops:
        attributes["flops"] = flops
    return TimedEvent(
        name=name,
        kind=normalise_kind(module_type),
        level=TraceLevel.FRAMEWORK,
        start_ns=int(event.time_range.start * 1000) + offset_ns,
        end_ns=int(event.time_range.end * 1000) + offset_ns,
        thread=thread,
        layer_index=index,
        attributes=attributes,
    )


def _operators(event: Any) -> Iterator[Any]:
    if event.name.startswith("aten::"):
        yield event
        return
    for child in event.cpu_children:
        yield from _operators(child)


def _flop_bearing(event: Any) -> Iterator[Any]:
    """The outermost events with a flop count, so that nested ops are not counted twice."""
    if getattr(event, "flops", 0):
        yield event
        return
    for child in event.cpu_children:
        yield from _flop_bearing(child)
