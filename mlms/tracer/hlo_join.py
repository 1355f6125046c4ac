"""Which Keras layer each XLA kernel ran for: the compiled HLO module's instructions, their
``op_name`` metadata, and the kernels (GPU) or thunks (CPU) a profiler saw.

JAX names every operation after the scopes it was traced in (``jit(f)/conv1/conv_general_dilated``
under the Keras layer ``conv1``), and XLA keeps those names on the instructions it compiles to.
A fusion carries the name of its root only, so an instruction's layers are read from every
instruction it holds: a kernel that serves several layers (a convolution's bias, the
BatchNormalization after it and the ReLU) is labelled with all of them, in the order they
compute, and never split between them by guess.

An instruction that an XLA pass made without metadata (a batch-1 Dense rewritten as a bare
``dot``, a layout copy) is counted in the first layer of its first consumer.

A kernel finds its instruction by the ``hlo_op`` XLA's profiler attaches to it, else by its name
(XLA names the kernels it emits after their instruction, with ``.`` and ``-`` made ``_``).
Library kernels (cuDNN convolutions, cuBLAS products) carry neither: such a kernel belongs to
the instructions that no kernel names between the named kernels around it, in the module's
schedule (the entry computation's order); where that leaves several, it is labelled with all of
theirs. Pure functions over text and numbers, so they run on the CPU from a recorded fixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Instructions that run no kernel of their own (views, tuples, parameters, async bookkeeping).
NO_KERNEL = frozenset(
    {
        "parameter",
        "constant",
        "bitcast",
        "get-tuple-element",
        "tuple",
        "copy-start",
        "copy-done",
        "after-all",
        "partition-id",
        "replica-id",
    }
)
#: Neither a layer nor an operation: the scope of the jitted function and nested jits.
_JIT_SCOPE = re.compile(r"^(p?jit|pmap|xla_computation)\(.*\)$")
_CALL_SUFFIX = re.compile(r"_\d+$")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLED = re.compile(
    r"\b(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)"
)
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)")


@dataclass(frozen=True)
class HloInstruction:
    """One instruction of the entry computation, in schedule order."""

    name: str
    opcode: str
    position: int
    #: The op_names of the instructions it holds (fused computations first, in their order),
    #: then its own; each once.
    op_names: tuple[str, ...]


@dataclass(frozen=True)
class HloModule:
    name: str
    entry: tuple[HloInstruction, ...]


@dataclass(frozen=True)
class Kernel:
    """One kernel (or CPU thunk) execution of one predict, on the host clock."""

    name: str
    start_ns: int
    end_ns: int
    #: The instruction XLA's profiler says it ran for, where it says so.
    hlo_op: str | None = None


@dataclass(frozen=True)
class KernelLayers:
    """What one kernel ran for."""

    instructions: tuple[str, ...]
    layers: tuple[str, ...]
    #: hlo_op, name, schedule (its place between named kernels) or none.
    how: str


@dataclass(frozen=True)
class LayerSpan:
    """Consecutive kernels of one predict that ran for the same layers."""

    layers: tuple[str, ...]
    start_ns: int
    end_ns: int
    kernel_ns: int  # the kernels' own time, summed
    kernels: int
    instructions: tuple[str, ...]
    how: str
    kernel_names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "+".join(self.layers) if self.layers else UNATTRIBUTED


#: The name of a span of kernels no instruction could be found for.
UNATTRIBUTED = "(unattributed)"


def parse_hlo(text: str) -> HloModule:
    """The entry computation of a compiled module's text (``Compiled.as_text()``)."""
    module = ""
    computations: dict[str, list[tuple[str, str, str]]] = {}  # name -> (instr, opcode, rest)
    entry = ""
    current: list[tuple[str, str, str]] | None = None
    for line in text.splitlines():
        if not module and (found := _MODULE.match(line)):
            module = found.group(1)
            continue
        if current is None:
            if (found := _COMPUTATION.match(line)) and "=" not in line.split("(")[0]:
                current = computations.setdefault(found.group(2), [])
                if found.group(1):
                    entry = found.group(2)
            continue
        if line.strip() == "}":
            current = None
            continue
        if found := _INSTRUCTION.match(line):
            current.append((found.group(1), _opcode(found.group(2)), found.group(2)))
    if not entry:
        raise ValueError("no ENTRY computation in the HLO text")

    def op_names(opcode: str, rest: str, seen: set[str]) -> list[str]:
        names: list[str] = []
        for called in _CALLED.findall(rest):
            for computation in re.findall(r"[\w.\-]+", called):
                if computation in seen or computation not in computations:
                    continue
                seen.add(computation)
                for _name, inner_opcode, inner in computations[computation]:
                    names.extend(op_names(inner_opcode, inner, seen))
        # A constant is shared by every use XLA merged it into (ReLU's 0 keeps the name of the
        # first ReLU); a name without scopes comes from no traced layer (a reducer's body).
        if opcode not in ("constant", "parameter"):
            names.extend(n for n in _OP_NAME.findall(rest) if "/" in n)
        return names

    listed = computations[entry]
    names = [tuple(dict.fromkeys(op_names(opcode, rest, set()))) for _, opcode, rest in listed]
    for position, (name, opcode, _rest) in enumerate(listed):
        if names[position] or opcode in NO_KERNEL:
            continue
        # A pass made it without metadata (XLA's CPU rewrites a batch-1 Dense as a bare dot;
        # layout assignment adds copies): it serves the layer its first consumer starts with.
        used = re.compile(rf"(?<![\w.\-])%?{re.escape(name)}(?![\w.\-])")
        consumer = next(
            (i for i in range(position + 1, len(listed)) if used.search(listed[i][2])), None
        )
        if consumer is not None and names[consumer]:
            names[position] = names[consumer][:1]
    instructions = [
        HloInstruction(name, opcode, position, names[position])
        for position, (name, opcode, _rest) in enumerate(listed)
    ]
    return HloModule(module, tuple(instructions))


