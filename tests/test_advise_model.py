"""The advice's prediction logic and its space, on made-up measurements: no evaluation runs."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from mlms import hardware
from mlms.advise.predict import CostModel, Prior, batch_factors
from mlms.advise.record import AdviceRecord, AdviceRequest, AdviceRow, Config, Observation
from mlms.advise.run import Ran, _Session, advise
from mlms.advise.space import build_space
from mlms.catalog.zoo import get_model
from mlms.errors import InvalidArgument, LibraryFailure
from mlms.evaluation.record import (
    BatchResult,
    EvaluationRecord,
    EvaluationRequest,
    LatencyStats,
    Predictions,
)
from mlms.store.local import LocalStore
from mlms.user_input import validated

#: A made-up truth: torch's cost is the product of these factors.
BASE_MS = 40.0
EFFECT = {("precision", "bf16"): 0.6, ("channels_last", True): 0.8, ("threads", 1): 1.9}


def _truth(config: Config) -> float:
    cost = BASE_MS
    for (factor, level), ratio in EFFECT.items():
        if getattr(config, factor) == level:
            cost *= ratio
    return cost * (0.5 + 0.5 * config.batch_size)  # latency a + b * batch


def _observe(config: Config, source: str = "probe") -> Observation:
    value = _truth(config)
    return Observation(
        config=config, source=source, evaluation_id="e" * 32, value=value, p50_ms=value,
        latency_ms=1.2 * value, spread=0.01,
    )  # fmt: skip


BASE = Config(framework="torch", threads=2)


def test_one_setting_at_a_time_predicts_every_combination() -> None:
    probes = [
        BASE,
        BASE.model_copy(update={"precision": "bf16"}),
        BASE.model_copy(update={"channels_last": True}),
        BASE.model_copy(update={"threads": 1}),
    ]
    model = CostModel([_observe(c) for c in probes], {"torch": BASE}, lambda o: o.value, False)
    combined = Config(framework="torch", precision="bf16", channels_last=True, threads=1)
    guess = model.predict(combined)
    assert guess.basis == "model"
    assert guess.value == pytest.approx(_truth(combined), rel=1e-6)
    # Three factors combined: wider than a probed configuration's interval, and around it.
    probed = model.predict(probes[1])
    assert probed.basis == "probed" and probed.value == pytest.approx(_truth(probes[1]))
    assert guess.low < guess.value < guess.high
    assert math.log(guess.high / guess.low) > math.log(probed.high / probed.low)


def test_a_layout_measured_at_a_reduced_precision_takes_its_effect_there() -> None:
    """A made-up truth with an interaction: channels-last x0.95 at fp32 but x0.6 at the two
    half precisions, which run the same kernels, and x0.8 at tf32. Measured at fp32 and fp16,
    its effect at bf16 is fp16's (its kernel family); at tf32, the mean of the two."""

    def truth(config: Config) -> float:
        layout = 1.0
        if config.channels_last:
            layout = {"fp16": 0.6, "bf16": 0.6, "tf32": 0.8}.get(config.precision, 0.95)
        half = {"fp16": 0.5, "bf16": 0.55, "tf32": 0.7}.get(config.precision, 1.0)
        threads = 1.9 if config.threads == 1 else 1.0
        return BASE_MS * half * layout * threads

    def seen(config: Config) -> Observation:
        return _observe(config).model_copy(update={"value": truth(config)})

    singles = [
        BASE,
        *(BASE.model_copy(update={"precision": p}) for p in ("fp16", "bf16", "tf32")),
        BASE.model_copy(update={"channels_last": True}),
        BASE.model_copy(update={"threads": 1}),
    ]
    pair = BASE.model_copy(update={"precision": "fp16", "channels_last": True})
    paired = CostModel(
        [seen(c) for c in [*singles, pair]], {"torch": BASE}, lambda o: o.value, False
    )
    alone = CostModel([seen(c) for c in singles], {"torch": BASE}, lambda o: o.value, False)
    # fp16, channels-last and one thread: never measured together; the pair's effect is used.
    target = pair.model_copy(update={"threads": 1})
    guess = paired.predict(target)
    assert guess.basis == "model" and guess.value == pytest.approx(truth(target), rel=1e-6)
    # From one-setting probes only, channels-last's fp32 effect stands in: 58% too slow, and
    # with a wider interval than where the pair was measured.
    blind = alone.predict(target)
    assert blind.value == pytest.approx(truth(target) * 0.95 / 0.6, rel=1e-6)
    assert math.log(blind.high / blind.low) > math.log(guess.high / guess.low)
    # bf16 was never measured with channels-last: fp16's effect, a little wider.
    bf16 = target.model_copy(update={"precision": "bf16"})
    other = paired.predict(bf16)
    assert other.value == pytest.approx(truth(bf16), rel=1e-6)
    width = math.log(other.high / other.low)
    assert math.log(guess.high / guess.low) < width < math.log(blind.high / blind.low)
    # tf32 neither, nor one of its family: the mean of fp32's and fp16's, wider.
    tf32 = target.model_copy(update={"precision": "tf32"})
    mean = paired.predict(tf32)
    assert mean.value == pytest.approx(truth(tf32) * math.sqrt(0.6 * 0.95) / 0.8, rel=1e-6)
    assert math.log(mean.high / mean.low) > width
    # At fp32 the single-setting effect is unchanged by the pair's measurement.
    fp32 = target.model_copy(update={"precision": "fp32"})
    assert paired.predict(fp32).value == pytest.approx(truth(fp32), rel=1e-6)


