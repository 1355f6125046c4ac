"""Every cuDNN engine for one convolution (optionally fused with bias and an activation),
through NVIDIA's cuDNN frontend (``nvidia-cudnn-frontend``, imported as ``cudnn``).

torch calls cuDNN with the plan its heuristic ranks first (``torch.backends.cudnn.benchmark``
off, the default) and exposes no way to run another; the frontend builds the same operation
graph and lists every engine configuration cuDNN's heuristics and fallback list offer, each of
which can be run. The first plan of heuristic mode A is what the heuristic would choose.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from mlms.bounds.timing import LayerCall, rewriting
from mlms.errors import UnsupportedFramework

#: Engines that need more scratch memory than this are left out (torch caps its own cuDNN
#: workspace similarly; some FFT engines ask for gigabytes at batch size 64).
MAX_WORKSPACE = 2 << 30


#: Largest error an engine's output may have against float64, relative to the output's largest
#: magnitude (TF32 and BF16 keep 10 and 7 mantissa bits of the inputs).
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}


@dataclass(frozen=True)
class ConvCall:
    """``conv(x, w) (+ bias) (+ activation)``: what an engine computes, on ``x``'s device."""

    x: Any
    w: Any
    padding: list[int]
    stride: list[int]
    dilation: list[int]
    bias: Any = None
    activation: str = "none"  # relu, relu6 or none

    def reference(self, torch: Any) -> Any:
        """The output in float64 through torch, to check engines against."""
        groups = self.x.shape[1] // self.w.shape[1]
        y = torch.nn.functional.conv2d(
            self.x.double(), self.w.double(), None, self.stride, self.padding, self.dilation,
            groups,
        )  # fmt: skip
        if self.bias is not None:
            y = y + self.bias.double().reshape(1, -1, 1, 1)
        if self.activation == "relu":
            y = y.clamp_min(0)
        elif self.activation == "relu6":
            y = y.clamp(0, 6)
        return y


@dataclass(frozen=True)
class Engine:
    name: str
    call: LayerCall  # the plan, run on the one input tensor it was built for
    heuristic_rank: int  # 0: the heuristic's first choice


def available() -> bool:
    try:
        import cudnn  # noqa: F401
    except ImportError:
        return False
    return True


def conv_engines(torch: Any, conv: ConvCall, precision: str) -> list[Engine]:
    """Runnable engines for ``conv`` at ``precision`` (fp32: no tensor cores; tf32; fp16;
    bf16), each checked against float64. Empty when cuDNN supports none."""
    try:
        import cudnn
    except ImportError as exc:
        raise UnsupportedFramework(
            "the cuDNN engine search needs NVIDIA's cuDNN frontend: pip install "
            "nvidia-cudnn-frontend"
        ) from exc
    handle = _handle(cudnn, torch.cuda.current_stream().cuda_stream)
    # Engines that compile their kernel at build time (runtime fusion) take seconds each to
    # build; every precompiled engine is built, a compiled one only when cuDNN has no other.
    for compiled in (False, True):
        built = _built_graph(cudnn, handle, conv, precision, compiled)
        if built is not None:
            break
    else:
        return []
    graph, tensors, Y = built
    out = torch.empty(list(Y.get_dim()), dtype=conv.x.dtype, device=conv.x.device)
    tensors[Y] = out.as_strided(list(Y.get_dim()), list(Y.get_stride()))
    plans: list[tuple[int, str, int]] = []
    for index in range(graph.get_execution_plan_count()):
        try:
            name = graph.get_plan_name_at_index(index)
            size = graph.get_workspace_size_plan_at_index(index)
        except Exception:  # a plan that did not build
            continue
        if size <= MAX_WORKSPACE and name not in {n for _, n, _ in plans}:
            plans.append((index, name, size))
    # One workspace for all of them (they run one at a time), the largest any needs.
    workspace = torch.empty(
        max([1, *(s for _, _, s in plans)]), dtype=torch.uint8, device=conv.x.device
    )
    reference = conv.reference(torch)
    engines: list[Engine] = []
    for index, name, _size in plans:

        def run(index: int = index) -> None:
            graph.execute_plan_at_index(tensors, workspace, index, handle=handle)

        # An engine that answers wrongly is no implementation of the layer: each is checked
        # once against float64 before it is timed.
        try:
            run()
        except Exception:  # an engine cuDNN built may still refuse at launch
            continue
        error = (tensors[Y].double() - reference).abs().max() / reference.abs().max().clamp_min(
            1e-30
        )
        if float(error) <= TOLERANCE[precision]:
            engines.append(Engine(name, LayerCall(run, rewriting((conv.x,))), heuristic_rank=index))
    return engines


@functools.cache
def _handle(cudnn: Any, stream: int) -> Any:
    """One cuDNN handle per stream for the process (a handle costs milliseconds and memory)."""
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=stream)
    return handle


def _built_graph(
    cudnn: Any, handle: Any, conv: ConvCall, precision: str, compiled: bool
) -> tuple[Any, dict[Any, Any], Any] | None:
    """The operation graph with its plans built: all precompiled engines, or (``compiled``)
    the heuristic's first choice among all; None when none builds."""
    io_type = {
        "fp32": cudnn.data_type.FLOAT,
        "tf32": cudnn.data_type.FLOAT,
        "fp16": cudnn.data_type.HALF,
        "bf16": cudnn.data_type.BFLOAT16,
    }[precision]
    graph = cudnn.pygraph(
        io_data_type=io_type,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    X, W = graph.tensor_like(conv.x), graph.tensor_like(conv.w)
    Y = graph.conv_fprop(
        image=X, weight=W, padding=conv.padding, stride=conv.stride, dilation=conv.dilation
    )
    tensors = {X: conv.x, W: conv.w}
    if conv.bias is not None:
        bias = conv.bias.reshape(1, -1, 1, 1)
        B = graph.tensor_like(bias)
        Y = graph.bias(input=Y, bias=B)
        tensors[B] = bias
    if conv.activation == "relu":
        Y = graph.relu(input=Y)
    elif conv.activation == "relu6":
        Y = graph.relu(input=Y, lower_clip=0.0, upper_clip=6.0)
    Y.set_output(True).set_data_type(io_type)
    try:
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if precision == "fp32":
            graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
        if not compiled:
            graph.deselect_behavior_notes([cudnn.behavior_note.RUNTIME_COMPILATION])
        graph.check_support()
        policy = cudnn.build_plan_policy
        graph.build_plans(policy.HEURISTICS_CHOICE if compiled else policy.ALL)
    except Exception:  # cuDNN declines configurations it has no engine for
        return None
    return graph, tensors, Y