def _opcode(rest: str) -> str:
    """The opcode after an instruction's shape (``f32[2,10]{1,0} fusion(...)``; a tuple shape
    is parenthesised)."""
    end = rest.find(" ")
    if rest.startswith("("):
        depth = 0
        for position, char in enumerate(rest, start=1):
            depth += (char == "(") - (char == ")")
            if depth == 0:
                end = position
                break
    found = re.match(r"\s*([\w\-]+)\(", rest[end:])
    return found.group(1) if found else ""


LayerTree = dict[str, tuple[str, "LayerTree"]]


def layer_of_op(op_name: str, tree: LayerTree) -> str:
    """The innermost Keras layer of an op_name, as its path through nested layers
    (``jit(f)/bert_backbone/transformer_layer_0/.../dot_general`` ->
    ``bert_backbone/transformer_layer_0/...``); an operation outside every layer keeps its
    scopes without the jit ones (``jit(f)/add`` -> ``add``)."""
    scopes = [s for s in op_name.split("/") if not _JIT_SCOPE.match(s)]
    path: list[str] = []
    children = tree
    for scope in scopes[:-1]:
        name = next((c for c in (scope, _CALL_SUFFIX.sub("", scope)) if c in children), None)
        if name is None:
            break
        path.append(name)
        children = children[name][1]
    return "/".join(path) if path else "/".join(scopes)


def layer_classes(tree: LayerTree) -> dict[str, str]:
    """Layer path -> its class name, for every layer of the tree."""
    found: dict[str, str] = {}
    for name, (cls, children) in tree.items():
        found[name] = cls
        found.update({f"{name}/{path}": c for path, c in layer_classes(children).items()})
    return found


def kernel_name(instruction: str) -> str:
    """The name XLA gives the kernel it emits for an instruction."""
    return re.sub(r"[^A-Za-z0-9_]", "_", instruction)


def assign_kernels(
    module: HloModule, kernels: Sequence[Kernel], layer_of: Callable[[str], str]
) -> list[KernelLayers]:
    """What each kernel of one predict (in launch order) ran for (module docstring)."""
    by_name = {i.name: i for i in module.entry}
    by_kernel = {kernel_name(i.name): i for i in module.entry}
    found: list[tuple[HloInstruction | None, str]] = []
    for kernel in kernels:
        if kernel.hlo_op is not None and kernel.hlo_op in by_name:
            found.append((by_name[kernel.hlo_op], "hlo_op"))
        elif kernel.name in by_name or kernel.name in by_kernel:
            found.append((by_name.get(kernel.name) or by_kernel[kernel.name], "name"))
        else:
            found.append((None, "none"))
    named = {i.name for i, _ in found if i is not None}
    opaque = [i for i in module.entry if i.opcode not in NO_KERNEL and i.name not in named]
    result: list[KernelLayers] = []
    for index, (instruction, how) in enumerate(found):
        if instruction is not None:
            candidates = [instruction]
        else:
            before = next((i for i, _ in reversed(found[:index]) if i is not None), None)
            after = next((i for i, _ in found[index + 1 :] if i is not None), None)
            low = before.position if before is not None else -1
            high = after.position if after is not None else len(module.entry)
            candidates = [i for i in opaque if low < i.position < high]
            how = "schedule" if candidates else "none"
        layers = dict.fromkeys(layer_of(op) for c in candidates for op in c.op_names)
        result.append(KernelLayers(tuple(c.name for c in candidates), tuple(layers), how))
    return result


def layer_spans(kernels: Sequence[Kernel], assigned: Sequence[KernelLayers]) -> list[LayerSpan]:
    """Consecutive kernels (by start) that ran for the same layers, as one span each."""
    spans: list[LayerSpan] = []
    order = sorted(range(len(kernels)), key=lambda i: kernels[i].start_ns)
    for index in order:
        kernel, what = kernels[index], assigned[index]
        last = spans[-1] if spans else None
        if last is not None and last.layers == what.layers:
            spans[-1] = LayerSpan(
                last.layers,
                last.start_ns,
                max(last.end_ns, kernel.end_ns),
                last.kernel_ns + kernel.end_ns - kernel.start_ns,
                last.kernels + 1,
                tuple(dict.fromkeys((*last.instructions, *what.instructions))),
                last.how if last.how == what.how else "mixed",
                tuple(dict.fromkeys((*last.kernel_names, kernel.name))),
            )
        else:
            spans.append(
                LayerSpan(
                    what.layers,
                    kernel.start_ns,
                    kernel.end_ns,
                    kernel.end_ns - kernel.start_ns,
                    1,
                    what.instructions,
                    what.how,
                    (kernel.name,),
                )
            )
    return spans
