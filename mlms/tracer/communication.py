"""Which spans are communication (collectives between ranks), and which collective each is.

One kind, ``communication``, for every level a collective shows at, so that the level, layer
and kernel tables count it apart from computation:

- GPU kernels of NCCL: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` (NCCL 2.19 and later),
  ``ncclKernel_AllReduce_RING_LL_Sum_float`` (before); HTA's test, ``^nccl.*Kernel``. CUPTI
  names them mangled (``_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgs...``,
  NCCL 2.28 on an H200), Kineto demangled: both match.
- The ops torch records on the host: c10d's (``c10d::allreduce_``, ``c10d::allgather_``,
  ``c10d::_reduce_scatter_base_``, ``c10d::broadcast_``, ``c10d::barrier``), the functional
  collectives that DTensor and ``parallelize_module`` call (``_c10d_functional::all_reduce``,
  ``_c10d_functional::wait_tensor``), ``record_param_comms`` (the op that carries a
  collective's message size in a Kineto trace) and the backends' annotations around the work
  (``nccl:all_reduce``, ``gloo:all_reduce``, on gloo's own threads for a CPU run). These are
  the names torch 2.14's profiler writes for two gloo processes and for NCCL.

The collective's type comes from the name (``collective_of``), and its bus bandwidth factor as
nccl-tests defines it (``BUS_FACTORS``): what ``mlms.analysis.distributed`` reports per
collective. Both exist as Python and as a SQL expression over a ``name`` column, built from one
table of patterns, so that a query and a collector never disagree.
"""

from __future__ import annotations

import re

COMMUNICATION = "communication"
#: The kinds of a GPU kernel span: computation's, and NCCL's.
KERNEL_KINDS = ("kernel", COMMUNICATION)

#: A name that is a collective's kernel, op or annotation (RE2-compatible: DuckDB runs it too).
PATTERN = (
    r"^((_Z\d+)?nccl\w*Kernel|_?c10d(_functional)?::|nccl:|gloo:|mpi:|ucc:|record_param_comms$)"
)
_PATTERN = re.compile(PATTERN)

#: Collective type by a pattern over the name, lower-cased with ``_`` and spaces removed
#: (``AllReduce``, ``all_reduce`` and ``allreduce`` read alike); the first that matches.
COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("sendrecv|send|recv", "send_recv"),
    ("barrier", "barrier"),
    ("wait", "wait"),
)

#: nccl-tests' bus bandwidth over algorithm bandwidth for ``n`` ranks (doc/PERFORMANCE.md):
#: what each rank's link carries, comparable with the hardware's peak whatever the collective.
BUS_FACTORS: dict[str, str] = {
    "all_reduce": "2.0 * ({n} - 1) / {n}",
    "all_gather": "({n} - 1) / {n}",
    "reduce_scatter": "({n} - 1) / {n}",
    "all_to_all": "({n} - 1) / {n}",
    "broadcast": "1.0",
    "reduce": "1.0",
    "send_recv": "1.0",
}

#: Bytes per element of the dtypes Kineto names on ``record_param_comms`` (c10's ScalarType
#: names).
DTYPE_BYTES: dict[str, int] = {
    "Double": 8,
    "Long": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float": 4,
    "Int": 4,
    "BFloat16": 2,
    "Half": 2,
    "Short": 2,
    "ComplexHalf": 4,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
}


def is_communication(name: str) -> bool:
    """Whether a kernel, op or annotation called ``name`` is a collective (module docstring)."""
    return _PATTERN.match(name) is not None


def collective_of(name: str) -> str | None:
    """The collective a communication span performs (``all_reduce``, ...), None if unknown."""
    key = re.sub(r"[_\s]", "", name.lower())
    for pattern, collective in COLLECTIVES:
        if re.search(pattern, key):
            return collective
    return None


def collective_sql(column: str) -> str:
    """``collective_of`` as a DuckDB expression over the string column ``column``."""
    key = f"regexp_replace(lower({column}), '[_\\s]', '', 'g')"
    cases = " ".join(
        f"WHEN regexp_matches({key}, '{pattern}') THEN '{collective}'"
        for pattern, collective in COLLECTIVES
    )
    return f"CASE {cases} END"


def bus_factor_sql(collective: str, ranks: str) -> str:
    """nccl-tests' bus bandwidth factor of the collective in column ``collective`` for the
    rank count in column ``ranks``, as a DuckDB expression (null where it has none)."""
    cases = " ".join(
        f"WHEN '{name}' THEN {factor.format(n=ranks)}" for name, factor in BUS_FACTORS.items()
    )
    return f"(CASE {collective} {cases} END)"


def dtype_bytes_sql(column: str) -> str:
    """Bytes per element of the dtype named in column ``column`` (``DTYPE_BYTES``), as a
    DuckDB expression (null for a dtype not in the table)."""
    cases = " ".join(f"WHEN '{name}' THEN {size}" for name, size in DTYPE_BYTES.items())
    return f"(CASE {column} {cases} END)"