def test_a_compile_mode_probed_at_fp16_alone_is_carried_to_the_other_precisions() -> None:
    """A made-up truth where a compile's effect shrinks as the arithmetic widens (x0.4 at the
    half precisions, x0.6 at tf32, x0.9 at fp32, as Inductor does to resnet50 at batch 1),
    probed at fp16 alone: bf16, of fp16's rank, takes its effect; tf32 and fp32, wider, take
    it halfway to none (x0.63), each within its interval, which is wider than bf16's."""
    compiled = {"fp16": 0.4, "bf16": 0.4, "tf32": 0.6, "fp32": 0.9}

    def truth(config: Config) -> float:
        precision = {"fp16": 0.5, "bf16": 0.55, "tf32": 0.7}.get(config.precision, 1.0)
        return BASE_MS * precision * (compiled[config.precision] if config.compile else 1.0)

    singles = [BASE, *(BASE.model_copy(update={"precision": p}) for p in ("tf32", "fp16", "bf16"))]
    probed = BASE.model_copy(update={"precision": "fp16", "compile": "reduce-overhead"})
    seen = [_observe(c).model_copy(update={"value": truth(c)}) for c in [*singles, probed]]
    model = CostModel(seen, {"torch": BASE}, lambda o: o.value, False)
    widths = {}
    for precision, expected in (("bf16", 0.4), ("tf32", math.sqrt(0.4)), ("fp32", math.sqrt(0.4))):
        config = probed.model_copy(update={"precision": precision})
        guess = model.predict(config)
        eager = truth(config.model_copy(update={"compile": None}))
        assert guess.value == pytest.approx(eager * expected, rel=1e-6), precision
        assert guess.low <= truth(config) <= guess.high, precision
        widths[precision] = math.log(guess.high / guess.low)
    assert widths["bf16"] < widths["tf32"]


def test_an_unmeasured_setting_takes_the_prior_else_no_effect_with_a_wide_interval() -> None:
    seen = [_observe(BASE)]
    bf16 = BASE.model_copy(update={"precision": "bf16"})
    prior = {("torch", "precision", "bf16"): Prior(0.5, 0.3, "bound: if tensor cores")}
    with_prior = CostModel(seen, {"torch": BASE}, lambda o: o.value, False, prior).predict(bf16)
    assert with_prior.value == pytest.approx(BASE_MS * 0.5)
    without = CostModel(seen, {"torch": BASE}, lambda o: o.value, False).predict(bf16)
    assert without.value == pytest.approx(BASE_MS)
    assert without.low < BASE_MS * 0.7 and without.high > BASE_MS * 1.4


def test_batch_scaling_is_fitted_from_a_few_batch_sizes() -> None:
    # latency = 2 + 3 * batch, measured at 1 and 32: 8 is interpolated.
    factors = batch_factors({1: 5.0, 32: 98.0}, [1, 8, 32])
    assert factors[32] == 1.0
    assert factors[8] == pytest.approx(26.0 / 98.0)
    # Throughput: per input, from the baseline at 1 and 32, combined with a factor.
    seen = [_observe(BASE.model_copy(update={"batch_size": b})) for b in (1, 32)]
    seen.append(_observe(BASE.model_copy(update={"batch_size": 32, "precision": "bf16"})))
    reference = BASE.model_copy(update={"batch_size": 32})
    model = CostModel(seen, {"torch": reference}, lambda o: o.value / o.config.batch_size, True)
    at_8 = Config(framework="torch", precision="bf16", threads=2, batch_size=8)
    assert model.predict(at_8).value == pytest.approx(_truth(at_8) / 8, rel=1e-6)


def test_noisy_measurements_widen_the_interval_by_the_fit_residual() -> None:
    probes = [BASE, BASE.model_copy(update={"precision": "bf16"})]
    seen = [_observe(c) for c in probes]
    # A second, disagreeing measurement of the baseline (a stored run): residual spread.
    again = _observe(BASE, "stored").model_copy(update={"value": BASE_MS * 1.3})
    model = CostModel([*seen, again], {"torch": BASE}, lambda o: o.value, False)
    quiet = CostModel(seen, {"torch": BASE}, lambda o: o.value, False)
    combined = BASE.model_copy(update={"precision": "bf16", "channels_last": True})
    noisy, calm = model.predict(combined), quiet.predict(combined)
    assert noisy.high / noisy.low > calm.high / calm.low


