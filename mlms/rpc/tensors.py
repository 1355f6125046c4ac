"""numpy arrays <-> ``mlms.v2.Tensor`` (raw bytes, shape, dtype), checked on the way in."""

from __future__ import annotations

import math

import numpy as np

from mlms.errors import InvalidArgument
from mlms.protos.mlms.v2 import types_pb2
from mlms.reasons import short_numbers

DTYPES = ("float32", "float16", "uint8", "int64")
#: Image batches have four; numpy stops at 64.
MAX_AXES = 8


def to_proto(array: np.ndarray) -> types_pb2.Tensor:
    array = np.ascontiguousarray(array)
    if array.dtype.name not in DTYPES:
        raise InvalidArgument(f"tensor dtype {array.dtype.name!r}: expected one of {DTYPES}")
    return types_pb2.Tensor(
        data=array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(),
        shape=list(array.shape),
        dtype=array.dtype.name,
    )


def from_proto(tensor: types_pb2.Tensor) -> np.ndarray:
    """The array a Tensor message holds; garbage (wrong size, dtype, shape) is InvalidArgument."""
    if tensor.dtype not in DTYPES:
        raise InvalidArgument(f"tensor dtype {tensor.dtype!r}: expected one of {DTYPES}")
    shape = tuple(tensor.shape)
    if not shape or len(shape) > MAX_AXES or any(d < 0 for d in shape):
        raise InvalidArgument(
            f"tensor shape {short_numbers(shape)}: expected 1 to {MAX_AXES} non-negative dimensions"
        )
    dtype = np.dtype(tensor.dtype).newbyteorder("<")
    expected = math.prod(shape) * dtype.itemsize
    data = tensor.data  # each read of a bytes field copies it: read it once
    if len(data) != expected:
        raise InvalidArgument(
            f"tensor data is {len(data)} bytes, but shape {list(shape)} of "
            f"{tensor.dtype} needs {expected}"
        )
    try:
        # A writable copy: frameworks (torch.from_numpy) warn on read-only buffers.
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
    except ValueError as exc:  # no data, but a shape numpy cannot hold (2**62 x 2**62 x 0)
        raise InvalidArgument(
            f"tensor shape {list(shape)} is too large for an array: {exc}"
        ) from None
