"""``mlms advise``: which configuration of a model to run on a device, predicted from stored
evaluations, the lower bound's what-ifs and short probes, then verified by evaluations."""

from __future__ import annotations

import click

from mlms.cli.common_options import client_for, server_option
from mlms.cli.render import err, frame_table, out
from mlms.errors import InvalidArgument
from mlms.user_input import parse_batch_sizes, validated


def _names(text: str | None, what: str) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise InvalidArgument(f"bad {what} list {text!r}: expected distinct comma-separated names")
    return names


def _counts(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise InvalidArgument(f"bad --threads {text!r}: expected counts like '1,2'")
    return [int(p) for p in parts]


@click.command("advise")
@click.option("--model", "-m", default=None, help="A zoo model or one added to the store.")
@click.option("--hw", default="cpu", show_default=True, help="cpu or a GPU alias (h100, ...).")
@click.option(
    "--objective",
    default="latency",
    show_default=True,
    help="latency (p50 at batch size 1), throughput (inputs/s) or energy (J/inference).",
)
@click.option("--slo-ms", type=float, default=None, help="A latency every choice must meet.")
@click.option(
    "--percentile",
    type=float,
    default=99.0,
    show_default=True,
    help="Of --slo-ms: 50, 90, 95 or 99.",
)
@click.option("--dataset", default=None, help="Check accuracy on this data set (NAME[@VERSION]).")
@click.option(
    "--max-accuracy-drop",
    type=float,
    default=0.5,
    show_default=True,
    help="Points of the data set task's metric a configuration may lose against fp32 on "
    "--dataset: top-1, mAP or mIoU percentage points, BLEU points, or percent more perplexity.",
)
@click.option(
    "--budget-minutes", type=float, default=10.0, show_default=True,
    help="Wall time of the probes and the verifying evaluations together.",
)  # fmt: skip
@click.option("--frameworks", "-f", default=None, help="Comma-separated; default: every one.")
@click.option("--precision", "precisions", default=None, help="Comma-separated, e.g. fp32,bf16.")
@click.option(
    "--compile", "compile_modes", default=None,
    help="Comma-separated compile modes ('none': as shipped), e.g. none,default.",
)  # fmt: skip
@click.option(
    "--channels-last",
    type=click.Choice(["both", "on", "off"]),
    default="both",
    show_default=True,
    help="Where it applies (CNNs on torch).",
)
@click.option("--threads", default=None, help="CPU intra-op threads to try, e.g. 1,2.")
@click.option("--batch-size", "-b", "batch_sizes", default=None, help="Throughput and energy.")
@click.option(
    "--verify",
    type=int,
    default=1,
    show_default=True,
    help="The first round verifies the best predicted and, of the next this many - 1, those "
    "expected to gain over it more than 5 %; each later round the this many best predicted "
    "of those expected to gain that much over the best achieved, while the budget lasts "
    "(on several devices: as many as run at once).",
)
@click.option("--iterations", "-n", type=int, default=20, show_default=True)
@click.option("--min-seconds", type=float, default=1.0, show_default=True)
@click.option("--probe-iterations", type=int, default=5, show_default=True)
@click.option("--probe-min-seconds", type=float, default=0.2, show_default=True)
@click.option("--no-stored", is_flag=True, help="Ignore stored evaluations of the model.")
@click.option(
    "--tensor-parallel", type=int, default=1, show_default=True, metavar="N",
    help="Every evaluation splits the model over N devices of --hw's kind (torch; see mlms eval).",
)  # fmt: skip
@click.option("--top", type=int, default=10, show_default=True, help="Configurations shown.")
@click.option("--list", "listing", is_flag=True, help="List the stored advice instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON, nothing else.")
@server_option
def advise(
    model: str | None,
    hw: str,
    objective: str,
    slo_ms: float | None,
    percentile: float,
    dataset: str | None,
    max_accuracy_drop: float,
    budget_minutes: float,
    frameworks: str | None,
    precisions: str | None,
    compile_modes: str | None,
    channels_last: str,
    threads: str | None,
    batch_sizes: str | None,
    verify: int,
    iterations: int,
    min_seconds: float,
    probe_iterations: int,
    probe_min_seconds: float,
    no_stored: bool,
    tensor_parallel: int,
    top: int,
    listing: bool,
    as_json: bool,
    server: str | None,
) -> None:
    """Which framework, precision, compile mode, channels-last, threads and batch size to run
    a model with: every configuration the device and frameworks admit, ranked by a prediction
    (stored evaluations, the lower bound's what-ifs, short probes) with its interval; the best
    predicted verified by evaluations within the budget; the recommendation is the best
    achieved whose accuracy holds against fp32. Stored as advice/<id>.json."""
    from mlms.advise.record import AdviceRequest
    from mlms.advise.tables import advice_table, facts, split_label

    client = client_for(server)
    if listing:
        for record in client.list_advice():
            chosen = (
                record.recommendation.config.label() + split_label(record)
                if record.recommendation
                else "none"
            )
            out.print(
                f"{record.id}  {record.created_at:%Y-%m-%d %H:%M}  {record.model} on "
                f"{record.device_name}, {record.request.objective}: {chosen}"
            )
        return
    if model is None:
        raise InvalidArgument("mlms advise needs --model (or --list)")
    request = validated(
        AdviceRequest,
        model=model,
        hw=hw,
        objective=objective,
        frameworks=_names(frameworks, "framework"),
        precisions=_names(precisions, "precision"),
        compile_modes=_names(compile_modes, "compile mode"),
        channels_last={"both": None, "on": True, "off": False}[channels_last],
        threads=_counts(threads),
        batch_sizes=parse_batch_sizes(batch_sizes) if batch_sizes else None,
        slo_ms=slo_ms,
        percentile=percentile,
        dataset=dataset,
        max_accuracy_drop=max_accuracy_drop,
        budget_minutes=budget_minutes,
        verify=verify,
        iterations=iterations,
        min_seconds=min_seconds,
        probe_iterations=probe_iterations,
        probe_min_seconds=probe_min_seconds,
        use_stored=not no_stored,
        tensor_parallel=tensor_parallel,
    )
    record = client.advise(request, None if as_json else err.print)
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    out.print(frame_table(facts(record), "Advice"))
    out.print(frame_table(advice_table(record, top), f"Configurations (top {top} and verified)"))
    out.print(
        f"advice {record.id}  (stored as advice/{record.id}.json; mlms report {record.id[:12]})"
    )