def test_the_space_is_what_the_device_and_frameworks_admit() -> None:
    resnet = get_model("resnet18")
    request = AdviceRequest(model="resnet18", frameworks=["torch", "onnxruntime"])
    space = build_space(request, resnet, None, 4)
    torch = [c for c in space.configs if c.framework == "torch"]
    ort = [c for c in space.configs if c.framework == "onnxruntime"]
    # torch: fp32, bf16 x eager, default x channels-last off, on x 1, 2, 4 threads
    assert len(torch) == 2 * 2 * 2 * 3 and len(ort) == 2 * 2 * 1 * 3
    assert {c.precision for c in torch} == {"fp32", "bf16"}
    assert {c.compile for c in ort} == {None, "basic"} and not any(c.channels_last for c in ort)
    assert {c.batch_size for c in space.configs} == {1}
    left = " | ".join(space.left_out)
    assert "fp16 on torch: torch on cpu takes fp32, bf16" in left
    assert "channels-last: a torch memory format; onnxruntime has none" in left
    assert "compile max-autotune on torch" in left and "reduce-overhead" in left
    # A GPU of compute capability 9.0: TF32 and half precisions, CUDA graphs, no threads.
    gpu = build_space(
        AdviceRequest(model="resnet18", frameworks=["torch"], objective="throughput"),
        resnet, (9, 0), 16,
    )  # fmt: skip
    assert {c.precision for c in gpu.configs} == {"fp32", "tf32", "fp16", "bf16"}
    assert {c.compile for c in gpu.configs} == {None, "default", "reduce-overhead"}
    assert {c.threads for c in gpu.configs} == {None}
    assert gpu.batch_sizes == [1, 16, 64, 256]
    # A token model: no channels-last.
    bert = build_space(
        AdviceRequest(model="bert_base", frameworks=["torch"]), get_model("bert_base"), None, 2
    )
    assert not any(c.channels_last for c in bert.configs)
    assert "channels-last: model bert_base takes no CHW images" in bert.left_out


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"objective": "speed"}, "objective 'speed': expected one of latency, throughput, energy"),
        ({"percentile": 42}, "percentile 42: expected one of 50, 90, 95, 99"),
        ({"precisions": ["fp8"]}, "precision fp8: expected some of"),
        ({"batch_sizes": [1, 8]}, "the latency objective runs batch size 1"),
        ({"budget_minutes": 0}, "budget_minutes"),
        ({"threads": [0]}, "threads [0]: expected counts from 1"),
    ],
)
def test_bad_requests_are_one_line(fields: dict, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validated(AdviceRequest, model="resnet18", **fields)
    assert "\n" not in str(caught.value) and fragment in str(caught.value)


def test_a_framework_or_compile_mode_that_cannot_run_is_named() -> None:
    resnet = get_model("resnet18")
    with pytest.raises(InvalidArgument, match="framework 'caffe': expected some of"):
        build_space(AdviceRequest(model="resnet18", frameworks=["caffe"]), resnet, None, 2)
    with pytest.raises(InvalidArgument, match="compile mode warp: expected none or a mode"):
        build_space(
            AdviceRequest(model="resnet18", frameworks=["torch"], compile_modes=["warp"]),
            resnet, None, 2,
        )  # fmt: skip


def _fake_latency(asked: EvaluationRequest, batch: int) -> float:
    """A made-up GPU's latency (ms): fp16 halves it, channels-last pays off at fp16 only."""
    half = 0.5 if asked.precision == "fp16" else 1.0
    layout = (0.6 if asked.precision == "fp16" else 0.97) if asked.channels_last else 1.0
    return 2.0 * half * layout * batch


def _record(request: EvaluationRequest, latency, launch=None, device=None) -> EvaluationRecord:
    """A record of ``request`` whose every batch size took ``latency(request, batch)`` ms,
    of which ``launch(request, batch)`` ms launching it and ``device(request, batch)`` ms the
    device's work alone, where given."""
    results = []
    for batch in request.batch_sizes:
        ms = latency(request, batch)
        launched = None if launch is None else launch(request, batch)
        alone = None if device is None else device(request, batch)
        stats = LatencyStats(
            p50=ms, p90=ms, p95=ms, p99=ms, mean=ms, min=ms, max=ms, trimmed_mean=ms,
            stdev=0.0, median_ci95=(0.99 * ms, 1.01 * ms),
        )  # fmt: skip
        result = BatchResult(
            batch_size=batch, iterations=request.iterations, seconds=1.0, latency_ms=stats,
            throughput=1000.0 * batch / ms,
            launch_ms=None if launched is None else {"p50": launched, "mean": launched},
            device_ms=None if alone is None else {"p50": alone, "mean": alone},
        )  # fmt: skip
        results.append(result)
    # Every configuration predicts the same classes: accuracy holds throughout.
    same = Predictions(inputs="synthetic:0", top5=[[1, 2, 3, 4, 5]], probabilities=[[0.2] * 5])
    return EvaluationRecord.model_construct(
        id=uuid.uuid4().hex, request=request, results=results, predictions=same
    )


def _fake_gpu(asked: list[EvaluationRequest]):
    """A runner answering each evaluation with a record of ``_fake_latency``, every request
    kept in ``asked``."""

    def run(requests):
        asked.extend(requests)
        return [Ran(_record(r, _fake_latency), 0.0) for r in requests]

    return run


def test_a_gpu_session_probes_the_layout_at_half_precision_and_verifies_its_rivals() -> None:
    """A fake GPU stands in for tensor cores (none here): its runner answers each evaluation
    with records of a made-up latency where channels-last pays off at fp16 only."""
    asked: list[EvaluationRequest] = []
    run = _fake_gpu(asked)
    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], objective="throughput", precisions=["fp32", "fp16"],
        compile_modes=["none"], batch_sizes=[32, 128], verify=1, budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet18"), (9, 0), 16)
    session = _Session(request, space, run, lambda _line: None, time.monotonic())
    session.probe()
    session.probe_by_precision({})
    # The baseline, one setting changed at a time, then channels-last again at fp16 (which
    # the first prediction keeps in the running).
    probed = [(r.precision, r.channels_last, r.batch_sizes) for r in asked]
    assert probed[0] == ("fp32", False, [32, 128]) and probed[-1] == ("fp16", True, [128])
    assert sorted(probed[1:-1]) == [("fp16", False, [128]), ("fp32", True, [128])]
    rows = session.predict({})
    best = rows[0]
    assert (best.config.precision, best.config.channels_last) == ("fp16", True)
    # At batch size 32, fp16 with channels-last is predicted from the pair's effect.
    at_32 = next(r for r in rows if r.config == best.config.model_copy(update={"batch_size": 32}))
    assert at_32.basis == "model"
    assert at_32.predicted == pytest.approx(1000.0 / (2.0 * 0.5 * 0.6), rel=1e-6)
    # Verification: the best predicted first, then, the model fitted to what was achieved,
    # every row that could still beat the best achieved, until none could.
    rows = session.verify(rows, {})
    verified = [r for r in rows if r.achieved is not None]
    assert verified and rows[0].config == best.config and rows[0].achieved is not None
    achieved = max(r.achieved for r in verified)
    assert all(r.high <= achieved for r in rows if r.achieved is None)
    # The rows of one setting verified in one round shared its evaluation, each at its own
    # batch size's measurement.
    verifying = asked[len(probed) :]
    settings = {r.config.model_copy(update={"batch_size": 0}) for r in verified}
    assert len(verifying) == len(settings) < len(verified)
    for row in verified:
        (evaluation,) = [
            a
            for a in verifying
            if (a.precision, a.channels_last) == (row.config.precision, row.config.channels_last)
        ]
        assert row.config.batch_size in evaluation.batch_sizes
        batch = row.config.batch_size
        assert row.achieved == pytest.approx(1000.0 * batch / _fake_latency(evaluation, batch))


