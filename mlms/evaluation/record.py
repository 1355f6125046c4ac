"""The evaluation request and record (stored as ``evaluations/<id>.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlms.datasets.index import parse_reference
from mlms.errors import InvalidArgument
from mlms.evaluation.headline import headline_of, headline_text, higher_is_better
from mlms.evaluation.listed_options import FIELDS as RUN_OPTIONS
from mlms.evaluation.listed_options import RunOptions
from mlms.evaluation.precisions import PRECISIONS
from mlms.hardware import GpuInfo, HardwareInfo
from mlms.manifest import InputShape
from mlms.reasons import short_numbers
from mlms.tracer.levels import TraceLevel

#: Upper limits of a request's numbers: a request past them is a mistake or an attack (a
#: batch of 10**9 samples or 10**30 iterations would hold a device, and its memory, forever).
MAX_BATCH_SIZE = 4096
MAX_BATCH_SIZES = 32
MAX_ITERATIONS = 1_000_000
MAX_WARMUP = 100_000
MAX_SECONDS = 3600.0
MAX_THREADS = 1024
MAX_SEED = 2**32 - 1  # numpy's and torch's generators take 0 .. 2**32 - 1 everywhere
MAX_SEQ_LEN = 65536
MAX_NEW_TOKENS = 4096
MAX_TENSOR_PARALLEL = 64


def check_batch_sizes(value: list[int]) -> list[int]:
    if (
        not value
        or len(value) > MAX_BATCH_SIZES
        or any(not 1 <= b <= MAX_BATCH_SIZE for b in value)
    ):
        raise ValueError(
            f"batch sizes must be positive integers up to {MAX_BATCH_SIZE}, 1 to "
            f"{MAX_BATCH_SIZES} of them, got {short_numbers(value)}"
        )
    return value


class EvaluationRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    framework: str | None = None
    hw: str = "cpu"
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    iterations: int = Field(default=20, ge=1, le=MAX_ITERATIONS)
    warmup: int = Field(default=3, ge=0, le=MAX_WARMUP)
    min_seconds: float = Field(default=1.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    trace_level: TraceLevel = TraceLevel.MODEL
    #: "synthetic", "dataset", or image paths.
    inputs: list[str] = Field(default_factory=lambda: ["synthetic"], min_length=1)
    intra_op_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    inter_op_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    #: Token models: the length of every input sequence (default: the manifest's).
    seq_len: int | None = Field(default=None, ge=1, le=MAX_SEQ_LEN)
    precision: str = "fp32"
    #: A compile mode of the framework (torch.compile's mode, ONNX Runtime's optimisation
    #: level); "default" is the framework's first; None: as the framework runs by default.
    compile: str | None = None
    channels_last: bool = False
    #: torch on a GPU: cuDNN's autotuning (``torch.backends.cudnn.benchmark``), which times the
    #: convolution algorithms for each new input shape and keeps the fastest.
    cudnn_benchmark: bool = False
    #: Copy each input to the device before measuring, so the model latency holds no copy;
    #: otherwise each iteration copies it from pinned host memory as a pipeline step of its own.
    input_on_device: bool = False
    #: Generation mode: decode this many tokens after each input (time to first token, time
    #: per output token).
    generate: int | None = Field(default=None, ge=1, le=MAX_NEW_TOKENS)
    #: A data set in the store, ``NAME`` or ``NAME@VERSION``: each batch size's model-level run
    #: is one pass over it, and the record holds its accuracy.
    dataset: str | None = None
    #: A model file read where the evaluation runs: the shapes of inputs it leaves open.
    input_shapes: list[InputShape] = Field(default_factory=list, max_length=16)
    #: The model split over this many devices of one host by tensor parallelism, one process a
    #: rank (``mlms.evaluation.tensor_parallel``).
    tensor_parallel: int = Field(default=1, ge=1, le=MAX_TENSOR_PARALLEL)

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str) -> str:
        if value not in PRECISIONS:
            raise ValueError(f"precision {value!r}: expected one of {', '.join(PRECISIONS)}")
        return value

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_reference(value)
            except InvalidArgument as exc:  # pydantic names the field for a ValueError only
                raise ValueError(str(exc)) from None
        return value

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        return check_batch_sizes(value)

    @field_validator("trace_level", mode="before")
    @classmethod
    def _level(cls, value: object) -> TraceLevel:
        try:
            return TraceLevel.parse(value)  # type: ignore[arg-type]
        except InvalidArgument as exc:  # pydantic names the field for a ValueError only
            raise ValueError(str(exc)) from None

    def options(self) -> str:
        """The options that change what runs, for a listing (``RunOptions.line``)."""
        values = {name: getattr(self, name) for name in RUN_OPTIONS}
        return RunOptions(**values | {"inputs": tuple(self.inputs)}).line()


#: A predict whose launch takes this share of it or more is launch-bound: the device idles
#: between the host's launches, and work that only the device does faster (a precision, a
#: memory layout) leaves it as long.
LAUNCH_BOUND = 0.8


class LatencyStats(BaseModel):
    """Milliseconds."""

    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    min: float
    max: float
    trimmed_mean: float
    stdev: float
    median_ci95: tuple[float, float]
    #: Set when the spread is too wide to trust the numbers; says why.
    warning: str | None = None


class LevelResult(BaseModel):
    """One leveled run: its own latency and its slowdown against the model-level run."""

    run: int
    iterations: int
    latency_ms: dict[str, float]  # {"p50": ..., "mean": ...}
    overhead: float  # p50 of this run / p50 of the model-level run
    spans: int
    dropped: int = 0


class InputCopyResult(BaseModel):
    """The host-to-device copies of the model-level run, timed on the device."""

    bytes: int  # one batch's
    latency_ms: dict[str, float]  # {"p50": ..., "mean": ...}
    gb_per_s: float  # bytes / median copy time


class GenerationResult(BaseModel):
    """Generation mode: greedy decoding after each input, with the key-value cache."""

    new_tokens: int
    time_to_first_token_ms: LatencyStats
    time_per_output_token_ms: LatencyStats | None  # None for a single new token
    tokens_per_second: float  # output tokens of the whole batch per second of decoding


EnergySource = Literal["nvml", "rapl"]


class EnergyResult(BaseModel):
    """The energy of a batch size's model-level run (``mlms.evaluation.energy``): joules and
    average watts from the device's cumulative energy counter, the peak from power sampled
    beside the run, the idle power from before the model loaded. Where it was not measured,
    ``reason`` says why and the numbers are unset (never zero)."""

    source: EnergySource | None = None
    reason: str | None = None
    joules: float | None = None  # the whole run's
    seconds: float | None = None  # the metered window
    joules_per_inference: float | None = None  # one input of a batch
    inferences_per_joule: float | None = None
    average_watts: float | None = None
    peak_watts: float | None = None
    idle_watts: float | None = None
    power_samples: int = 0
    # How often the counter changes (measured before the run), and the relative uncertainty
    # of the joules it leaves: each end of the window up to one period off.
    counter_period_s: float | None = None
    joules_uncertainty: float | None = None  # ± 2 × period × average watts / joules


class RunConditions(BaseModel):
    """What the machine did beside a batch size's model-level run that moves its latency while
    the model stays the same (``mlms.evaluation.conditions``): the GPU's SM clock over the run,
    sampled with its power, against its highest, and every reason the driver gave for holding
    the clocks down; the share of the host's CPU time its hypervisor took (steal). Each is
    unset where it was not read: a CPU has no SM clock, and the clock comes with the power
    sampler (``MLMS_ENERGY=off``: none)."""

    sm_clock_mhz: float | None = None  # the samples' mean
    sm_clock_min_mhz: float | None = None
    sm_clock_max_mhz: float | None = None  # the GPU's highest SM clock
    clock_limits: list[str] = []  # NVML's clock event reasons seen in any sample
    cpu_steal: float | None = None  # stolen / all CPU time over the run, every core


class BatchResult(BaseModel):
    batch_size: int
    iterations: int
    seconds: float
    latency_ms: LatencyStats
    throughput: float  # inputs per second
    levels: dict[str, LevelResult] = {}
    input_copy: InputCopyResult | None = None
    #: The host's part of each predict (until the framework returned, before waiting for the
    #: device), where the framework returns early: p50 and mean (ms).
    launch_ms: dict[str, float] | None = None
    #: The device's work alone, for a few predicts after the runs whose launches queued
    #: behind a spinning kernel (``Predictor.device_times``), where the launch was timed: p50
    #: and mean (ms). Under a launch-bound predict's latency, it says what the device would
    #: take were the host not in the way.
    device_ms: dict[str, float] | None = None
    generation: GenerationResult | None = None
    energy: EnergyResult | None = None
    #: A pass over a data set: the samples predicted (throughput is these over ``seconds``).
    samples: int | None = None
    conditions: RunConditions | None = None

    @field_validator("launch_ms", "device_ms")
    @classmethod
    def _nothing_timed(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        # None, one way: gRPC carries an empty map for either.
        return value or None

    @property
    def launch_share(self) -> float | None:
        """The host's launch over the whole predict (p50s): at ``LAUNCH_BOUND`` or more the
        device waits on the host."""
        if self.launch_ms is None or self.latency_ms.p50 <= 0:
            return None
        return self.launch_ms["p50"] / self.latency_ms.p50

    @property
    def launch_bound(self) -> bool | None:
        """Whether the device waits on the host's launches (``LAUNCH_BOUND``); None where the
        launch was not timed."""
        share = self.launch_share
        return None if share is None else share >= LAUNCH_BOUND


class Accuracy(BaseModel):
    """A model's accuracy on a data set, by the metrics of the data set's task
    (``mlms.accuracy``); a classifier's top-1 and top-5 also stand on their own."""

    top1: float | None = None
    top5: float | None = None
    samples: int
    dataset: str
    #: A stored data set's version and the sha256 of its index (which names every shard's).
    dataset_version: str | None = None
    dataset_sha256: str | None = None
    task: str = "classification"
    #: The task's metrics by name (detection: ``map``, ``map_50``, ``ar_100`` ...;
    #: segmentation: ``miou``, ``pixel_accuracy``; ``perplexity``; ``bleu``, ``chrf``).
    metrics: dict[str, float] = {}

    @property
    def headline(self) -> tuple[str, float | None]:
        """The task's main metric: its name for people and its value."""
        key, name, _ = headline_of(self.task)
        return name, self.metrics.get(key, getattr(self, key, None))

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.task)

    def drop_from(self, baseline: Accuracy) -> float | None:
        """Points of the headline metric lost against ``baseline`` (negative: gained); None
        where either lacks it."""
        mine, theirs = self.headline[1], baseline.headline[1]
        if mine is None or theirs is None:
            return None
        unit = headline_of(self.task).unit
        if unit == "percent":
            return (mine / theirs - 1) * 100
        return (theirs - mine) * (100 if unit == "fraction" else 1)

    def line(self) -> str:
        """The metrics as one line: ``mAP@[.5:.95] 0.412, map_50 0.63, ...``."""
        key = headline_of(self.task).key
        others = {"top-5": self.top5} if self.task == "classification" else self.metrics
        rest = [f"{k} {v:.4f}" for k, v in others.items() if k != key and v is not None]
        return ", ".join([headline_text(*self.headline), *rest])


