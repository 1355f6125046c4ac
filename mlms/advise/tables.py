"""An advice record as tables: what ``mlms advise`` prints and the report draws."""

from __future__ import annotations

import pandas as pd

from mlms.advise.record import AdviceRecord


def advice_table(record: AdviceRecord, top: int | None = None) -> pd.DataFrame:
    """Every configuration (the first ``top``, and every verified one below them), best
    predicted first: the prediction with its interval, what was achieved, the accuracy."""
    unit = record.request.unit
    chosen = record.recommendation.config if record.recommendation else None
    rows = []
    for rank, row in enumerate(record.rows, 1):
        if top is not None and rank > top and row.achieved is None:
            continue
        rows.append(
            {
                "rank": rank,
                "configuration": row.config.label(),
                f"predicted ({unit})": row.predicted,
                "95% interval": f"{row.low:.4g} to {row.high:.4g}",
                "basis": row.basis,
                f"p{record.request.percentile:g} predicted (ms)": row.predicted_latency_ms,
                f"achieved ({unit})": row.achieved,
                "error (%)": None if row.error is None else 100 * row.error,
                "accuracy": row.accuracy or "",
                "evaluation": (row.evaluation_id or "")[:12],
                "chosen": "<-" if chosen == row.config and row.achieved is not None else "",
            }
        )
    return pd.DataFrame(rows)


def facts(record: AdviceRecord) -> pd.DataFrame:
    """What was asked, what the space held and left out, where the time went."""
    request = record.request
    items = {
        "model": record.model,
        "device": record.device_name + split_label(record, "; the model split over {} ranks"),
        "objective": f"{request.objective} ({request.unit})"
        + (
            f", p{request.percentile:g} <= {request.slo_ms:g} ms"
            if request.slo_ms is not None
            else ""
        ),
        "frameworks": ", ".join(f"{k} {v}" for k, v in record.frameworks.items()),
        "space": f"{record.space} configurations",
        "left out": "; ".join(record.left_out) or "nothing",
        "evidence": "; ".join(
            [
                f"{sum(o.source == 'probe' for o in record.observations)} probe measurements",
                *record.evidence,
            ]
        ),
        "time": f"{record.seconds:.0f} s ({record.probe_seconds:.0f} s probing, "
        f"{record.verify_seconds:.0f} s verifying; budget {request.budget_minutes:g} min)",
        "prediction error": (
            "-"
            if record.median_error is None
            else f"median {100 * record.median_error:.1f}% over the verified; "
            f"{100 * (record.coverage or 0):.0f}% achieved inside the interval"
        ),
        "recommendation": (
            record.recommendation.config.label() + split_label(record)
            if record.recommendation
            else "none"
        )
        + f": {record.why}",
        "advice id": record.id,
    }
    return pd.DataFrame({"": list(items), "value": list(items.values())})


def split_label(record: AdviceRecord, words: str = ", tensor parallel {}") -> str:
    """``words`` with the ranks where every evaluation of the advice split the model, else
    nothing."""
    ranks = record.request.tensor_parallel
    return words.format(ranks) if ranks > 1 else ""