def test_a_space_probing_would_not_save_is_measured_whole() -> None:
    """fp32 and fp16 at two batch sizes: a baseline, one probe and a verification are more
    evaluations than its two settings; each setting is measured once at both batch sizes,
    the best achieved first. With bf16 and channels-last too (6 settings), probing is cheaper."""
    asked: list[EvaluationRequest] = []
    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], objective="throughput", precisions=["fp32", "fp16"],
        compile_modes=["none"], channels_last=False, batch_sizes=[32, 128], verify=1,
        budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet18"), (9, 0), 16)
    session = _Session(request, space, _fake_gpu(asked), lambda _line: None, time.monotonic())
    why = session.probing_costs_the_space()
    assert why == (
        "the space is measured whole: its 2 setting(s) take 2 evaluation(s), probing and "
        "verifying would take at least 3"
    )
    rows = session.measure_whole()
    assert sorted((a.precision, a.batch_sizes) for a in asked) == [
        ("fp16", [32, 128]), ("fp32", [32, 128])
    ]  # fmt: skip
    # Throughput, best first: fp16 doubles it at either batch size.
    assert [r.config.precision for r in rows] == ["fp16", "fp16", "fp32", "fp32"]
    assert {r.config.batch_size for r in rows[:2]} == {32, 128}
    for row in rows:
        assert row.basis == "measured" and row.error is None
        assert row.achieved == row.predicted == pytest.approx(
            1000.0 * row.config.batch_size / _fake_latency(asked[0].model_copy(
                update={"precision": row.config.precision}), row.config.batch_size)
        )  # fmt: skip
    fp32 = next(a for a in asked if a.precision == "fp32")
    assert session.baselines["torch"].request == fp32
    both = request.model_copy(
        update={"channels_last": None, "precisions": ["fp32", "fp16", "bf16"]}
    )
    wider = build_space(both, get_model("resnet18"), (9, 0), 16)
    assert not _Session(
        both, wider, _fake_gpu([]), print, time.monotonic()
    ).probing_costs_the_space()


def _advise_by_the_minute(
    store_root: Path,
    latency: Callable[[EvaluationRequest, int], float],
    step: Callable[[str], None] | None = None,
) -> AdviceRecord:
    """advise of resnet18 over fp32/bf16, channels-last and 1 or 2 threads, with a one-minute
    budget, on a clock where each evaluation (of ``latency``) takes 40 s."""
    now = [0.0]

    def run(requests):
        now[0] += 40.0 * len(requests)
        return [Ran(_record(r, latency), 40.0) for r in requests]

    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], precisions=["fp32", "bf16"],
        compile_modes=["none"], threads=[1, 2], batch_sizes=[1], budget_minutes=1,
        use_stored=False,
    )  # fmt: skip
    return advise(
        request, store=LocalStore(store_root), hardware=hardware.detect(), run=run, step=step,
        clock=lambda: now[0],
    )  # fmt: skip


