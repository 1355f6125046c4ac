"""The configurations to choose among: framework x precision x compile mode x channels-last x
threads (CPU) x batch size, as far as the device, the frameworks and the model admit them, with
a line for each thing left out and why."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from mlms.advise.record import NO_COMPILE, AdviceRequest, Config
from mlms.errors import InvalidArgument
from mlms.frameworks import FRAMEWORKS, installed_frameworks, runs_apart
from mlms.manifest import ModelManifest
from mlms.predictors.base import Predictor
from mlms.predictors.registry import predictor_class

#: Compile modes tried unless named: each framework's as shipped, and the one mode most
#: likely to pay off. The others are left out by default, each for its reason.
DEFAULT_MODES = {"torch": ("default",), "onnxruntime": ("basic",), "tensorflow": ("xla",)}
WHY_NOT_BY_DEFAULT = {
    "max-autotune": "tunes kernels for minutes per shape",
    "reduce-overhead": "CUDA graphs: it pays off on a GPU only",
    "extended": "lies between basic and all (the default)",
    "disable": "slower than basic by construction",
    "all": "is what onnxruntime runs as shipped (none)",
}
CPU_BATCH_SIZES = [1, 8, 32]
#: The framework whose models split by tensor parallelism (``mlms.predictors.tensor_parallel``).
SPLIT_FRAMEWORK = "torch"
GPU_BATCH_SIZES = [1, 16, 64, 256]


@dataclass
class Space:
    configs: list[Config]
    frameworks: dict[str, str]  # name -> installed version
    left_out: list[str] = field(default_factory=list)
    #: On a GPU: each configuration whose compile mode another mode of the space replays as one
    #: CUDA graph (``Predictor.graphed_modes``), to that configuration.
    graphed: dict[Config, Config] = field(default_factory=dict)

    def graphed_by(self, config: Config) -> Config | None:
        """The configuration still in the space that does ``config``'s work on the device as
        one CUDA graph, so takes no longer by any objective; None where there is none (or it
        failed and left the space)."""
        twin = self.graphed.get(config)
        return twin if twin is not None and twin in self.configs else None

    def baseline(self, framework: str, batch_size: int) -> Config:
        """fp32, as shipped, at the most threads the space has."""
        threads = max(
            (c.threads for c in self.configs if c.framework == framework and c.threads),
            default=None,
        )
        return Config(framework=framework, threads=threads, batch_size=batch_size)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({c.batch_size for c in self.configs})


def build_space(
    request: AdviceRequest,
    manifest: ModelManifest,
    capability: tuple[int, int] | None,
    cores: int,
) -> Space:
    """The space for ``request`` on a device (``capability``: a GPU's compute capability, None
    for the CPU, with ``cores`` logical cores)."""
    left: list[str] = []
    ranks = request.tensor_parallel
    if ranks > 1:
        from mlms.predictors.tensor_parallel import check_split_model

        check_split_model(manifest, ranks)
        # Each rank's threads come from its share of the cores (the launcher's default).
        cores = max(1, cores // ranks)
    frameworks = _frameworks(request, manifest, left)
    on_cpu = capability is None
    image = manifest.inputs[0].layout == "CHW" and len(manifest.inputs[0].shape) == 3
    threads: list[int | None]
    if on_cpu:
        threads = list(request.threads or sorted({1, max(1, cores // 2), cores}))
    else:
        threads = [None]
        if request.threads:
            left.append("threads: on a GPU the CPU threads do not set the device's time")
    if request.objective == "latency":
        batch_sizes = [1]
        left.append("batch sizes: the latency objective runs batch size 1")
    else:
        batch_sizes = request.batch_sizes or (CPU_BATCH_SIZES if on_cpu else GPU_BATCH_SIZES)
    if request.compile_modes is not None:
        known = {m for name in frameworks for m in _predictor(name, ranks).compile_modes}
        unknown = [m for m in request.compile_modes if m != NO_COMPILE and m not in known]
        if unknown:
            raise InvalidArgument(
                f"compile mode {', '.join(unknown)}: expected {NO_COMPILE} or a mode of "
                f"{', '.join(frameworks)}: {', '.join(sorted(known))}"
            )
    configs: list[Config] = []
    for name in frameworks:
        cls = _predictor(name, ranks)
        dropped = [m for m in predictor_class(name).compile_modes if m not in cls.compile_modes]
        if dropped:
            left.append(
                f"compile {', '.join(dropped)} on {name}: a split model compiles in "
                f"{', '.join(cls.compile_modes)} only"
            )
        precisions = _precisions(request, cls.precisions(capability), name, on_cpu, left)
        modes = _modes(request, cls.compile_modes, name, on_cpu, left)
        layouts = [False]
        if request.channels_last is not False:
            if cls.has_channels_last and image:
                layouts = [True] if request.channels_last else [False, True]
            elif not cls.has_channels_last:
                left.append(f"channels-last: a torch memory format; {name} has none")
            else:
                left.append(f"channels-last: model {manifest.name} takes no CHW images")
        for precision, mode, layout, count, batch in itertools.product(
            precisions, modes, layouts, threads, batch_sizes
        ):
            configs.append(
                Config(
                    framework=name,
                    precision=precision,
                    compile=mode,
                    channels_last=layout,
                    threads=count,
                    batch_size=batch,
                )
            )
    graphed = {} if on_cpu else _graphed(configs, ranks)
    return Space(configs, frameworks, list(dict.fromkeys(left)), graphed)


def _graphed(configs: list[Config], ranks: int) -> dict[Config, Config]:
    """Each configuration whose compile mode another mode replays as one CUDA graph, to that
    configuration where the space has it."""
    present = set(configs)
    graphed = {}
    for config in configs:
        mode = _predictor(config.framework, ranks).graphed_modes.get(config.compile or "")
        twin = config.model_copy(update={"compile": mode})
        if mode is not None and twin in present:
            graphed[config] = twin
    return graphed


def _predictor(name: str, ranks: int) -> type[Predictor]:
    """The class that runs framework ``name``'s evaluations: a split model's over ``ranks``
    processes (torch only, see ``_frameworks``), else the framework's own."""
    if ranks > 1:
        from mlms.predictors.tensor_parallel import SplitTorchPredictor

        return SplitTorchPredictor
    return predictor_class(name)


