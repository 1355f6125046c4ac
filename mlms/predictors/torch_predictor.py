"""PyTorch predictor: the zoo's architectures with state-dict weights, eager or compiled.

Precision: fp32 computes in float32 with TF32 off; tf32 lets matrix products and convolutions
use TF32 (GPUs from compute capability 8.0); fp16 and bf16 convert the weights and the inputs.
``cudnn_benchmark`` turns on cuDNN's autotuning: the first convolution of each input shape times
cuDNN's algorithms and keeps the fastest (the warm-up pays for it).
Inputs on a CUDA device are staged in pinned host memory and copied asynchronously (``stage``),
the copy timed with device events.

Layer profiling on a CUDA device: ``torch_layer_hooks`` (torch.profiler would take CUPTI from the
GPU levels). On the CPU: every module gets forward hooks that open a ``record_function`` range named
after its path, then ``torch.profiler`` (CPU activities, input shapes, memory) records the stretch.
A FRAMEWORK event is a leaf module's range, or an operator that runs outside any leaf module (a
residual add, a flatten), named after the module that runs it. Each carries its costs
(``torch_layer_costs``): the leaf's parameters and flops, its outputs' shapes and bytes (the forward
hook sees them; the profiler records input shapes only) and the memory the profiler saw it allocate,
net of what it freed. The hooks exist only while profiling, so the model-level run carries none.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple

import numpy as np

from mlms.assets.architectures import with_weights
from mlms.assets.torch_files import eval_mode, load_torch_module
from mlms.errors import UnsupportedFramework
from mlms.predictors.alignment import per_predict
from mlms.predictors.base import InputCopy, LayerCapture, PredictAnchor, Predictor, anchor
from mlms.predictors.torch_compiled import COMPILED
from mlms.predictors.torch_layer_costs import (
    Batch,
    LayerCosts,
    OutputMeta,
    layer_modules,
    layer_type,
    output_meta,
)
from mlms.predictors.torch_layer_hooks import HookedLayers
from mlms.tracer.communication import COMMUNICATION, is_communication
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

MARK = "mlms::predict"
LEAF = "mlms.layer::"
MODULE = "mlms.module::"
#: --precision -> the dtype weights and floating-point inputs are converted to.
DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class TorchPredictor(Predictor):
    framework = "torch"
    compile_modes = ("default", "reduce-overhead", "max-autotune")
    # reduce-overhead is inductor's default code under CUDA graphs (torch.compile's modes).
    graphed_modes: ClassVar[dict[str, str]] = {"default": "reduce-overhead"}
    # The hooks and profiler ranges see modules that inductor has fused away.
    layers_when_compiled = False
    has_channels_last = True
    has_cudnn_benchmark = True
    stages_on_gpu = True
    generates = True
    #: torch's switch that turns autograd off around each predict.
    autograd_off: ClassVar[str] = "inference_mode"

    @classmethod
    def precisions(cls, capability: tuple[int, int] | None) -> tuple[str, ...]:
        """On the CPU half precision is left out: most of its kernels there are slow reference
        code. TF32 and bfloat16 need tensor cores of compute capability 8.0 (Ampere) or later."""
        if capability is None:
            return ("fp32", "bf16")
        if capability >= (8, 0):
            return ("fp32", "tf32", "fp16", "bf16")
        return ("fp32", "fp16")

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
        capability = (
            torch.cuda.get_device_capability(self.device) if self.device.type == "cuda" else None
        )
        self.require_precision(self.precisions(capability))
        self.dtype = getattr(torch, DTYPES[options.precision])
        if self.device.type == "cuda":
            # Process-wide switches: set on every load so that an earlier model's stay out.
            torch.backends.cuda.matmul.allow_tf32 = options.precision == "tf32"
            torch.backends.cudnn.allow_tf32 = options.precision == "tf32"
        # Process-wide too; set on every device, where a CPU run changes nothing by it, so that
        # the record says what the process ran with.
        torch.backends.cudnn.benchmark = options.cudnn_benchmark
        self._layout = torch.channels_last if options.channels_last else None
        if manifest.file_source is not None:
            layers, runs = load_torch_module(manifest, asset_path)
        else:
            state = torch.load(asset_path, weights_only=True, map_location="cpu")
            layers = runs = with_weights(manifest, state)
        self.module = self._placed(layers)
        self._runs = self.module if runs is layers else self._placed(runs)
        # Compiled lazily by the first call, which the warm-up makes.
        self._forward = (
            torch.compile(self._runs, mode=options.compile) if options.compile else self._runs
        )
        self._pinned: dict[tuple[Any, ...], Any] = {}
        # While the profiler path runs: where each predict sat and what its batch was.
        self._predicts: list[tuple[PredictAnchor, Batch]] | None = None
        self._costs: LayerCosts | None = None
        self._hooked: HookedLayers | None = None
        self._compiled = bool(options.compile)
        if self._compiled:
            COMPILED.opened(torch)

    def _placed(self, module: Any) -> Any:
        module = eval_mode(module).to(self.device, dtype=self.dtype)
        return module if self._layout is None else module.to(memory_format=self._layout)

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
            "precision": self.options.precision,
            "dtype": str(self.dtype).removeprefix("torch."),
            "mode": (
                f"torch.compile mode={self.options.compile}, {self.autograd_off}"
                if self.options.compile
                else f"eager, {self.autograd_off}"
            ),
            "channels_last": self.options.channels_last,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
        if self.device.type == "cuda":
            values |= {
                "cudnn_version": torch.backends.cudnn.version(),
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "cuda_version": torch.version.cuda,
            }
        return values

    def stage(self, batch: np.ndarray) -> tuple[Any, InputCopy | None]:
        """The batch on the model's device in its dtype and layout. To a GPU it goes through a
        pinned host buffer (one per shape, reused: the copy is waited for) with an
        asynchronous copy, which a pageable source would make synchronous and slower."""
        torch = self._torch
        host = torch.from_numpy(batch)
        if self.device.type != "cuda":
            return self._model_input(host), None
        key = (tuple(host.shape), host.dtype)
        pinned = self._pinned.get(key)
        if pinned is None:
            # A plain tensor even where a predict under inference mode makes it: an inference
            # tensor takes no copy outside that mode (``device_times`` stages outside it, and
            # must, for a compiled model guards on its input's kind).
            with torch.inference_mode(False):
                pinned = self._pinned[key] = torch.empty_like(host).pin_memory()
        pinned.copy_(host)
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        on_device = pinned.to(self.device, non_blocking=True)
        end.record()
        end.synchronize()
        copy = InputCopy(pinned.nbytes, start.elapsed_time(end) / 1e3)
        return self._model_input(on_device), copy

    def _model_input(self, tensor: Any) -> Any:
        if tensor.is_floating_point() and tensor.dtype != self.dtype:
            tensor = tensor.to(self.dtype)
        if self._layout is not None and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=self._layout)
        return tensor

    def predict(self, batch: Any) -> np.ndarray:
        torch = self._torch
        with getattr(torch, self.autograd_off)():
            tensor = batch if isinstance(batch, torch.Tensor) else self.stage(batch)[0]
            if self._predicts is None:
                if self.device.type != "cuda":
                    return self._forward(tensor).float().cpu().numpy()
                start = time.perf_counter_ns()
                logits = self._forward(tensor)
                self.launches.append(time.perf_counter_ns() - start)
                return logits.float().cpu().numpy()
            batch_meta = (tensor.shape, tensor.dtype, tensor.device)
            self._predicts.append((anchor(), batch_meta))
            with torch.profiler.record_function(MARK):
                logits = self._forward(tensor)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
            return logits.float().cpu().numpy()

    def device_times(self, batch: np.ndarray, predicts: int, launch_ns: int) -> list[int]:
        """The device held by a spinning kernel while the host launches each predict, timed by
        CUDA events from the spin's end to the predict's last kernel: the launches queue up
        behind the spin and run without the host's gaps. The spin lasts twice the longest
        launch measured (a shorter one would let gaps back in, a longer one only costs
        time). Empty where a forward outlasted its spin: it waited on the device itself (a
        synchronisation inside the model), so its launches did not all queue. One process on
        the device: a split model's ranks would wait on each other's spins."""
        torch = self._torch
        # torch's own spinning kernel (its stream tests use it); private, so looked for.
        sleep = getattr(torch.cuda, "_sleep", None)
        if self.device.type != "cuda" or self.ranks.size > 1 or sleep is None:
            return []
        tensor = self.stage(batch)[0]
        times = []
        # The spin, the events and the predict on one stream: the model's device's current one.
        spin_ns = 2 * launch_ns
        with torch.cuda.device(self.device), getattr(torch, self.autograd_off)():
            cycles = int(self._cycles_per_ns(sleep) * spin_ns)
            for _ in range(predicts):
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                sleep(cycles)
                start.record()
                began = time.perf_counter_ns()
                self._forward(tensor)
                launched = time.perf_counter_ns() - began
                end.record()
                end.synchronize()
                if launched >= spin_ns:
                    return []
                times.append(int(start.elapsed_time(end) * 1e6))
        return times

    def _cycles_per_ns(self, sleep: Callable[[int], None]) -> float:
        """The device's clock as its spinning kernel counts it, from one timed spin."""
        torch = self._torch
        cycles = 10_000_000
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1e6)

    def generate(self, batch: Any, new_tokens: int) -> tuple[int, list[int]]:
        """Greedy decoding of ``new_tokens`` after each prompt of ``batch``, with the key-value
        cache: nanoseconds to the first token (the prompt's pass) and for each later token.
        Each token is waited for, as a generation loop does to check for its end."""
        torch = self._torch
        clock = time.perf_counter_ns
        tokens = batch if isinstance(batch, torch.Tensor) else self.stage(batch)[0]
        times = []
        start = clock()
        for _token in self._greedy(tokens, new_tokens):
            now = clock()
            times.append(now - start)
            start = now
        return times[0], times[1:]

    @property
    def end_token(self) -> int | None:
        """The token that ends a generated sequence, where the model's configuration names one."""
        config = getattr(getattr(self.module, "pretrained", None), "config", None)
        return getattr(config, "eos_token_id", None)

    def greedy_tokens(self, batch: np.ndarray, new_tokens: int) -> np.ndarray:
        """The ``new_tokens`` greedily decoded after each input: (rows, new_tokens) ids."""
        tokens = self.stage(batch)[0]
        return self._torch.cat(list(self._greedy(tokens, new_tokens)), dim=1).cpu().numpy()

    def _greedy(self, tokens: Any, new_tokens: int) -> Iterator[Any]:
        """Each new token of greedy decoding after ``tokens`` (rows, 1), once the device has
        computed it."""
        torch = self._torch
        step = self.module.step
        with getattr(torch, self.autograd_off)():
            logits, past = step(tokens, None)
            for left in range(new_tokens - 1, -1, -1):
                token = logits.argmax(-1, keepdim=True)
                self._wait()
                yield token
                if left:
                    logits, past = step(token, past)

    def sequence_logits(self, batch: np.ndarray) -> np.ndarray:
        """A causal language model's logits at every position: (rows, positions, vocabulary)
        (its perplexity, ``mlms.accuracy.language``)."""
        torch = self._torch
        with getattr(torch, self.autograd_off)():
            tokens = self.stage(batch)[0]
            logits = self.module.pretrained(input_ids=tokens, use_cache=False).logits
            return logits.float().cpu().numpy()

    def _wait(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def close(self) -> None:
        if self._compiled:
            self._compiled = False
            COMPILED.closed()
        self.module = self._runs = self._forward = self._costs = self._hooked = None
        self._pinned.clear()
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()

    def _layer_events(self) -> Iterator[LayerCapture]:
        # Predicts run the module whose submodules the hooks see (for most models the same).
        self._forward = self.module
        try:
            yield from self._hooked_layer_events()
        finally:
            self._forward = self._runs

    def _hooked_layer_events(self) -> Iterator[LayerCapture]:
        torch = self._torch
        cuda = self.device.type == "cuda"
        if self._costs is None:
            # On the CPU the profiler measures allocations in the run itself.
            allocated = (
                functools.partial(torch.cuda.memory_allocated, self.device) if cuda else None
            )
            self._costs = LayerCosts(torch, self.module, allocated)
        if cuda:
            # torch.profiler would take CUPTI's buffers from the GPU levels (torch_layer_hooks).
            if self._hooked is None:
                self._hooked = HookedLayers(torch, self.module, self._costs)
            yield from self._hooked.capture()
            return
        capture = LayerCapture()
        outputs: dict[str, list[OutputMeta]] = {}
        handles = _install_hooks(torch, self.module, outputs)
        self._predicts = []
        profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            record_shapes=True,
            profile_memory=True,
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
            predicts, self._predicts = self._predicts, None
        windows = per_predict(
            (e for e in profiler.events() if e.name == MARK),
            [where for where, _ in predicts],
            lambda mark: (int(mark.time_range.start * 1000), int(mark.time_range.end * 1000)),
            profiler="torch.profiler",
            marks_are="predict ranges",
        )
        outputs_of = {path: iter(metas) for path, metas in outputs.items()}
        for window, (_, batch) in zip(windows, predicts, strict=True):
            counted = self._costs.count(batch)
            for index, layer in enumerate(_layers_under(window.mark, module_path="")):
                costs = self._costs.attributes(
                    layer.path,
                    counted,
                    next(outputs_of[layer.path], ()) if layer.path else (),
                    layer.event.cpu_memory_usage,
                )
                capture.events.append(
                    _timed(layer, index, window.offset_ns, window.anchor.thread, costs)
                )
                capture.events.extend(
                    _collectives(layer.event, window.offset_ns, window.anchor.thread)
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


def _install_hooks(torch: Any, model: Any, outputs: dict[str, list[OutputMeta]]) -> list[Any]:
    """Hooks that open a range per module; a leaf's also appends its outputs' shapes and
    dtypes to ``outputs[path]``, in call order (the profiler records no output shapes)."""
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

    def leaf_post_hook(seen: list[OutputMeta]):
        def hook(_module, _inputs, output):
            local.ranges.pop().__exit__(None, None, None)
            seen.append(output_meta(output))

        return hook

    handles = []
    for path, module, leaf in layer_modules(model):
        # TorchScript takes no hooks: its layers are the operators it runs.
        if not path or isinstance(module, torch.jit.ScriptModule):
            continue
        label = f"{LEAF if leaf else MODULE}{path}::{layer_type(path, module)}"
        handles.append(module.register_forward_pre_hook(pre_hook(label)))
        post = leaf_post_hook(outputs.setdefault(path, [])) if leaf else post_hook
        handles.append(module.register_forward_hook(post))
    return handles


class _Layer(NamedTuple):
    event: Any  # the profiler's event
    name: str
    op_type: str  # the module's class, or the operator's name
    path: str | None  # the leaf module's path; None for an operator outside every leaf


def _layers_under(event: Any, module_path: str) -> Iterator[_Layer]:
    """The layers below a profiler event, in execution order."""
    for child in sorted(event.cpu_children, key=lambda e: e.time_range.start):
        if child.name.startswith(LEAF):
            path, module_type = child.name[len(LEAF) :].rsplit("::", 1)
            yield _Layer(child, path, module_type, path)
        elif child.name.startswith(MODULE):
            path, _ = child.name[len(MODULE) :].rsplit("::", 1)
            yield from _layers_under(child, path)
        else:
            op = child.name
            yield _Layer(child, f"{module_path}/{op}" if module_path else op, op, None)


def _timed(
    layer: _Layer, index: int, offset_ns: int, thread: int, costs: dict[str, Any]
) -> TimedEvent:
    event = layer.event
    ops = list(_operators(event))
    main = ops[0] if ops else event
    attributes: dict[str, Any] = {"op_type": layer.op_type, "ops": [op.name for op in ops][:8]}
    if main.input_shapes:
        attributes["input_shapes"] = [list(shape) for shape in main.input_shapes if shape]
    return TimedEvent(
        name=layer.name,
        kind=normalise_kind(layer.op_type),
        level=TraceLevel.FRAMEWORK,
        start_ns=int(event.time_range.start * 1000) + offset_ns,
        end_ns=int(event.time_range.end * 1000) + offset_ns,
        thread=thread,
        layer_index=index,
        attributes=attributes | costs,
    )


def _collectives(event: Any, offset_ns: int, thread: int) -> Iterator[TimedEvent]:
    """The collectives inside a layer, as spans of their own below it: a split model's
    all-reduce runs inside an operator (DTensor reduces a row-parallel linear's partial output
    where the residual add reads it), and would otherwise count as that operator's time."""
    for child in event.cpu_children:
        if not is_communication(child.name):
            yield from _collectives(child, offset_ns, thread)
            continue
        yield TimedEvent(
            name=child.name,
            kind=COMMUNICATION,
            level=TraceLevel.FRAMEWORK,
            start_ns=int(child.time_range.start * 1000) + offset_ns,
            end_ns=int(child.time_range.end * 1000) + offset_ns,
            thread=thread,
            attributes={"op_type": child.name},
        )


def _operators(event: Any) -> Iterator[Any]:
    if event.name.startswith("aten::"):
        yield event
        return
    for child in event.cpu_children:
        yield from _operators(child)
