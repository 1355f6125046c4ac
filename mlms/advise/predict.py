"""The prediction: a multiplicative model of a configuration's cost, fitted from measurements.

A cost (milliseconds per batch, milliseconds per input, joules per input: lower is better) is
the framework's baseline cost times one factor per setting that differs from the baseline
(precision, compile mode, channels-last, threads, batch size), each factor fitted by least
squares on the logarithms of every observation of the framework (probes, stored evaluations).
A batch size that was not measured takes the factor of a latency linear in the batch size,
fitted to those that were (``batch_factors``). A setting that was never measured takes a
prior (the lower bound's what-if for it, else no effect) with a wide interval.

A memory layout and a compile mode (``BY_PRECISION``) are not independent of the precision: at
fp32 channels-last changes little, while the reduced precisions' tensor-core kernels want it;
Inductor cuts resnet50's device work at batch 1 to 0.91 of eager at fp32 and to 0.37 at fp16,
and makes bert_base's at batch 256 1.4 times slower at fp16. So their effects are fitted per
precision, one per precision an observation combined them with: a configuration at such a
precision takes the effect measured there; one at a precision never measured with it takes the
effect measured at a precision of its rank (``NARROWNESS``: fp16 and bf16 run the same
tensor-core kernels in another number format, and their effects agreed within 0.03 in every
H200 sweep) with a slightly wider interval (``FAMILY_SIGMA``); else the mean of the measured
ones with a wide interval (``UNPAIRED_SIGMA``), halfway to no effect where every one of them
is narrower: what a compiler changes (the elementwise work it fuses, the kernels it replaces)
is the larger share where the arithmetic is fastest (its device effect on resnet50 at batch 1
is 0.37 at fp16, 0.57 at tf32, 0.91 at fp32; on bert_base at 256, 1.44 at fp16 and 0.95-1.02
wider), so a wider precision's effect is taken to lie between the narrower one's and none.

Intervals (95%) add, on the log scale, the measurements' own spread, the fit's residual spread
and an interaction term per combined factor (the model assumes the factors independent; how
far they are not is not known before the verifying runs, which report how often the achieved
value fell inside).

Where the evaluations timed their launch (a GPU), a time is not one product of factors: the
predict takes the longer of the host's launch and the device's work, which settings move
apart. ``HostDeviceModel`` fits one such model to each and predicts the longer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mlms.advise.record import Config, Observation
from mlms.evaluation.precisions import NARROWNESS
from mlms.evaluation.record import LAUNCH_BOUND

FACTORS = ("precision", "compile", "channels_last", "threads", "batch_size")
#: Log-scale standard deviation per factor combined with another (independence assumed).
INTERACTION_SIGMA = 0.08
#: Of a factor with no measurement and no prior: about x0.6 to x1.6.
UNKNOWN_SIGMA = 0.25
#: Settings whose effect is fitted per precision, where measured at it.
BY_PRECISION = ("channels_last", "compile")
#: Of such a setting's effect at a precision it was not measured at (the measured ones' mean
#: stands in).
UNPAIRED_SIGMA = 0.2
#: Of its effect at a precision measured at one of its rank only (that one stands in).
FAMILY_SIGMA = 0.05
#: The least log-scale spread an observation is weighted by against a prior: what a median
#: of a short probe is good to on a quiet host.
MIN_DATA_SIGMA = 0.02
Z95 = 1.96


@dataclass(frozen=True)
class Prediction:
    value: float
    low: float
    high: float
    basis: str  # probed, stored, model


@dataclass(frozen=True)
class Prior:
    """A factor's effect from elsewhere (a what-if of the lower bound): cost multiplied by
    ``ratio``, with a log-scale standard deviation."""

    ratio: float
    sigma: float
    why: str


def _level(config: Config, factor: str) -> object:
    return getattr(config, factor)


def _column(config: Config, factor: str) -> tuple[str, object] | tuple[str, object, str]:
    """The fitted effect ``config`` takes for ``factor``'s level: one per precision for a
    ``BY_PRECISION`` setting."""
    level = _level(config, factor)
    return (factor, level, config.precision) if factor in BY_PRECISION else (factor, level)


def batch_factors(latencies: dict[int, float], wanted: Sequence[int]) -> dict[int, float]:
    """Latency per batch relative to the largest measured batch size, for every ``wanted``
    batch size: measured ones as measured, others from ``latency = a + b * batch`` fitted by
    least squares (a single measurement: proportional)."""
    sizes = sorted(latencies)
    reference = sizes[-1]
    x = np.array(sizes, dtype=float)
    y = np.array([latencies[s] for s in sizes])
    if len(sizes) >= 2:
        slope, intercept = np.polyfit(x, y, 1)
        if slope <= 0 or intercept < 0:  # noise: fall back to proportional
            slope, intercept = y[-1] / x[-1], 0.0
    else:
        slope, intercept = y[0] / x[0], 0.0
    fitted = {b: intercept + slope * b for b in wanted}
    base = latencies[reference]
    return {b: (latencies[b] if b in latencies else max(fitted[b], 1e-9)) / base for b in wanted}


class CostModel:
    """Fitted per framework; ``predict`` answers for any configuration of the space."""

    def __init__(
        self,
        observations: Sequence[Observation],
        baselines: dict[str, Config],
        cost: Callable[[Observation], float],
        per_input: bool,
        priors: dict[tuple[str, str, object], Prior] | None = None,
        *,
        batch_ms: Callable[[Observation], float] = lambda o: o.p50_ms,
        anchored: bool = False,
    ) -> None:
        """``cost``: the quantity modelled (positive, lower is better) of an observation;
        ``per_input``: whether it is per input (so a batch's latency is divided by its size);
        ``priors``: (framework, factor, level) -> the prior for a level never measured;
        ``batch_ms``: the time per batch whose growth with the batch size scales the cost;
        ``anchored``: every effect held to its prior (else no effect) as far as the
        observations leave it free, rather than split with the baseline where they cannot
        tell the two apart (a fit of few observations, none of them the baseline)."""
        self.baselines = baselines
        self.priors = priors or {}
        self.per_input = per_input
        self.batch_ms = batch_ms
        self.anchored = anchored
        #: (framework, setting, level[, precision]) -> the log effect and its deviation.
        self.effects: dict[tuple, tuple[float, float]] = {}
        self.base: dict[str, tuple[float, float]] = {}
        self.residual: dict[str, float] = {}
        self._batch: dict[str, dict[int, float]] = {}
        by_framework: dict[str, list[Observation]] = {}
        same: dict[Config, list[Observation]] = {}
        for obs in observations:
            by_framework.setdefault(obs.config.framework, []).append(obs)
            same.setdefault(obs.config, []).append(obs)
        # A configuration measured directly: the geometric mean of its measurements, their
        # spread that of the mean (or how far they disagree, when more).
        self.direct: dict[Config, tuple[float, float, str]] = {}
        for config, seen in same.items():
            logs = [math.log(cost(o)) for o in seen]
            mean = sum(logs) / len(logs)
            spread = math.sqrt(sum(o.spread**2 for o in seen)) / len(seen)
            if len(seen) > 1:
                spread = max(spread, float(np.std(logs, ddof=1)))
            sources = {o.source for o in seen}
            self.direct[config] = (
                math.exp(mean),
                spread,
                "stored" if sources == {"stored"} else "probe",
            )
        for framework, seen in by_framework.items():
            if framework in baselines:
                self._fit(framework, seen, cost)

    def _fit(self, framework: str, seen: list[Observation], cost: Callable) -> None:
        reference = self.baselines[framework]
        # Batch sizes: the baseline's latencies per batch at each batch size measured.
        latencies = {
            o.config.batch_size: self.batch_ms(o)
            for o in seen
            if o.config.model_copy(update={"batch_size": reference.batch_size}) == reference
        }
        columns: list[tuple] = []
        for obs in seen:
            for factor in FACTORS[:-1]:
                column = _column(obs.config, factor)
                if column[1] != _level(reference, factor) and column not in columns:
                    columns.append(column)
        rows, targets, spreads = [], [], []
        for obs in seen:
            if latencies and obs.config.batch_size not in latencies:
                continue  # a batch size the baseline was not measured at: no factor for it
            taken = {_column(obs.config, factor) for factor in FACTORS[:-1]}
            rows.append([1.0] + [float(column in taken) for column in columns])
            y = math.log(cost(obs))
            if latencies:  # bring every observation to the reference batch size
                y -= math.log(self._batch_ratio(latencies, obs.config.batch_size, reference))
            targets.append(y)
            spreads.append(obs.spread)
        if not rows:
            return
        matrix = np.array(rows)
        measured = float(np.median(spreads)) if spreads else 0.0
        if self.anchored:
            priors = [self._prior(framework, *column[:2]) for column in columns]
            solution, sigmas = _anchored_fit(matrix, np.array(targets), measured, priors)
        else:
            solution = np.linalg.lstsq(matrix, np.array(targets), rcond=None)[0]
            sigmas = np.full(len(solution), measured * math.sqrt(2))
        fitted = matrix @ solution
        dof = len(rows) - np.linalg.matrix_rank(matrix)
        residual = (
            float(np.sqrt(np.sum((np.array(targets) - fitted) ** 2) / dof)) if dof > 0 else 0.0
        )
        self.residual[framework] = residual
        self.base[framework] = (float(solution[0]), measured)
        for column, effect, sigma in zip(columns, solution[1:], sigmas[1:], strict=True):
            self.effects[(framework, *column)] = (float(effect), float(sigma))
        self._batch[framework] = latencies

    def _prior(self, framework: str, factor: str, level: object) -> tuple[float, float]:
        """A level's prior log effect and its standard deviation (no effect, widely, without
        one)."""
        prior = self.priors.get((framework, factor, level))
        return (math.log(prior.ratio), prior.sigma) if prior else (0.0, UNKNOWN_SIGMA)

    def _batch_ratio(self, latencies: dict[int, float], batch: int, reference: Config) -> float:
        """Cost at ``batch`` over cost at the reference batch size."""
        ratio = batch_factors(latencies, [batch, reference.batch_size])
        latency_ratio = ratio[batch] / ratio[reference.batch_size]
        return latency_ratio * reference.batch_size / batch if self.per_input else latency_ratio

    def predict(self, config: Config) -> Prediction:
        direct = self.direct.get(config)
        if direct is not None:
            value, spread, source = direct
            basis = "stored" if source == "stored" else "probed"
            return _interval(value, _direct_sigma(spread), basis)
        if config.framework not in self.base:
            return _interval(float("nan"), UNKNOWN_SIGMA, "model")
        terms = self._terms(config)
        log_cost = sum(log for _key, log, _variance in terms)
        variance = sum(variance for _key, _log, variance in terms)
        return _interval(math.exp(log_cost), math.sqrt(variance), "model")

    def difference(self, config: Config, other: Config) -> tuple[float, float]:
        """The log of ``config``'s cost over ``other``'s and its standard deviation: what the
        two predictions share (the baseline, an effect of a level both have) moves both alike
        and drops out, so two configurations a few settings apart are told apart more surely
        than either's own interval says. Both of a framework this model fitted."""
        mine = {key: (log, variance) for key, log, variance in self._terms(config)}
        theirs = {key: (log, variance) for key, log, variance in self._terms(other)}
        log = sum(v[0] for v in mine.values()) - sum(v[0] for v in theirs.values())
        apart = mine.keys() ^ theirs.keys()
        variance = sum((mine | theirs)[key][1] for key in apart)
        return log, math.sqrt(variance)

    def _terms(self, config: Config) -> list[tuple[tuple, float, float]]:
        """``config``'s log cost as terms (a key naming what the term is an estimate of, its
        log, its variance): configurations that share a key share that estimate and its
        error. A configuration measured directly is one term of its own."""
        direct = self.direct.get(config)
        if direct is not None:
            value, spread, _source = direct
            return [(("direct", config), math.log(value), _direct_sigma(spread) ** 2)]
        framework = config.framework
        reference = self.baselines[framework]
        log_cost, spread = self.base[framework]
        terms: list[tuple[tuple, float, float]] = [
            (("base", framework), log_cost, spread**2),
            # The fit's misfit at this configuration is its own.
            (("residual", config), 0.0, self.residual.get(framework, 0.0) ** 2),
        ]
        combined = 0
        for factor in FACTORS[:-1]:
            level = _level(config, factor)
            if level == _level(reference, factor):
                continue
            combined += 1
            key = (framework, *_column(config, factor))
            effect = self.effects.get(key)
            if effect is not None:
                terms.append((("effect", *key), effect[0], effect[1] ** 2))
                if factor in BY_PRECISION and config.precision != reference.precision:
                    combined -= 1  # measured together: no independence assumed
            elif factor in BY_PRECISION:
                terms += self._elsewhere(framework, factor, level, config.precision)
            else:
                prior = self._prior(framework, factor, level)
                terms.append((("effect", *key), prior[0], prior[1] ** 2))
        if config.batch_size != reference.batch_size:
            latencies = self._batch.get(framework)
            batch = ("batch", framework, config.batch_size)
            if latencies:
                ratio = math.log(self._batch_ratio(latencies, config.batch_size, reference))
                fitted = config.batch_size not in latencies
                terms.append((batch, ratio, INTERACTION_SIGMA**2 if fitted else 0.0))
            else:
                terms.append((batch, 0.0, UNKNOWN_SIGMA**2))
            combined += 1
        # How far this configuration's settings fail to be independent is its own.
        interaction = max(0, combined - 1) * INTERACTION_SIGMA**2
        terms.append((("interaction", config), 0.0, interaction))
        return terms

    def _elsewhere(
        self, framework: str, factor: str, level: object, precision: str
    ) -> list[tuple[tuple, float, float]]:
        """A ``BY_PRECISION`` setting's effect at a precision it was not measured at: the mean
        of its effects at the precisions of the same rank (``NARROWNESS``) it was measured at,
        widened by ``FAMILY_SIGMA``; else at every precision it was, halved where each is
        narrower, widened by ``UNPAIRED_SIGMA``; its prior (no effect, widely) where it was
        measured at none."""
        measured = {
            key[3]: effect
            for key, effect in self.effects.items()
            if key[:3] == (framework, factor, level) and len(key) == 4
        }
        rank = NARROWNESS[precision]
        alike = [p for p in measured if NARROWNESS[p] == rank]
        stands_in, sigma = (alike, FAMILY_SIGMA) if alike else (list(measured), UNPAIRED_SIGMA)
        halved = not alike and all(NARROWNESS[p] > rank for p in measured)
        if stands_in:
            mean = sum(measured[p][0] for p in stands_in) / len(stands_in)
            variance = sum(measured[p][1] ** 2 for p in stands_in) / len(stands_in)
            if halved:
                mean /= 2  # between the narrower precisions' effect and none
        else:
            mean, deviation = self._prior(framework, factor, level)
            variance = deviation**2
        # Two configurations share this estimate where it stands on the same precisions alike.
        estimate = ("elsewhere", framework, factor, level, tuple(sorted(stands_in)), halved)
        return [
            (estimate, mean, variance),
            (("unpaired", framework, factor, level, precision), 0.0, sigma**2),
        ]


