"""The plan of an evaluation: its request checked against the model it names and the framework
that runs it. Whoever takes the request (the embedded client, an agent's ``Evaluate``) makes the
plan once and hands it to the runner (``mlms.evaluation.runner.evaluate``), so that a bad model,
framework or option fails before any child process, device or asset is touched. What depends on
the host that runs it (devices, inputs, the asset) the runner settles there."""

from __future__ import annotations

from dataclasses import dataclass

from mlms.catalog.resolve import resolve_model, resolve_served
from mlms.evaluation.option_checks import check_options, compile_mode
from mlms.evaluation.record import EvaluationRequest
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor
from mlms.predictors.registry import choose_framework, predictor_class
from mlms.store.base import ObjectStore


@dataclass(frozen=True)
class EvaluationPlan:
    #: As asked: the record keeps it so (its framework None where the plan chose one).
    request: EvaluationRequest
    manifest: ModelManifest
    framework: str
    framework_version: str
    #: The class that runs it: the framework's predictor, or a split model's.
    predictor: type[Predictor]
    #: The framework's mode that ``--compile`` names; None: the model as shipped.
    compile: str | None


def plan_evaluation(
    request: EvaluationRequest, store: ObjectStore | None, *, served: bool = False
) -> EvaluationPlan:
    """The model resolved (``served``: by name only, as a server takes it), the framework
    chosen, the predictor class found and the options checked against them."""
    resolve = resolve_served if served else resolve_model
    manifest = resolve(request.model, store, input_shapes=request.input_shapes)
    framework, version = choose_framework(manifest, request.framework)
    if request.tensor_parallel > 1:
        from mlms.evaluation.tensor_parallel import check_split_request
        from mlms.predictors.tensor_parallel import SplitTorchPredictor, check_split_model

        check_split_request(request, framework)
        check_split_model(manifest, request.tensor_parallel)
        cls: type[Predictor] = SplitTorchPredictor
    else:
        cls = predictor_class(framework)
    return checked_plan(request, manifest, (framework, version), cls)


def checked_plan(
    request: EvaluationRequest,
    manifest: ModelManifest,
    framework: tuple[str, str],
    cls: type[Predictor],
) -> EvaluationPlan:
    """The plan of a model and framework chosen already (a split model's rank has them from
    its launcher), its options checked."""
    check_options(request, manifest, cls)
    return EvaluationPlan(
        request=request,
        manifest=manifest,
        framework=framework[0],
        framework_version=framework[1],
        predictor=cls,
        compile=compile_mode(request, cls),
    )
