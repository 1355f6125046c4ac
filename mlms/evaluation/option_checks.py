"""Options that change what runs (compile, channels-last, input placement, generation): which
frameworks, models and devices admit them, checked before any asset is built or loaded. The
precision a device supports is the predictor's to check, where the device is at hand."""

from __future__ import annotations

from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRequest
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor
from mlms.tracer.levels import TraceLevel


def compile_mode(request: EvaluationRequest, cls: type[Predictor]) -> str | None:
    """The framework's mode ``--compile`` names ("default": its first), or None."""
    if request.compile is None:
        return None
    modes = cls.compile_modes
    if not modes:
        raise InvalidArgument(
            f"--compile {request.compile}: framework {cls.framework!r} has no compiled mode "
            "here; expected torch (torch.compile), onnxruntime (graph optimisation levels) or "
            "tensorflow (xla)"
        )
    mode = modes[0] if request.compile == "default" else request.compile
    if mode not in modes:
        raise InvalidArgument(
            f"--compile {request.compile}: {cls.framework} takes {', '.join(modes)} (a bare "
            f"--compile: {modes[0]})"
        )
    if not cls.has_layers(mode) and request.trace_level in (TraceLevel.FRAMEWORK, TraceLevel.FULL):
        raise InvalidArgument(
            f"--compile {request.compile} with trace level {request.trace_level.label!r}: "
            f"{cls.framework}'s compiled graph has no layers to trace (nor launches that ncu's "
            "counter run would match); expected 'model' or below, or a GPU level "
            "(ml_library, system_library, hardware), which traces its kernels under the model"
        )
    return mode


def check_options(
    request: EvaluationRequest, manifest: ModelManifest, cls: type[Predictor]
) -> None:
    """The options the model and the framework's predictor must admit, wherever they run."""
    spec = manifest.inputs[0]
    if request.channels_last:
        if not cls.has_channels_last:
            raise InvalidArgument(
                f"--channels-last: a torch memory format; framework {cls.framework!r} has none"
            )
        if spec.layout != "CHW" or len(spec.shape) != 3:
            raise InvalidArgument(
                f"--channels-last: model {manifest.name!r} takes inputs of layout "
                f"{spec.layout!r}; channels-last applies to CHW image batches (CNNs)"
            )
    if request.cudnn_benchmark and not cls.has_cudnn_benchmark:
        raise InvalidArgument(
            f"--cudnn-benchmark: torch's cuDNN autotuning switch; framework {cls.framework!r} "
            "has none; expected torch"
        )
    if request.input_on_device and not cls.stages_on_gpu:
        raise InvalidArgument(
            f"--input-on-device: framework {cls.framework!r} reads its inputs from host "
            "memory; expected torch or jax"
        )
    if request.generate is not None:
        if manifest.outputs[0].type != "next_token":
            raise InvalidArgument(
                f"--generate {request.generate}: model {manifest.name!r} is not a language "
                "model; expected one whose output is next-token logits (e.g. gpt2_small)"
            )
        if not cls.generates:
            raise InvalidArgument(
                f"--generate {request.generate}: framework {cls.framework!r} has no key-value "
                "cache here; expected torch"
            )
        if request.compile is not None:
            raise InvalidArgument(
                f"--generate {request.generate} with --compile {request.compile}: generation "
                "runs eager; drop one of them"
            )


def check_device_options(request: EvaluationRequest, cls: type[Predictor], device: str) -> None:
    """The options the device that the host picked must admit."""
    if request.input_on_device and device == "cpu":
        raise InvalidArgument(
            "--input-on-device: the evaluation runs on cpu, where the inputs already are; "
            "expected a GPU (--hw with a GPU)"
        )
    if device != "cpu" and request.trace_level > TraceLevel.FRAMEWORK and not cls.gpu_collectors:
        raise InvalidArgument(
            f"trace level {request.trace_level.label!r} on {cls.framework}: its framework level "
            "holds CUPTI already (each layer span carries its kernels' names and GPU time); "
            "expected 'framework' or below"
        )