def _frameworks(request: AdviceRequest, manifest: ModelManifest, left: list[str]) -> dict[str, str]:
    installed = installed_frameworks()
    wanted = request.frameworks or [
        f for f in FRAMEWORKS if f in manifest.framework_names and not _apart(f, left)
    ]
    chosen: dict[str, str] = {}
    for name in wanted:
        constraint = manifest.constraint_for(name)
        version = installed.get(name)
        if name not in FRAMEWORKS:
            raise InvalidArgument(f"framework {name!r}: expected some of {', '.join(FRAMEWORKS)}")
        if request.tensor_parallel > 1 and name != SPLIT_FRAMEWORK:
            why = (
                f"does not split models here (--tensor-parallel {request.tensor_parallel} "
                f"takes {SPLIT_FRAMEWORK})"
            )
        elif constraint is None:
            why = f"model {manifest.name} does not support it"
        elif version is None:
            why = "not installed here"
        elif not constraint.admits(version):
            why = f"the model needs {constraint.version}, installed is {version}"
        else:
            chosen[name] = version
            continue
        if request.frameworks:
            raise InvalidArgument(f"framework {name!r}: {why}")
        left.append(f"{name}: {why}")
    if not chosen:
        raise InvalidArgument(
            f"model {manifest.name!r}: no installed framework runs it here (it supports "
            f"{', '.join(manifest.framework_names)})"
        )
    return chosen


def _apart(framework: str, left: list[str]) -> bool:
    """Whether a framework is left out by default: one that runs in a process of its own
    here starts one per evaluation, which costs more than most probes measure."""
    if not runs_apart(framework) or installed_frameworks().get(framework) is None:
        return False
    left.append(f"{framework}: runs in a process of its own here (name it with --frameworks)")
    return True


def _precisions(
    request: AdviceRequest, supported: tuple[str, ...], name: str, on_cpu: bool, left: list[str]
) -> list[str]:
    device = "cpu" if on_cpu else "this GPU"
    wanted = request.precisions or list(supported)
    for precision in wanted:
        if precision not in supported:
            left.append(f"{precision} on {name}: {name} on {device} takes {', '.join(supported)}")
    if request.precisions is None:
        for precision in ("fp32", "tf32", "fp16", "bf16"):
            if precision not in supported:
                left.append(
                    f"{precision} on {name}: {name} on {device} takes {', '.join(supported)}"
                )
    kept = [p for p in wanted if p in supported]
    return kept or ["fp32"]


def _modes(
    request: AdviceRequest,
    modes: tuple[str, ...],
    name: str,
    on_cpu: bool,
    left: list[str],
) -> list[str | None]:
    if request.compile_modes is not None:
        for mode in request.compile_modes:
            if mode != NO_COMPILE and mode not in modes:
                left.append(
                    f"compile {mode} on {name}: it takes {', '.join(modes) or 'no compile mode'}"
                )
        named: list[str | None] = [m for m in request.compile_modes if m in modes]
        as_shipped: list[str | None] = [None]
        return as_shipped + named if NO_COMPILE in request.compile_modes or not named else named
    defaults = [m for m in DEFAULT_MODES.get(name, ()) if m in modes]
    if name == "torch" and "reduce-overhead" in modes:
        if on_cpu:
            left.append("compile reduce-overhead on torch: CUDA graphs: it pays off on a GPU only")
        else:
            defaults.append("reduce-overhead")
    for mode in modes:
        if (
            mode not in defaults
            and mode in WHY_NOT_BY_DEFAULT
            and not (on_cpu and mode == "reduce-overhead")
        ):
            left.append(
                f"compile {mode} on {name}: {WHY_NOT_BY_DEFAULT[mode]} (name it with --compile)"
            )
    return [None, *defaults]