class Predictions(BaseModel):
    """The top-5 classes and their probabilities for the first inputs of the input source,
    so that two evaluations can be checked for diverging predictions."""

    inputs: str  # the input source and seed: only predictions of the same inputs compare
    top5: list[list[int]]
    probabilities: list[list[float]]


class ModelRef(BaseModel):
    name: str
    version: str
    #: zoo, user (added to the store), file (read where it lies) or hub.
    origin: str = "zoo"
    #: The file's path or the Hub id, for a model that is not in the store.
    source: str = ""


class FrameworkRef(BaseModel):
    name: str
    version: str


class RankResult(BaseModel):
    """One rank of a model split over several devices: where it ran, and what it alone used."""

    rank: int
    device: str  # CUDA's number in the rank's process, or "cpu"
    gpu: GpuInfo | None = None
    queue_wait_seconds: float
    #: The most device memory it held (torch's allocator on a GPU; the process's resident set
    #: on the CPU).
    peak_memory_bytes: int | None = None
    #: Each batch size's model-level run, as ``BatchResult.energy`` (in the record's order;
    #: where none was measured, one that says why).
    energy: list[EnergyResult] = []


class EvaluationRecord(BaseModel):
    id: str
    created_at: datetime
    status: Literal["completed", "failed"] = "completed"
    request: EvaluationRequest
    model: ModelRef
    framework: FrameworkRef
    hardware: HardwareInfo
    device: str
    #: The GPUs it ran on (index, UUID, name: ``device`` is CUDA's number in the evaluating
    #: process); how they are linked is in ``hardware.links``. Empty on the CPU, and in a record
    #: from before this field (``mlms.evaluation.summary.gpu_of`` reads ``device`` then).
    gpus: list[GpuInfo] = []
    #: A split model's ranks, in rank order (empty for one process); each batch size's latency is
    #: the slowest rank's, its energy the sum over the ranks.
    ranks: list[RankResult] = []
    software: dict[str, str]
    settings: dict[str, object]
    trace_level: str
    trace_id: str | None
    trace_archive: str | None
    span_count: int
    queue_wait_seconds: float
    asset_sha256: str
    results: list[BatchResult]
    accuracy: Accuracy | None
    predictions: Predictions | None = None
    agent: dict[str, str] = {}
