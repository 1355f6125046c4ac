"""The CUDA path's layer events (``HookedLayers``), run on the CPU: the measured run reads only
the clock and its calls are matched to an untimed pass over the same input shape."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

from mlms.errors import MlmsError
from mlms.predictors.torch_layer_costs import LayerCosts
from mlms.predictors.torch_layer_hooks import HookedLayers


class Block(torch.nn.Module):
    """A residual block whose ReLU runs twice and whose add runs outside every leaf."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.linear(x))
        return self.relu(out + x)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.block(x), 1))


class ByValue(torch.nn.Module):
    """Takes another path when the input's values say so: its calls differ between passes."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) if bool(x.sum() == 0) else self.b(x)


def _capture(model: torch.nn.Module, *inputs: torch.Tensor):
    hooked = HookedLayers(torch, model, LayerCosts(torch, model))
    with torch.inference_mode(), contextlib.contextmanager(hooked.capture)() as capture:
        torch.ones(3).add(1)  # outside every predict: not a layer
        for x in inputs:
            model(x)
    return capture.events


def test_events_name_every_call_in_order_within_their_predict() -> None:
    model = Net().eval()
    events = _capture(model, torch.randn(3, 8), torch.randn(5, 8))
    names = ["block.linear", "block.relu", "block/aten::add", "block.relu", "aten::flatten", "head"]
    assert [e.name for e in events] == names * 2
    assert [e.layer_index for e in events] == list(range(6)) * 2
    kinds = [e.kind for e in events[:6]]
    assert kinds == ["gemm", "relu", "add", "relu", "reshape", "gemm"]
    assert [e.attributes["output_shapes"] for e in events[6:]] == [[[5, 8]]] * 5 + [[[5, 2]]]
    assert events[0].attributes["params"] == 72 and events[2].attributes["params"] == 0
    assert events[0].attributes["flops"] == 2 * 3 * 8 * 8
    assert events[6].attributes["flops"] == 2 * 5 * 8 * 8  # counted for that predict's batch
    for before, after in itertools.pairwise(events):
        if after.layer_index:
            assert before.end_ns <= after.start_ns  # one after another, never overlapping


def test_forwards_are_put_back_even_when_the_predict_fails() -> None:
    model = Net().eval()
    own = model.head.forward  # an instance's own forward is kept, too
    model.head.forward = own
    hooked = HookedLayers(torch, model, LayerCosts(torch, model))
    with pytest.raises(RuntimeError), contextlib.contextmanager(hooked.capture)():
        model(torch.randn(3, 7))  # the wrong width fails inside the first leaf
    assert "forward" not in model.block.linear.__dict__ and "forward" not in model.__dict__
    assert model.head.__dict__["forward"] is own
    assert torch.equal(model(torch.ones(1, 8)), Net.forward(model, torch.ones(1, 8)))


def test_calls_that_depend_on_the_inputs_values_are_one_clear_error() -> None:
    with pytest.raises(MlmsError, match=r"layer call \d+ .* was 'b' where .* ran 'a'"):
        _capture(ByValue().eval(), torch.ones(2, 4))


class Reduced(torch.nn.Module):
    """A row-parallel layer as DTensor runs it: a linear, then a functional all-reduce outside
    every leaf (DTensor's all-reduce reaches a function mode as the operator itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol

        return funcol.all_reduce(self.linear(x), "sum", torch.distributed.group.WORLD)


def test_a_functional_collective_outside_the_leaves_is_communication() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        events = _capture(torch.nn.Sequential(Reduced()).eval(), torch.randn(2, 8))
    finally:
        dist.destroy_process_group()
    assert [(e.name, e.kind) for e in events] == [
        ("0.linear", "gemm"),
        ("0/_c10d_functional::all_reduce", "communication"),
        ("0/_c10d_functional::_wrap_tensor_autograd", "communication"),
    ]


class Attending(torch.nn.Module):
    """Self-attention as torchvision's vision transformer calls it, then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attention(x, x, x, need_weights=False)
        return self.head(out)


def test_multihead_attention_is_one_layer_that_keeps_its_fused_operator() -> None:
    """At inference nn.MultiheadAttention runs one fused operator, which any TorchFunctionMode
    active inside it turns off (the calls it then makes instead: projections, copies, attention
    apart). The capture takes it whole, as torch.fx does: one layer, run as it runs unobserved."""
    model = Attending().eval()
    with torch.profiler.profile() as profiled:
        events = _capture(model, torch.randn(2, 5, 16))
    assert [(e.name, e.kind) for e in events] == [("attention", "attention"), ("head", "gemm")]
    names = {event.name for event in profiled.events()}
    assert "aten::_native_multi_head_attention" in names
    assert events[0].attributes["params"] == sum(p.numel() for p in model.attention.parameters())


def test_an_unflattened_program_names_its_layers_by_the_classes_it_recorded() -> None:
    """A torch.export program unflattened into modules: each is an InterpreterModule, and its
    layer events carry the class the program recorded for its path, so their kinds are the
    network's."""
    program = torch.export.export(Net().eval(), (torch.randn(3, 8),))
    events = _capture(torch.export.unflatten(program), torch.randn(3, 8))
    layers = [(e.name, e.kind) for e in events if "/" not in e.name and "aten" not in e.name]
    assert layers == [("block.linear", "gemm"), ("block.relu", "relu"),
                      ("block.relu", "relu"), ("head", "gemm")]  # fmt: skip