def test_the_budget_is_kept_on_the_clock_advise_is_given(tmp_path) -> None:
    """advise times itself and its budget on the clock it is passed (a replay of recorded
    evaluations passes their wall times): with 40 s an evaluation, a one-minute budget stops
    the probes after the baseline's and one other, and with the one verification the advice
    took 120 s."""
    lines: list[str] = []
    record = _advise_by_the_minute(tmp_path, _fake_latency, lines.append)
    assert "budget spent: 2 probe(s) not run" in lines
    assert record.seconds == 120.0 and record.recommendation is not None


def test_a_probe_measured_better_than_every_verified_configuration_is_recommended(
    tmp_path,
) -> None:
    """The budget spent after the baseline, one probe and one verification: the configuration
    verified, bf16 (unprobed, so predicted as fp32 with a wide interval), achieved 3x worse
    than the baseline's probe. The probe measured the very configuration, so the baseline is
    recommended, on its probe, not bf16."""

    def latency(asked: EvaluationRequest, batch: int) -> float:
        slower = (3.0 if asked.precision == "bf16" else 1.0) * (
            1.9 if asked.intra_op_threads == 1 else 1.0
        )
        return 2.0 * slower * (0.97 if asked.channels_last else 1.0) * batch

    record = _advise_by_the_minute(tmp_path, latency)
    (verified,) = [r for r in record.rows if r.error is not None]
    assert verified.config.precision == "bf16" and verified.achieved == pytest.approx(5.82)
    chosen = record.recommendation
    assert chosen is not None and chosen.config == Config(framework="torch", threads=2)
    assert chosen.achieved == pytest.approx(2.0) and chosen.accuracy_holds
    assert "measured by its probe" in record.why


def test_verification_goes_on_in_rounds_while_a_rival_could_beat_the_best_achieved() -> None:
    """Three configurations ranked wrongly by their first prediction: the best predicted is
    verified first; the model fitted again (stood in for here) keeps one rival in, verified
    next and the best, and rules the other out, never evaluated."""
    truth = {("fp32", False): 12.0, ("fp16", False): 9.0, ("fp32", True): 13.0}
    session, asked, (baseline, fp16, layout) = _three_configurations(truth)
    first = [_row(baseline, 10, 8, 12), _row(fp16, 11, 7, 15), _row(layout, 14, 11, 16)]
    # Once the baseline achieved 12: fp16 can still beat it, channels-last no longer.
    session.predict = lambda _priors: [_row(fp16, 11, 7, 15), _row(layout, 14, 12.5, 16)]
    rows = session.verify(first, {})
    assert [(a.precision, a.channels_last) for a in asked] == [("fp32", False), ("fp16", False)]
    assert [(r.config, r.achieved) for r in rows] == [(baseline, 12.0), (fp16, 9.0), (layout, None)]
    # A verified row keeps the prediction it was verified on.
    assert (rows[1].predicted, rows[1].error) == (11, pytest.approx(2 / 9))


def _three_configurations(
    truth: dict[tuple[str, bool], float], say=lambda _line: None
) -> tuple[_Session, list[EvaluationRequest], tuple[Config, Config, Config]]:
    """A session over resnet18's fp32 and fp16, channels-last or not, whose evaluations
    achieve ``truth`` (by precision and channels-last), its baseline run; the requests it asks
    for from here on, and its baseline, fp16 and channels-last configurations."""
    asked: list[EvaluationRequest] = []

    def run(requests):
        asked.extend(requests)
        return [Ran(_record(r, lambda q, _b: truth[(q.precision, q.channels_last)]), 0.0)
                for r in requests]  # fmt: skip

    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], precisions=["fp32", "fp16"], compile_modes=["none"],
        verify=1, budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet18"), (9, 0), 16)
    session = _Session(request, space, run, say, time.monotonic())
    baseline = space.baseline("torch", 1)
    session.baselines["torch"] = run([_request_of(baseline)])[0].answer
    asked.clear()
    fp16 = baseline.model_copy(update={"precision": "fp16"})
    layout = baseline.model_copy(update={"channels_last": True})
    return session, asked, (baseline, fp16, layout)


def _row(config: Config, predicted: float, low: float, high: float) -> AdviceRow:
    return AdviceRow(config=config, predicted=predicted, low=low, high=high, basis="model",
                     predicted_latency_ms=predicted)  # fmt: skip


def _request_of(config: Config) -> EvaluationRequest:
    return EvaluationRequest(
        model="resnet18",
        precision=config.precision,
        channels_last=config.channels_last,
        batch_sizes=[config.batch_size],
    )


def _launch_ms(asked: EvaluationRequest, _batch: int) -> float:
    """A made-up GPU's host: an eager predict takes 8 ms to launch, a CUDA graph 0.2 ms."""
    return 0.2 if asked.compile == "reduce-overhead" else 8.0


