"""BERT-base and GPT-2 small from their configurations: their layers in the shared layer-type
vocabulary through the analyses on both frameworks, side by side in ``mlms compare``'s table,
GPT-2's generation mode, and half precision on a GPU (skipped without one). Short sequences
and few iterations: the networks are full size. (The logits of both frameworks agree in
tests/test_zoo_models.py.)"""

from __future__ import annotations

import pytest

from mlms.analysis.compare import compare_frameworks
from mlms.analysis.engine import Spans
from mlms.analysis.layers import layer_types
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.tracer.layer_kinds import normalise_kind

SEQ_LEN = 8


def _request(**changes) -> EvaluationRequest:
    values = {
        "batch_sizes": [1],
        "iterations": 2,
        "warmup": 1,
        "min_seconds": 0.0,
        "seq_len": SEQ_LEN,
    }
    return EvaluationRequest(**(values | changes))


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [
        ("aten::scaled_dot_product_attention", "attention"),  # torch, outside leaf modules
        ("aten::_native_multi_head_attention", "attention"),  # torchvision ViT's fast path
        ("Attention", "attention"),  # ONNX Runtime's fusion
        ("LayerNorm", "layernorm"),
        ("SkipLayerNormalization", "layernorm"),
        ("GELUActivation", "gelu"),  # BERT
        ("NewGELUActivation", "gelu"),  # GPT-2
        ("BiasGelu", "gelu"),
        ("Embedding", "embedding"),
        ("Conv1D", "gemm"),  # transformers' Conv1D is GPT-2's linear layer ...
        ("Conv1d", "conv"),  # ... torch's is a convolution
        ("NonDynamicallyQuantizableLinear", "gemm"),  # MultiheadAttention's projection
        ("aten::matmul", "gemm"),
        ("Softmax", "softmax"),
    ],
)
def test_transformer_layers_have_names_in_the_shared_vocabulary(op_type: str, kind: str) -> None:
    assert normalise_kind(op_type) == kind


@pytest.mark.slow
def test_bert_layers_flow_through_the_analyses_on_both_frameworks(store) -> None:
    # ONNX Runtime's first: with no torch weights stored yet, one builder makes both assets.
    ort_record, torch_record = (
        evaluate(
            _request(model="bert_base", framework=framework, trace_level="framework"),
            store=store,
        )
        for framework in ("onnxruntime", "torch")
    )
    records = [torch_record, ort_record]
    spans = Spans.from_store(store, [r.trace_id for r in records])
    kinds = layer_types(spans)
    torch_kinds = set(kinds[kinds["trace_id"] == records[0].trace_id]["kind"])
    ort_kinds = set(kinds[kinds["trace_id"] == records[1].trace_id]["kind"])
    # torch runs attention as one scaled_dot_product_attention; ONNX Runtime as its operators.
    assert {"attention", "gemm", "layernorm", "gelu", "embedding"} <= torch_kinds
    assert {"gemm", "layernorm", "softmax"} <= ort_kinds
    table = compare_frameworks(records, spans)
    assert list(table["options"]) == [f"fp32, seq-len {SEQ_LEN}"] * 2
    assert all(table["layers"] > 100)
    assert records[0].settings["input"] == f"synthetic tokens, length {SEQ_LEN}"


@pytest.mark.slow
def test_gpt2_generation_reports_time_to_first_token_and_per_token(store) -> None:
    record = evaluate(
        _request(model="gpt2_small", framework="torch", batch_sizes=[2], generate=3),
        store=store,
    )
    generation = record.results[0].generation
    assert generation is not None and generation.new_tokens == 3
    assert generation.time_to_first_token_ms.p50 > 0
    per_token = generation.time_per_output_token_ms
    assert per_token is not None and per_token.p50 > 0
    assert generation.tokens_per_second > 0
    assert len(record.predictions.top5[0]) == 5  # next-token top-5 over the vocabulary


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="no CUDA device: fp16 needs one")
def test_bert_runs_in_half_precision_on_the_gpu(store) -> None:
    record = evaluate(
        _request(model="bert_base", framework="torch", hw="gpu", precision="fp16",
                 input_on_device=True),
        store=store,
    )  # fmt: skip
    assert record.settings["dtype"] == "float16"
    assert record.results[0].input_copy is None
