"""Options that change what an evaluation runs, shared by ``mlms eval`` and ``mlms compare``:
each becomes the request field of its name (see ``EvaluationRequest``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mlms.evaluation.precisions import PRECISIONS

F = TypeVar("F", bound=Callable[..., Any])

#: The request fields these options fill, by parameter name.
FIELDS = (
    "seq_len",
    "precision",
    "compile",
    "channels_last",
    "cudnn_benchmark",
    "input_on_device",
    "input_shapes",
    "tensor_parallel",
)


def run_options(command: F) -> F:
    options = [
        click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=AxBx..",
                     help="A model file: the shape of an input it leaves open, batch axis "
                          "first, e.g. input=1x3x224x224 (repeatable)."),
        click.option("--seq-len", type=int, default=None,
                     help="Token models: tokens per input (one fixed length)."),
        click.option("--precision", default="fp32", show_default=True,
                     type=click.Choice(PRECISIONS),
                     help="What the model computes in, where device and framework support it."),
        click.option("--compile", is_flag=False, flag_value="default", default=None,
                     metavar="[MODE]",
                     help="torch.compile (default, reduce-overhead, max-autotune), ONNX "
                          "Runtime's graph optimisation level (all, extended, basic, disable) "
                          "or TensorFlow's XLA (xla)."),
        click.option("--channels-last", is_flag=True,
                     help="CNNs on torch: the NHWC memory format."),
        click.option("--cudnn-benchmark", is_flag=True,
                     help="torch on a GPU: cuDNN's autotuning (torch.backends.cudnn.benchmark), "
                          "which times convolution algorithms per input shape in the warm-up."),
        click.option("--input-on-device", is_flag=True,
                     help="GPU: copy the inputs to the device before measuring (otherwise each "
                          "iteration copies them from pinned host memory, timed on its own)."),
        click.option("--tensor-parallel", type=int, default=1, show_default=True, metavar="N",
                     help="Split the model over N devices of --hw's kind on one host (torch; "
                          "one process a rank: NCCL between GPUs, gloo on the CPU)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def run_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Takes the options' values out of a command's keyword arguments."""
    from mlms.assets.file_models import parse_input_shape

    fields = {name: values.pop(name) for name in FIELDS}
    fields["input_shapes"] = [parse_input_shape(text) for text in fields["input_shapes"]]
    return fields