def _device_ms(asked: EvaluationRequest, batch: int) -> float:
    """Its device: 0.5 ms an input at fp32, 0.06 at fp16."""
    return (0.06 if asked.precision == "fp16" else 0.5) * batch


def _launched_latency(asked: EvaluationRequest, batch: int) -> float:
    """A predict: the longer of the launch and the device's work, and the copies around it."""
    return max(_launch_ms(asked, batch), _device_ms(asked, batch)) + 0.3


def test_a_launch_bound_predict_is_predicted_from_the_host_not_the_device() -> None:
    """A fake GPU (none here) whose eager predicts launch for 8 ms while fp16 does an input's
    work in 0.06 ms: eager fp16 at batch 16 is launch-bound, its throughput set by the host,
    which the fp16 probe at batch 256 (device-bound) does not show. Split into the host's
    launch and the device's work, the model predicts it within 10 %; one model of both, as
    where no launch is timed, predicts the device's speed-up there, over 3x too fast. CUDA
    graphs (``reduce-overhead``) at fp16 take the device's time."""
    asked: list[EvaluationRequest] = []

    def run(requests):
        asked.extend(requests)
        return [Ran(_record(r, _launched_latency, _launch_ms), 0.0) for r in requests]

    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], objective="throughput", precisions=["fp32", "fp16"],
        compile_modes=["none", "reduce-overhead"], channels_last=False, batch_sizes=[16, 64, 256],
        verify=1, budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet18"), (9, 0), 16)
    session = _Session(request, space, run, lambda _line: None, time.monotonic())
    session.probe()
    session.probe_by_precision({})
    assert sorted((a.precision, a.compile or "", a.batch_sizes) for a in asked) == [
        ("fp16", "", [256]), ("fp16", "reduce-overhead", [256]), ("fp32", "", [16, 64, 256])
    ]  # fmt: skip
    rows = {row.config: row for row in session.predict({})}

    def truth(config: Config) -> float:
        asked = _request_of(config).model_copy(update={"compile": config.compile})
        return 1000.0 * config.batch_size / _launched_latency(asked, config.batch_size)

    fp16 = space.baseline("torch", 16).model_copy(update={"precision": "fp16"})
    assert rows[fp16].basis == "model"
    assert rows[fp16].predicted == pytest.approx(truth(fp16), rel=0.10)
    assert rows[fp16].low <= truth(fp16) <= rows[fp16].high
    one = CostModel(session.observations, {"torch": space.baseline("torch", 256)},
                    lambda o: 1.0 / o.value, True)  # fmt: skip
    assert 1.0 / one.predict(fp16).value > 3 * truth(fp16)
    graphs = fp16.model_copy(update={"compile": "reduce-overhead", "batch_size": 64})
    assert rows[graphs].predicted == pytest.approx(truth(graphs), rel=0.15)
    # Best predicted: fp16 at the largest batch, where the device decides.
    best = max(rows.values(), key=lambda row: row.predicted)
    assert (best.config.precision, best.config.batch_size) == ("fp16", 256)


def test_the_devices_work_timed_alone_carries_a_precision_into_cuda_graphs() -> None:
    """A fake GPU (none here) running a resnet50-like model at batch 1: eager predicts launch
    for 3.4 ms while the device's work is 2.5 ms at fp32, 0.9 ms at tf32 and 0.6 at fp16, so
    every eager probe is launch-bound and the precisions show no effect there; CUDA graphs
    launch in 0.1 ms, probed at fp16. With the device's work timed alone (``device_ms``),
    tf32's effect on it carries into tf32 with CUDA graphs, predicted within 10 %; without,
    the device's model has fp16's CUDA graphs alone to go by (the eager probes are
    launch-bound), the precisions' effects stay at their prior (none), and tf32 with CUDA
    graphs is predicted as fast as fp16's, 30 % too fast, left to verification."""

    def launch(asked: EvaluationRequest, _batch: int) -> float:
        return 0.1 if asked.compile == "reduce-overhead" else 3.4

    def device(asked: EvaluationRequest, _batch: int) -> float:
        return {"tf32": 0.9, "fp16": 0.6}.get(asked.precision, 2.5)

    def latency(asked: EvaluationRequest, batch: int) -> float:
        return max(launch(asked, batch), device(asked, batch)) + 0.1

    request = AdviceRequest(
        model="resnet50", frameworks=["torch"], precisions=["fp32", "tf32", "fp16"],
        compile_modes=["none", "reduce-overhead"], channels_last=False, batch_sizes=[1],
        verify=1, budget_minutes=60,
    )  # fmt: skip
    graphs = Config(framework="torch", precision="tf32", compile="reduce-overhead", batch_size=1)
    truth = latency(_request_of(graphs).model_copy(update={"compile": graphs.compile}), 1)
    predicted = {}
    for timed in (True, False):

        def run(requests, alone=device if timed else None):
            return [Ran(_record(r, latency, launch, alone), 0.0) for r in requests]

        space = build_space(request, get_model("resnet50"), (9, 0), 16)
        session = _Session(request, space, run, lambda _line: None, time.monotonic())
        session.probe()
        session.probe_by_precision({})
        assert not session._has(graphs)
        assert session._has(graphs.model_copy(update={"precision": "fp16"}))
        predicted[timed] = next(r for r in session.predict({}) if r.config == graphs)
    assert predicted[True].predicted == pytest.approx(truth, rel=0.10)
    assert predicted[True].low <= truth <= predicted[True].high
    assert predicted[False].predicted == pytest.approx(0.7, rel=0.05)


