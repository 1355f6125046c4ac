"""A torch model split over the ranks of a process group by tensor parallelism.

The split comes from the maintained libraries, never from tensors sharded by hand: a
transformers family with a tensor-parallel plan of its own (``config.base_model_tp_plan``:
Llama, Qwen2, Mistral, ...) is split by that plan; BERT-style encoders, which transformers gives
none, by ``ENCODER_PLANS`` (Megatron's split of a transformer layer: the attention's query, key
and value and the first feed-forward layer by columns, the layers after them by rows). Both are
applied by torch's ``parallelize_module``: a column-parallel layer's output stays on its rank
(a slice of the heads or of the hidden units), a row-parallel layer all-reduces its partial sums,
so each rank runs the whole forward on its shards and ends with the same output.

Every rank is one process (``mlms.evaluation.tensor_parallel`` starts them) with the default
process group set up before the predictor loads: NCCL on GPUs, gloo on the CPU.
"""

from __future__ import annotations

from typing import Any

from mlms.assets.architectures import architecture_of
from mlms.errors import InvalidArgument
from mlms.manifest import ModelManifest
from mlms.predictors.ranks import ProcessGroupRanks
from mlms.predictors.torch_predictor import TorchPredictor

#: Base model class -> its layers' split, for families that transformers gives no plan.
ENCODER_PLANS: dict[str, dict[str, str]] = {
    name: {
        "encoder.layer.*.attention.self.query": "colwise",
        "encoder.layer.*.attention.self.key": "colwise",
        "encoder.layer.*.attention.self.value": "colwise",
        "encoder.layer.*.attention.output.dense": "rowwise",
        "encoder.layer.*.intermediate.dense": "colwise",
        "encoder.layer.*.output.dense": "rowwise",
    }
    for name in ("BertModel", "RobertaModel")
}
#: Attention attributes that count heads (or their width) and must count a rank's share once
#: the projections are split: BERT's self-attention reshapes with them; Llama's uses -1.
HEAD_COUNTS = ("num_attention_heads", "all_head_size", "num_heads", "num_key_value_heads")


def split_plan(module: Any) -> tuple[str, dict[str, str]] | None:
    """The path of ``module``'s transformers base model and its split (layer path pattern ->
    ``colwise`` or ``rowwise``), or None where the model has none."""
    for path, child in module.named_modules():
        config = getattr(child, "config", None)
        if config is None or getattr(child, "base_model", None) is not child:
            continue
        plan = getattr(config, "base_model_tp_plan", None) or ENCODER_PLANS.get(
            type(child).__name__
        )
        if not plan:
            return None
        unknown = sorted(set(plan.values()) - {"colwise", "rowwise"})
        if unknown:
            return None  # packed or sequence-parallel styles: not a split torch's styles take
        return path, dict(plan)
    return None


def check_split(module: Any, model: str, ranks: int) -> None:
    """One line unless ``module`` (built anywhere, the meta device too) splits over ``ranks``:
    it has a plan, and every head count it splits divides by ``ranks``."""
    found = split_plan(module)
    if found is None:
        raise InvalidArgument(
            f"model {model!r} has no tensor-parallel split: expected a transformers model with a "
            "tensor-parallel plan (Llama, Qwen2, Mistral, ...) or a BERT-style encoder"
        )
    config = _base_model(module, found[0]).config
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, name, None)
        if heads is not None and heads % ranks:
            raise InvalidArgument(
                f"--tensor-parallel {ranks}: {model!r} has {heads} {name.replace('_', ' ')[4:]}, "
                "which the ranks must share evenly; expected a divisor of it"
            )


def check_split_model(manifest: ModelManifest, ranks: int) -> None:
    """``check_split`` of the manifest's network, built on the meta device (no weights)."""
    import torch

    with torch.device("meta"):
        module = architecture_of(manifest)
    check_split(module, manifest.name, ranks)


def split(torch: Any, module: Any, mesh: Any) -> Any:
    """``module`` split over ``mesh`` in place (its plan from ``split_plan``)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    found = split_plan(module)
    if found is None:
        raise InvalidArgument("this model has no tensor-parallel split")
    path, plan = found
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    base = _base_model(module, path)
    parallelize_module(base, mesh, {key: styles[style]() for key, style in plan.items()})
    ranks = mesh.size()
    for layer in base.modules():
        if isinstance(layer, torch.nn.Linear):
            continue
        for name in HEAD_COUNTS:
            if isinstance(getattr(layer, name, None), int) and layer is not base:
                setattr(layer, name, getattr(layer, name) // ranks)
    return module


def _base_model(module: Any, path: str) -> Any:
    return module.get_submodule(path) if path else module


class SplitTorchPredictor(TorchPredictor):
    """The torch predictor of one rank: the model split over the default process group."""

    # torch.compile traces through DTensor, and its graph drops the dispatch that makes an eager
    # split host-bound. CUDA graphs (reduce-overhead) capture the NCCL collectives and replay a
    # split 1.7x faster at batch 1 (tinyllama_1b on two H200s, torch 2.11); a rank frees them
    # before it leaves the process group (``tensor_parallel_rank.joined``), which otherwise
    # never ends (benchmarks/RESULTS.md, "Several GPUs"). Autotuning is not checked on a split.
    compile_modes = ("default", "reduce-overhead")
    # DTensor's dispatch costs 4.7x more under inference_mode than under no_grad (tinyllama_1b
    # split over two H200s, batch 1: 402 against 86 ms a forward, benchmarks/RESULTS.md).
    autograd_off = "no_grad"

    def __init__(self, manifest, asset_path, options):
        import torch
        from torch.distributed.device_mesh import init_device_mesh

        self.ranks = ProcessGroupRanks(torch)
        device_type = "cuda" if options.device.startswith("cuda") else "cpu"
        self._mesh = init_device_mesh(device_type, (self.ranks.size,))
        super().__init__(manifest, asset_path, options)

    def _placed(self, module: Any) -> Any:
        return split(self._torch, super()._placed(module), self._mesh)

    def settings(self) -> dict[str, Any]:
        return super().settings() | {
            "tensor_parallel": self.ranks.size,
            "rank": self.ranks.rank,
            "backend": self._torch.distributed.get_backend(),
        }