def _direct_sigma(spread: float) -> float:
    """Of a configuration measured directly: its measurements' spread and a short run's against
    a long one."""
    return math.hypot(spread, INTERACTION_SIGMA / 2)


def _anchored_fit(
    matrix: np.ndarray, targets: np.ndarray, measured: float, priors: list[tuple[float, float]]
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with each effect column held to its prior (mean, standard deviation of
    its log) and the first column (the baseline) free: the posterior mean and standard
    deviation of every coefficient, the observations weighted by their own spread."""
    data_sigma = max(measured, MIN_DATA_SIGMA)
    columns = matrix.shape[1]
    anchors = np.zeros((columns - 1, columns))
    anchors[:, 1:] = np.diag([1.0 / sigma for _mean, sigma in priors])
    weighted = np.vstack([matrix / data_sigma, anchors])
    wanted = np.concatenate([targets / data_sigma, [mean / sigma for mean, sigma in priors]])
    solution = np.linalg.lstsq(weighted, wanted, rcond=None)[0]
    covariance = np.linalg.pinv(weighted.T @ weighted)
    return solution, np.sqrt(np.clip(np.diag(covariance), 0.0, None))


class HostDeviceModel:
    """Where a framework returns before its device is done (a GPU), a predict takes about the
    longer of the host's launch and the device's work, and settings move the two apart: a
    precision or a memory layout the device's work, CUDA graphs (``reduce-overhead``) the
    launch, a batch size mostly the device's. A setting the device does faster leaves a
    launch-bound predict as long; one model of every effect would carry the speed-up of a
    device-bound probe into a launch-bound configuration, and the reverse. So: one cost model
    of the launches (every observation times its own), one of the device-bound observations'
    costs (their launch under ``LAUNCH_BOUND`` of the predict), or, where evaluations timed
    the device's work alone (``BatchResult.device_ms``), of every observation's, each effect
    the latter never saw at its prior; the prediction the larger of the two. A configuration
    measured directly is predicted as measured, and one the device's observations cannot
    place (none of its framework's) by the single model."""

    def __init__(
        self,
        observations: Sequence[Observation],
        baselines: dict[str, Config],
        cost: Callable[[Observation], float],
        per_input: bool,
        priors: dict[tuple[str, str, object], Prior] | None = None,
    ) -> None:
        self.whole = CostModel(observations, baselines, cost, per_input, priors)
        timed = [o for o in observations if o.launch_ms is not None and o.p50_ms > 0]
        self.host = CostModel(
            timed,
            baselines,
            lambda o: cost(o) * o.launch_ms / o.p50_ms,
            per_input,
            batch_ms=lambda o: o.launch_ms,
        )
        bound = [o for o in timed if o.launch_ms < LAUNCH_BOUND * o.p50_ms]
        alone = [o for o in timed if o.device_ms is not None]
        if alone:  # the device's work timed apart, launch-bound or not
            self.device = CostModel(
                alone,
                baselines,
                lambda o: cost(o) * o.device_ms / o.p50_ms,
                per_input,
                priors,
                batch_ms=lambda o: o.device_ms,
                anchored=True,
            )
        else:  # only where it decided the predict
            self.device = CostModel(bound, baselines, cost, per_input, priors, anchored=True)
        # A predict outlasts the part that decides it by the input's copy and the output's
        # copy back (and a launch-bound one by its last kernels).
        self.tail = _median_ratio([(o.p50_ms, o.launch_ms) for o in timed if o not in bound])
        decided = [(o.p50_ms, o.device_ms) for o in bound if o.device_ms is not None]
        self.device_tail = _median_ratio(decided)

    def predict(self, config: Config) -> Prediction:
        whole = self.whole.predict(config)
        if whole.basis != "model":
            return whole
        host, device = self.host.predict(config), self.device.predict(config)
        if math.isnan(host.value) or math.isnan(device.value):
            return whole
        host_tail, device_tail = self.tail, self.device_tail
        return Prediction(
            max(host.value * host_tail, device.value * device_tail),
            max(host.low * host_tail, device.low * device_tail),
            max(host.high * host_tail, device.high * device_tail),
            "model",
        )

    def difference(self, config: Config, other: Config) -> tuple[float, float]:
        """As ``CostModel.difference``, in the part (the host's launch or the device's work)
        that decides both predictions, whose tail then drops out too; where different parts
        decide them, or one was measured directly, the two are taken as independent."""
        mine, theirs = self.predict(config), self.predict(other)
        parts = {self._deciding(config), self._deciding(other)}
        if mine.basis == theirs.basis == "model" and len(parts) == 1 and None not in parts:
            return parts.pop().difference(config, other)  # type: ignore[union-attr]
        return _independent(mine, theirs)

    def _deciding(self, config: Config) -> CostModel | None:
        """The part whose prediction decides ``config``'s (None where one cannot place it)."""
        host, device = self.host.predict(config), self.device.predict(config)
        if math.isnan(host.value) or math.isnan(device.value):
            return None
        return (
            self.host if host.value * self.tail >= device.value * self.device_tail else self.device
        )


def _median_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median of whole over part, 1 without any."""
    return statistics.median(whole / part for whole, part in pairs) if pairs else 1.0


def cost_model(
    observations: Sequence[Observation],
    baselines: dict[str, Config],
    cost: Callable[[Observation], float],
    per_input: bool,
    priors: dict[tuple[str, str, object], Prior] | None = None,
    *,
    split: bool = True,
) -> CostModel | HostDeviceModel:
    """The model of ``cost``: split into host and device (``split``, a time, where some
    observation timed its launch), else one ``CostModel``."""
    if split and any(o.launch_ms is not None for o in observations):
        return HostDeviceModel(observations, baselines, cost, per_input, priors)
    return CostModel(observations, baselines, cost, per_input, priors)


def _independent(mine: Prediction, theirs: Prediction) -> tuple[float, float]:
    """The log ratio of two predictions taken as independent, and its standard deviation."""
    sigmas = [log_sigma(p.low, p.high) for p in (mine, theirs)]
    return math.log(mine.value / theirs.value), math.hypot(*sigmas)


def log_sigma(low: float, high: float) -> float:
    """The standard deviation of the log of a value whose 95% interval is ``low``-``high``
    (the inverse of ``_interval``)."""
    return math.log(high / low) / (2 * Z95)


def _interval(value: float, sigma: float, basis: str) -> Prediction:
    return Prediction(value, value * math.exp(-Z95 * sigma), value * math.exp(Z95 * sigma), basis)