def _resnet_like(asked: EvaluationRequest) -> tuple[float, float]:
    """A made-up GPU's resnet50 at batch 1: the launch (eager 3.4 ms, inductor's 4.7, CUDA
    graphs 0.1) and the device's work (2.5 ms at fp32; tf32 x0.35, fp16 and bf16 x0.3;
    channels-last x0.95 at fp32, x0.8 below it; a compile x0.95)."""
    launch = {None: 3.4, "default": 4.7, "reduce-overhead": 0.1}[asked.compile]
    device = 2.5 * {"fp32": 1.0, "tf32": 0.35, "fp16": 0.3, "bf16": 0.3}[asked.precision]
    if asked.channels_last:
        device *= 0.95 if asked.precision == "fp32" else 0.8
    return launch, device * (0.95 if asked.compile else 1.0)


def test_with_the_devices_work_timed_alone_few_compiled_settings_are_verified() -> None:
    """advise over a made-up GPU (none here) with resnet50's space at batch 1, 24
    configurations, 16 of them compiled: with the device's work timed alone, few are
    verified: once the fastest is verified, a rival that could beat it is verified only where
    it is expected to gain more than the tolerance. With only the launches timed, the
    precisions' effect on the device stays unknown under CUDA graphs (every eager probe is
    launch-bound, and the one compiled probe is at one precision), the compiled
    configurations' intervals stay wide and more are verified (three rounds of two), still
    under half. Both find the fastest."""
    compiled = {}
    for timed in (False, True):
        session, asked, rows = _resnet_like_advice(timed=timed)
        best = min((r for r in rows if r.achieved is not None), key=lambda r: r.achieved)
        assert best.achieved == pytest.approx(2.5 * 0.3 * 0.8 * 0.95 + 0.3)
        probe_length = session.request.probe_iterations
        compiled[timed] = sum(1 for a in asked if a.compile and a.iterations != probe_length)
    assert compiled[True] <= 3 and compiled[False] <= 6


def test_on_a_gpu_cuda_graphs_bound_the_compile_mode_whose_kernels_they_replay() -> None:
    """reduce-overhead is inductor's default code replayed as CUDA graphs: on a GPU each
    default configuration is bounded by its reduce-overhead twin, until that twin leaves the
    space (it failed); on the CPU, which has no CUDA graphs, neither bounds the other."""
    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], compile_modes=["none", "default", "reduce-overhead"]
    )
    gpu = build_space(request, get_model("resnet18"), (9, 0), 16)
    defaults = [c for c in gpu.configs if c.compile == "default"]
    twins = [gpu.graphed_by(c) for c in defaults]
    assert defaults and twins == [
        c.model_copy(update={"compile": "reduce-overhead"}) for c in defaults
    ]
    assert not any(gpu.graphed_by(c) for c in gpu.configs if c.compile != "default")
    gpu.configs.remove(twins[0])  # type: ignore[arg-type]
    assert gpu.graphed_by(defaults[0]) is None and gpu.graphed_by(defaults[1]) == twins[1]
    cpu = build_space(request, get_model("resnet18"), None, 4)
    assert {c.compile for c in cpu.configs} == {None, "default", "reduce-overhead"}
    assert not any(cpu.graphed_by(c) for c in cpu.configs)


