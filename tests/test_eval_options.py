"""Options that change what runs (precision, compile, channels-last, sequence length, input
placement, generation): recorded where they apply, one clear error where they do not, and the
GPU input pipeline's logic on the CPU (a fake device copy); the GPU itself in tests/test_gpu.py
style, skipped without one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from mlms.analysis.compare import run_options
from mlms.assets.manager import AssetManager
from mlms.catalog.zoo import get_model
from mlms.cli.main import cli
from mlms.errors import InvalidArgument
from mlms.evaluation.feed import ON_DEVICE, PINNED, Feed, placement
from mlms.evaluation.inputs import open_inputs
from mlms.evaluation.measure import _copy_result
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.predictors.base import InputCopy, PredictorOptions
from mlms.predictors.onnxruntime_predictor import OnnxRuntimePredictor
from mlms.tracer.archive import read_table
from mlms.tracer.levels import TraceLevel
from mlms.tracer.tracer import Tracer


def _request(**changes: Any) -> EvaluationRequest:
    values = {
        "model": "digits_cnn",
        "framework": "torch",
        "batch_sizes": [2],
        "iterations": 3,
        "warmup": 1,
        "min_seconds": 0.0,
    }
    return EvaluationRequest(**(values | changes))


def test_bf16_on_the_cpu_is_recorded_and_compared(store) -> None:
    record = evaluate(_request(precision="bf16", channels_last=True), store=store)
    assert record.request.precision == "bf16"
    assert record.settings["dtype"] == "bfloat16" and record.settings["channels_last"] is True
    assert record.settings["input_placement"] == "host memory, read in place"
    assert record.results[0].input_copy is None
    assert run_options(record) == "bf16, channels-last"


def test_cudnn_benchmark_is_set_on_each_load_and_recorded(store) -> None:
    """A process-wide switch: set by the load that asks for it, and off again at the next load
    that does not, whatever ran before in the process."""
    import torch

    tuned = evaluate(_request(cudnn_benchmark=True), store=store)
    assert torch.backends.cudnn.benchmark is True
    assert tuned.settings["cudnn_benchmark"] is True and tuned.request.cudnn_benchmark
    assert run_options(tuned) == "fp32, cudnn benchmark"
    assert tuned.request.options() == "fp32, cudnn benchmark"
    plain = evaluate(_request(), store=store)
    assert torch.backends.cudnn.benchmark is False and plain.settings["cudnn_benchmark"] is False
    assert run_options(plain) == "fp32"


def test_cudnn_benchmark_travels_from_the_command_lines() -> None:
    """``mlms eval``/``compare`` take it as a run option, ``mlms sweep`` for every cell."""
    from mlms.cli.evaluation_options import run_fields
    from mlms.evaluation.sweep import SweepSpec, new_sweep

    fields = run_fields(
        {"seq_len": None, "precision": "tf32", "compile": None, "channels_last": False,
         "cudnn_benchmark": True, "input_on_device": False, "input_shapes": (),
         "tensor_parallel": 1}
    )  # fmt: skip
    assert fields["cudnn_benchmark"] is True
    spec = SweepSpec(models=["digits_cnn"], frameworks=["torch"], batch_sizes=[1, 2], hw=["cpu"],
                     cudnn_benchmark=True)  # fmt: skip
    state = new_sweep(spec)
    assert state.group(state.groups()[0]).request.cudnn_benchmark is True
    result = CliRunner().invoke(cli, ["sweep", "--resume", "abc", "--cudnn-benchmark"])
    assert result.exit_code == 1 and "nor --cudnn-benchmark" in str(result.exception)
    refused = CliRunner().invoke(
        cli, ["eval", "-m", "digits_cnn", "-f", "onnxruntime", "--cudnn-benchmark", "-n", "1"]
    )
    assert refused.exit_code == 1 and "\n" not in str(refused.exception)
    assert str(refused.exception).endswith("framework 'onnxruntime' has none; expected torch")


def test_cudnn_benchmark_on_another_framework_is_invalid_argument_over_grpc(store) -> None:
    import grpc

    from mlms.agent.service import Load, PredictorService
    from mlms.protos.mlms.v2 import calls_pb2, evaluation_pb2, predictor_pb2_grpc
    from mlms.rpc.options import CHANNEL_OPTIONS
    from mlms.rpc.otlp import process_provider
    from mlms.rpc.serving import Service, start_server

    service = PredictorService(
        framework="onnxruntime", store=store, describe=lambda: '{"id": "test"}',
        agent_labels=lambda: {"agent_id": "test"}, load=Load(),
        provider=process_provider("mlms-agent", None),
    )  # fmt: skip
    running = start_server(
        "127.0.0.1:0",
        [Service("mlms.v2.Predictor", service, predictor_pb2_grpc.add_PredictorServicer_to_server)],
    )
    spec = evaluation_pb2.EvaluationSpec(model="digits_cnn", batch_sizes=[1], cudnn_benchmark=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}", options=CHANNEL_OPTIONS) as channel:
            stub = predictor_pb2_grpc.PredictorStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Evaluate(calls_pb2.EvaluateRequest(spec=spec)))
    finally:
        running.stop(0)
        service.close_all()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("--cudnn-benchmark: torch's cuDNN autotuning switch")


def test_onnxruntime_optimisation_level_is_its_compile_mode(store) -> None:
    record = evaluate(_request(framework="onnxruntime", compile="basic"), store=store)
    assert record.settings["graph_optimization"] == "ORT_ENABLE_BASIC"
    assert run_options(record) == "fp32, compile: ORT_ENABLE_BASIC"


def test_onnxruntime_fp16_runs_the_converted_graph(store, mlms_home) -> None:
    """fp16 on ONNX Runtime: the stored graph converted at load, fp32 inputs and outputs kept;
    its layers named as the fp32 graph's (plus the output's cast), its answers close to them."""
    runs = {
        precision: evaluate(
            _request(framework="onnxruntime", precision=precision, trace_level="framework"),
            store=store,
        )
        for precision in ("fp32", "fp16")
    }
    assert runs["fp16"].settings["dtype"] == "float16" and run_options(runs["fp16"]) == "fp16"

    def layers(record) -> set[str]:
        table = read_table(store, record.trace_id).to_pandas()
        return set(table.name[table.level == int(TraceLevel.FRAMEWORK)])

    assert layers(runs["fp16"]) - layers(runs["fp32"]) == {"graph_output_cast0"}
    manifest = get_model("digits_cnn")
    asset = AssetManager(store, mlms_home / "cache").ensure(manifest, "onnxruntime")
    batch = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    logits = {}
    for precision in ("fp32", "fp16"):
        options = PredictorOptions(precision=precision)
        with OnnxRuntimePredictor(manifest, asset.path, options) as predictor:
            logits[precision] = predictor.predict(batch)
    assert logits["fp16"].dtype == np.float32
    scale = np.abs(logits["fp32"]).max()
    np.testing.assert_allclose(logits["fp16"], logits["fp32"], atol=1e-2 * scale)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"precision": "fp16"}, r"--precision fp16: torch on cpu supports fp32, bf16$"),
        (
            {"precision": "bf16", "framework": "onnxruntime"},
            r"--precision bf16: onnxruntime on cpu supports fp32, fp16$",
        ),
        (
            {"precision": "bf16", "framework": "tensorflow"},
            r"--precision bf16: tensorflow on cpu supports fp32$",
        ),
        (
            {"compile": "turbo"},
            r"--compile turbo: torch takes default, reduce-overhead, max-autotune \(a bare",
        ),
        ({"compile": "default", "trace_level": "framework"}, r"compiled graph has no layers"),
        ({"compile": "default", "trace_level": "full"}, r"or a GPU level \(ml_library, "),
        ({"compile": "default", "trace_level": "hardware"}, r"'hardware' has no collector on cpu"),
        ({"channels_last": True, "framework": "onnxruntime"}, r"a torch memory format"),
        ({"channels_last": True, "model": "bert_base"}, r"'bert_base' takes inputs of layout"),
        (
            {"cudnn_benchmark": True, "framework": "onnxruntime"},
            r"^--cudnn-benchmark: torch's cuDNN autotuning switch; framework 'onnxruntime' has "
            r"none; expected torch$",
        ),
        ({"input_on_device": True}, r"--input-on-device: the evaluation runs on cpu"),
        ({"generate": 4}, r"--generate 4: model 'digits_cnn' is not a language model"),
        (
            {"generate": 4, "model": "gpt2_small", "framework": "onnxruntime"},
            r"framework 'onnxruntime' has no key-value cache",
        ),
        ({"seq_len": 8}, r"--seq-len 8: model 'digits_cnn' takes CHW images"),
        ({"seq_len": 513, "model": "bert_base"}, r"--seq-len 513: .* takes 1 to 512 tokens"),
    ],
)
def test_an_option_a_run_cannot_take_is_one_clear_error(store, changes, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        evaluate(_request(**changes), store=store)


def test_a_bad_precision_names_the_value_and_the_choices() -> None:
    with pytest.raises(ValidationError, match=r"precision 'fp8': expected one of fp32, tf32"):
        _request(precision="fp8")
    result = CliRunner().invoke(cli, ["eval", "-m", "digits_cnn", "--precision", "fp8"])
    assert result.exit_code == 2 and "'fp8' is not one of 'fp32', 'tf32'" in result.output


def test_token_inputs_take_the_sequence_length() -> None:
    source = open_inputs(get_model("gpt2_small"), ["synthetic"], seed=0, seq_len=8)
    batch = source.take(0, 3).tensor
    assert batch.shape == (3, 8) and batch.dtype == np.int64
    assert batch.min() >= 0 and batch.max() < 50257
    assert source.name == "synthetic tokens, length 8"


def test_synthetic_images_are_one_seeded_draw_of_the_whole_pool() -> None:
    """Drawn sample by sample, the pool holds the values one draw of all of it gives, so
    records of a seed stay comparable whatever way the pool is made."""
    manifest = get_model("resnet50")
    source = open_inputs(manifest, ["synthetic"], seed=3, pool=5)
    whole = np.random.default_rng(3).standard_normal((5, 3, 224, 224)).astype(np.float32)
    batch = source.take(0, 5).tensor
    assert batch.dtype == np.float32 and np.array_equal(batch, whole)


class _Device:
    """A predictor whose stage copies to a pretend device, counted."""

    copies_input = True

    def __init__(self) -> None:
        self.staged: list[np.ndarray] = []

    def stage(self, batch: np.ndarray) -> tuple[Any, InputCopy]:
        self.staged.append(batch)
        return ("on device", batch), InputCopy(batch.nbytes, 1e-3)


def _tracer() -> Tracer:
    return Tracer(TraceLevel.MODEL, resource={})


def test_each_iteration_copies_its_batch_as_a_step_of_its_own(store) -> None:
    device, tracer = _Device(), _tracer()
    source = open_inputs(get_model("digits_cnn"), ["synthetic"], seed=0)
    feed = Feed(device, source, 4, on_device=False)
    with tracer.run(1, TraceLevel.MODEL):
        for index in range(3):
            where, batch = feed.next(index, tracer)
            assert where == "on device" and batch.shape == (4, 1, 8, 8)
    tracer.shutdown()
    copies = [r for r in tracer.records() if r.name == "input copy"]
    assert len(copies) == 3 and all(c.kind == "memcpy" for c in copies)
    assert copies[0].attributes["mlms.bytes"] == 4 * 64 * 4
    assert len(feed.copies) == 3 and placement(device, False) == PINNED
    result = _copy_result(feed.copies)
    assert result.bytes == 1024 and result.gb_per_s == pytest.approx(1024 / 1e-3 / 1e9)


def test_inputs_on_the_device_are_copied_once_before_measuring() -> None:
    device, tracer = _Device(), _tracer()
    source = open_inputs(get_model("digits_cnn"), ["synthetic"], seed=0)  # 64 samples
    feed = Feed(device, source, 48, on_device=True)
    # take(i) repeats every 64 / gcd(64, 48) = 4 batches: each is copied once, up front.
    assert len(device.staged) == 4
    with tracer.run(1, TraceLevel.MODEL):
        batches = [feed.next(index, tracer)[1] for index in range(8)]
    tracer.shutdown()
    assert len(device.staged) == 4 and not feed.copies and not tracer.records()
    for index in range(8):
        np.testing.assert_array_equal(batches[index], source.take(index, 48).tensor)
    assert placement(device, True) == ON_DEVICE


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="no CUDA device: the pinned copy needs one")
def test_torch_copies_from_pinned_memory_on_the_gpu(store) -> None:
    record = evaluate(_request(hw="gpu", batch_sizes=[64]), store=store)
    copy = record.results[0].input_copy
    assert record.settings["input_placement"] == PINNED
    assert copy is not None and copy.bytes == 64 * 64 * 4 and copy.gb_per_s > 0
    on_device = evaluate(_request(hw="gpu", batch_sizes=[64], input_on_device=True), store=store)
    assert on_device.settings["input_placement"] == ON_DEVICE
    assert on_device.results[0].input_copy is None
