"""XLA's kernels joined to Keras layers through the compiled HLO's op_name metadata.

The fixture ``tests/data/keras_small_cpu.hlo.txt`` is the real compiled text
(``jax.jit(...).lower(...).compile().as_text()``, JAX 0.10.2 on the CPU, strict fp32) of a small
Keras 3 model on the JAX backend: Permute ``to_nhwc``, Conv2D ``conv1``, BatchNormalization
``bn1``, ReLU ``relu1``, GlobalAveragePooling2D ``pool``, a nested Functional ``block`` (Dense
``inner_fc``, GELU ``inner_gelu``) and Dense ``fc``; ``keras_small.layers.json`` is its layer
tree. No GPU runs here, so the kernel lists are synthetic, shaped as the profilers report them:
XLA's GPU kernels named after their instruction (``.`` made ``_``), library kernels (cuDNN,
cuBLAS) named by the library, and the CPU's thunks with the ``hlo_op`` XLA's profiler attaches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlms.tracer.hlo_join import (
    UNATTRIBUTED,
    Kernel,
    assign_kernels,
    kernel_name,
    layer_classes,
    layer_of_op,
    layer_spans,
    parse_hlo,
)

DATA = Path(__file__).parent / "data"
MODULE = parse_hlo((DATA / "keras_small_cpu.hlo.txt").read_text())
TREE = json.loads((DATA / "keras_small.layers.json").read_text())


def _layer(op: str) -> str:
    return layer_of_op(op, TREE)


def _kernels(*names: str, hlo_ops: tuple[str | None, ...] = ()) -> list[Kernel]:
    """Back-to-back kernels of 10 ns each, launched in this order."""
    ops = hlo_ops or (None,) * len(names)
    pairs = enumerate(zip(names, ops, strict=True))
    return [Kernel(name, 10 * i, 10 * i + 10, op) for i, (name, op) in pairs]


def test_entry_computation_is_read_in_schedule_order_with_fused_op_names() -> None:
    assert MODULE.name == "jit_forward"
    compute = [i for i in MODULE.entry if i.opcode != "parameter"]
    assert [i.name for i in compute] == [
        "add_rsqrt_fusion",
        "transpose_copy_fusion",
        "conv_general_dilated.1",
        "broadcast_multiply_fusion",
        "ynn_fusion.1",
        "select_multiply_fusion",
        "ynn_fusion",
        "broadcast_add_fusion",
    ]
    assert [i.position for i in MODULE.entry] == list(range(len(MODULE.entry)))
    by_name = {i.name: i for i in compute}
    assert by_name["conv_general_dilated.1"].opcode == "convolution"
    # The fusion's own metadata names only its root (pool); what it holds names the rest.
    fused = by_name["broadcast_multiply_fusion"]
    assert fused.op_names[-1].startswith("jit(forward)/pool/")
    assert list(dict.fromkeys(map(_layer, fused.op_names))) == ["conv1", "bn1", "relu1", "pool"]


def test_op_names_resolve_to_nested_keras_layers() -> None:
    assert _layer("jit(forward)/block/inner_fc/dot_general") == "block/inner_fc"
    assert _layer("jit(forward)/relu1/jit(relu)/max") == "relu1"
    assert _layer("jit(forward)/conv1_1/conv_general_dilated") == "conv1"  # a call's suffix
    assert _layer("jit(forward)/add") == "add"  # an operation outside every layer
    assert layer_classes(TREE)["block/inner_gelu"] == "Activation"


def test_gpu_kernels_join_by_name_and_library_kernels_by_schedule() -> None:
    """XLA's own kernels carry their instruction's name; the convolution runs as a cuDNN kernel
    whose name says nothing: it belongs to the one instruction no kernel names between its
    neighbours in the schedule. The fusion serving conv1's bias, bn1, relu1 and pool is one
    span named for all four, not split."""
    kernels = _kernels(
        "add_rsqrt_fusion",
        "transpose_copy_fusion",
        "sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc",
        "broadcast_multiply_fusion",
        kernel_name("ynn_fusion.1"),
        "select_multiply_fusion",
        "ynn_fusion",
        "broadcast_add_fusion",
    )
    assert kernels[4].name == "ynn_fusion_1"
    assigned = assign_kernels(MODULE, kernels, _layer)
    assert [a.how for a in assigned] == ["name"] * 2 + ["schedule"] + ["name"] * 5
    assert assigned[2].instructions == ("conv_general_dilated.1",)
    assert assigned[2].layers == ("conv1",)
    assert assigned[4].instructions == ("ynn_fusion.1",)
    spans = layer_spans(kernels, assigned)
    assert [s.name for s in spans] == [
        "bn1",
        "to_nhwc",
        "conv1",
        "conv1+bn1+relu1+pool",
        "block/inner_fc",
        "block/inner_fc+block/inner_gelu",
        "fc",
    ]
    fc = spans[-1]
    assert (fc.kernels, fc.kernel_ns, fc.start_ns, fc.end_ns) == (2, 20, 60, 80)
    assert fc.instructions == ("ynn_fusion", "broadcast_add_fusion")
    assert sum(s.kernel_ns for s in spans) == sum(k.end_ns - k.start_ns for k in kernels)


def test_library_kernels_between_two_unnamed_instructions_serve_both() -> None:
    """Two library kernels where two instructions lie unnamed between their neighbours: which
    ran which is not in the data, so both are labelled with both instructions' layers."""
    kernels = _kernels(
        "transpose_copy_fusion",
        "cudnn_conv_kernel",
        "cublas_gemm_kernel",
        "select_multiply_fusion",
    )
    # broadcast_multiply_fusion and ynn_fusion.1 ran as well but their kernels are not named.
    assigned = assign_kernels(MODULE, kernels, _layer)
    middle = assigned[1]
    assert middle.how == "schedule"
    assert middle.instructions == (
        "conv_general_dilated.1",
        "broadcast_multiply_fusion",
        "ynn_fusion.1",
    )
    assert middle.layers == ("conv1", "bn1", "relu1", "pool", "block/inner_fc")
    assert assigned[2] == middle
    spans = layer_spans(kernels, assigned)
    assert [s.kernels for s in spans] == [1, 2, 1]
    assert spans[1].how == "schedule"


