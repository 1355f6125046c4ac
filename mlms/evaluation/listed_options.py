"""The options of an evaluation that change what runs, as a listing shows them; light, so that
a listing of the index needs no record model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class RunOptions:
    precision: str = "fp32"
    compile: str | None = None
    channels_last: bool = False
    cudnn_benchmark: bool = False
    inputs: tuple[str, ...] = ("synthetic",)
    input_on_device: bool = False
    seq_len: int | None = None
    generate: int | None = None
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    tensor_parallel: int = 1

    def line(self) -> str:
        """The precision always, the rest where they differ from the defaults ("fp16, compile
        max-autotune, inputs dataset")."""
        parts = [self.precision]
        if self.compile is not None:
            parts.append(f"compile {self.compile}")
        if self.channels_last:
            parts.append("channels-last")
        if self.cudnn_benchmark:
            parts.append("cudnn benchmark")
        if self.inputs != ("synthetic",):
            shown = self.inputs if len(self.inputs) <= 2 else (*self.inputs[:2], "...")
            parts.append(f"inputs {' '.join(shown)}")
        if self.input_on_device:
            parts.append("input on device")
        if self.seq_len is not None:
            parts.append(f"seq len {self.seq_len}")
        if self.generate is not None:
            parts.append(f"generate {self.generate}")
        if self.tensor_parallel > 1:
            parts.append(f"tensor parallel {self.tensor_parallel}")
        threads = (self.intra_op_threads, self.inter_op_threads)
        if threads != (None, None):
            parts.append(f"threads {'/'.join('-' if t is None else str(t) for t in threads)}")
        return ", ".join(parts)


FIELDS = tuple(field.name for field in dataclasses.fields(RunOptions))