def _resnet_like_advice(
    timed: bool = True, fails: str | None = None
) -> tuple[_Session, list[EvaluationRequest], list]:
    """advise over a made-up GPU (none here) with resnet50's space at batch 1 (``_resnet_like``,
    the device's work timed alone where ``timed``), probed, predicted and verified; every
    evaluation of compile mode ``fails`` failing. The session, what it asked for, its rows."""

    def latency(asked: EvaluationRequest, _batch: int) -> float:
        return max(_resnet_like(asked)) + 0.3

    def run(requests):
        asked.extend(requests)
        launch, device = (lambda q, _b, i=i: _resnet_like(q)[i] for i in (0, 1))
        return [
            Ran(LibraryFailure("out of memory") if fails and r.compile == fails else
                _record(r, latency, launch, device if timed else None), 10.0)
            for r in requests
        ]  # fmt: skip

    asked: list[EvaluationRequest] = []
    request = AdviceRequest(
        model="resnet50", frameworks=["torch"], precisions=["fp32", "tf32", "fp16", "bf16"],
        compile_modes=["none", "default", "reduce-overhead"], batch_sizes=[1], verify=2,
        budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet50"), (9, 0), 16)
    session = _Session(request, space, run, lambda _line: None, time.monotonic())
    session.probe()
    session.probe_by_precision({})
    return session, asked, session.verify(session.predict({}), {})


def test_a_configuration_bounded_by_its_cuda_graphs_twin_is_neither_probed_nor_verified() -> None:
    """Compile default is bounded by reduce-overhead's CUDA graphs: never evaluated, each of its
    rows predicted no faster than its twin's, and the fastest still found. Where every
    reduce-overhead evaluation fails, default is probed in its place."""
    session, asked, rows = _resnet_like_advice()
    assert "default" not in {a.compile for a in asked}
    by_config = {row.config: row for row in rows}
    bounded = [r for r in rows if r.config.compile == "default"]
    assert len(bounded) == 8
    for row in bounded:
        twin = by_config[session.space.graphed_by(row.config)]  # type: ignore[index]
        assert row.achieved is None and row.predicted >= twin.predicted and row.low >= twin.low
    best = min((r for r in rows if r.achieved is not None), key=lambda r: r.achieved)
    assert best.config.compile == "reduce-overhead"
    assert best.achieved == pytest.approx(2.5 * 0.3 * 0.8 * 0.95 + 0.3)
    assert session.bounded(rows) == [
        "8 configuration(s) compiled default on torch predicted no faster than with "
        "reduce-overhead, which replays the same kernels as one CUDA graph: not evaluated"
    ]
    session, asked, rows = _resnet_like_advice(fails="reduce-overhead")
    probes = [a for a in asked if a.compile == "default" and a.iterations == 5]
    assert len(probes) == 1 and probes[0].precision == "fp16"
    best = min((r for r in rows if r.achieved is not None), key=lambda r: r.achieved)
    assert best.config.compile != "reduce-overhead" and not session.bounded(rows)


def test_two_predictions_are_told_apart_by_what_they_do_not_share() -> None:
    """bf16 at one thread and bf16 channels-last at one thread share the baseline and two of
    their effects: their difference is known better than were they independent, and its log
    is the one setting they differ in; against a probed configuration, nothing is shared."""
    probes = [BASE, *(BASE.model_copy(update={f: v}) for f, v in EFFECT)]
    # Probes known to 10%: the baseline's and the effects' errors are much of a prediction's.
    seen = [_observe(c).model_copy(update={"spread": 0.1}) for c in probes]
    model = CostModel(seen, {"torch": BASE}, lambda o: o.value, False)
    one = Config(framework="torch", precision="bf16", threads=1)
    other = one.model_copy(update={"channels_last": True})
    log_ratio, sigma = model.difference(other, one)
    assert log_ratio == pytest.approx(math.log(EFFECT[("channels_last", True)]), rel=1e-6)

    def own(config: Config) -> float:
        guess = model.predict(config)
        return math.log(guess.high / guess.low) / (2 * 1.96)

    assert sigma < 0.9 * math.hypot(own(one), own(other))
    probed = probes[1]
    _log, apart = model.difference(one, probed)
    assert apart == pytest.approx(math.hypot(own(one), own(probed)), rel=1e-6)


def test_a_rival_expected_to_gain_less_than_the_tolerance_is_not_verified() -> None:
    """The baseline achieves 12 ms; fp16's interval reaches past it, but by so little that its
    expected gain is under the tolerance: not evaluated. Channels-last, as likely to lose as to
    win by a wide margin, is expected to gain more than the tolerance: verified."""
    truth = {("fp32", False): 12.0, ("fp16", False): 11.9, ("fp32", True): 10.0}
    lines: list[str] = []
    session, asked, (baseline, fp16, layout) = _three_configurations(truth, lines.append)
    first = [_row(baseline, 10, 8, 12), _row(fp16, 12.2, 11.8, 12.6), _row(layout, 13, 8, 21)]
    session.predict = lambda _priors: [_row(fp16, 12.2, 11.8, 12.6), _row(layout, 13, 8, 21)]
    rows = session.verify(first, {})
    assert [(a.precision, a.channels_last) for a in asked] == [("fp32", False), ("fp32", True)]
    assert {r.config: r.achieved for r in rows}[fp16] is None
    assert any("expected to gain less than 5%" in line for line in lines)


def test_each_evaluation_says_the_time_its_runner_measured_not_a_share_of_its_round() -> None:
    """A runner of one device runs a round's evaluations one after another: a compiled one
    takes its compile, an eager one seconds. Each observation says its own evaluation's wall
    time as the runner measured it, not an even share of the round's."""
    took = {None: 1.5, "default": 30.0}

    def run(requests):
        return [Ran(_record(r, _fake_latency), took[r.compile]) for r in requests]

    request = AdviceRequest(
        model="resnet18", frameworks=["torch"], precisions=["fp32"],
        compile_modes=["none", "default"], verify=1, budget_minutes=60,
    )  # fmt: skip
    space = build_space(request, get_model("resnet18"), (9, 0), 16)
    session = _Session(request, space, run, lambda _line: None, time.monotonic())
    eager = space.baseline("torch", 1)
    compiled = eager.model_copy(update={"compile": "default"})
    answers = session._evaluations([([eager], "full"), ([compiled], "full")], 3, 0.0)
    assert [seconds for _answer, seconds in answers] == [1.5, 30.0]