def test_cpu_thunks_join_by_their_hlo_op_and_unknown_kernels_stay_unattributed() -> None:
    """On the CPU XLA's profiler names each thunk's instruction; a kernel that neither names an
    instruction nor has one left between its neighbours is said to be unattributed."""
    thunks = _kernels(
        "conv_general_dilated.1",
        "broadcast_multiply_fusion",
        "memcpy32_post",
        hlo_ops=("conv_general_dilated.1", "broadcast_multiply_fusion", None),
    )
    thunks.append(Kernel("ynn_fusion.1", 30, 40, "ynn_fusion.1"))
    assigned = assign_kernels(MODULE, thunks, _layer)
    assert [a.how for a in assigned] == ["hlo_op", "hlo_op", "none", "hlo_op"]
    spans = layer_spans(thunks, assigned)
    assert spans[2].name == UNATTRIBUTED and spans[2].layers == ()


def test_spans_follow_start_order_when_thunks_overlap() -> None:
    """The CPU's thunk executor runs independent thunks side by side: spans follow starts, and
    a span ends with the latest of its kernels."""
    thunks = [
        Kernel("a", 0, 50, "add_rsqrt_fusion"),
        Kernel("t", 5, 10, "transpose_copy_fusion"),
        Kernel("c", 12, 30, "conv_general_dilated.1"),
    ]
    spans = layer_spans(thunks, assign_kernels(MODULE, thunks, _layer))
    assert [(s.name, s.start_ns, s.end_ns) for s in spans] == [
        ("bn1", 0, 50),
        ("to_nhwc", 5, 10),
        ("conv1", 12, 30),
    ]


def test_text_without_an_entry_computation_is_refused() -> None:
    with pytest.raises(ValueError, match="no ENTRY computation"):
        parse_hlo("HloModule empty\n")


def test_an_instruction_without_metadata_counts_in_its_consumers_first_layer() -> None:
    """XLA's CPU rewrites a batch-1 Dense as a bare ``dot`` with no metadata (recorded from
    digits_cnn at batch 1): it is counted in the layer its consumer starts with, not lost."""
    text = """HloModule jit_forward, is_scheduled=true

%fused_computation (param_0: f32[64], param_1: f32[1,64]) -> f32[64,1] {
  %param_1 = f32[1,64]{1,0} parameter(1)
  %param_0 = f32[64]{0} parameter(0)
  %add.1 = f32[1,64]{1,0} add(%param_1, %param_0), metadata={op_name="jit(forward)/6/add"}
  ROOT %max.1 = f32[64,1]{1,0} maximum(%add.1, %add.1), metadata={op_name="jit(forward)/7/max"}
}

ENTRY %main.2 (x.1: f32[1,144], w.1: f32[144,64], b.1: f32[64]) -> f32[64,1] {
  %x.1 = f32[1,144]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[144,64]{1,0} parameter(1), metadata={op_name="w"}
  %b.1 = f32[64]{0} parameter(2), metadata={op_name="b"}
  %dot.2 = f32[1,64]{1,0} dot(%x.1, %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %maximum_fusion = f32[64,1]{1,0} fusion(%b.1, %dot.2), kind=kLoop, CALLS
}
""".replace("CALLS", 'calls=%fused_computation, metadata={op_name="jit(forward)/7/max"}')
    module = parse_hlo(text)
    dot, fusion = module.entry[3], module.entry[4]
    assert (dot.name, dot.opcode, dot.op_names) == ("dot.2", "dot", ("jit(forward)/6/add",))
    kernels = _kernels("dot.2", "maximum_fusion", hlo_ops=("dot.2", "maximum_fusion"))
    tree = {"6": ("Dense", {}), "7": ("ReLU", {})}
    spans = layer_spans(kernels, assign_kernels(module, kernels, lambda op: layer_of_op(op, tree)))
    assert [s.name for s in spans] == ["6", "6+7"]
    assert fusion.op_names == ("jit(forward)/6/add", "jit(forward)/7/max")
