"""The table of Benanza's numbers from ``mlms bound --json`` records (benchmarks/plans/bounds.py):
per model and batch size, the measured latency, both lower bounds and their ratios, whether the
bound stays below the measurement, the share of layers whose bound is at most their measured
kernel time, and each what-if's speed-up; then the layer benchmarks' cost.

    python benchmarks/bounds_table.py RECORD.json [RECORD.json ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from mlms.bounds.record import BoundRecord

#: A layer's bound may exceed its measured kernel time by timer noise this small.
TOLERANCE_MS = 0.0


def rows(record: BoundRecord) -> list[dict[str, object]]:
    out = []
    for batch in record.batches:
        layers = [
            layer for layer in batch.layers if layer.measured_ms is not None and layer.bound_ms > 0
        ]
        below = sum(layer.bound_ms <= layer.measured_ms + TOLERANCE_MS for layer in layers)  # type: ignore[operator]
        row: dict[str, object] = {
            "model": record.model,
            "runs at": record.request.model_precision,
            "batch": batch.batch_size,
            "measured ms": batch.measured_ms,
            "kernel ms": batch.kernel_ms,
            "traced ms": batch.traced_ms,
            "seq LBL ms": batch.sequential_ms,
            "par LBL ms": batch.parallel_ms,
            "LBL/meas": batch.ratio,
            "parLBL/meas": batch.parallel_ratio,
            "LBL<=meas": batch.sequential_ms <= batch.measured_ms,
            "layers bound<=meas": f"{below}/{len(layers)}",
            "%": 100 * below / len(layers) if layers else float("nan"),
            # How far over: memory-bound layers run a little faster inside the model.
            "% within 5%": 100
            * sum(layer.bound_ms <= 1.05 * layer.measured_ms for layer in layers)  # type: ignore[operator]
            / len(layers)
            if layers
            else float("nan"),
        }
        for what_if in batch.what_ifs:
            row[what_if.name] = what_if.speedup
        out.append(row)
    return out


def findings(record: BoundRecord) -> list[dict[str, object]]:
    """The quantities Benanza published, per batch size: what parallel layers would gain
    (sequential over parallel bound), what the heuristic's convolution algorithms cost over the
    fastest (share of the convolutions' time), and the tensor-core speed-up of the convolution
    and GEMM layers (their bound at the framework's precision over the fastest at any)."""
    out = []
    for batch in record.batches:
        convs = [r for r in batch.layers if r.kind == "conv" and r.framework_ms is not None]
        framework = sum(r.framework_ms for r in convs)  # type: ignore[misc]
        best = sum(min(r.bound_ms, r.framework_ms) for r in convs)  # type: ignore[type-var]
        dense = [r for r in batch.layers if r.kind in ("conv", "gemm")]
        out.append(
            {
                "model": record.model,
                "batch": batch.batch_size,
                "parallel: seq/par LBL": batch.sequential_ms / batch.parallel_ms,
                # A model without convolutions (a transformer) has no algorithm to choose.
                "conv algorithm: heuristic over best (%)": 100 * (framework - best) / best
                if best
                else float("nan"),
                "tensor cores on conv+gemm (x)": sum(r.bound_ms for r in dense)
                / sum(r.any_precision_ms for r in dense),
            }
        )
    return out


def main(paths: list[str]) -> None:
    records = []
    for path in paths:
        text = Path(path).read_text().strip()
        if not text:
            print(f"{path}: empty (the run failed; see its .err)")
            continue
        records.append(BoundRecord.model_validate_json(text))
    if not records:
        return
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    table = pd.DataFrame([row for record in records for row in rows(record)])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    table = pd.DataFrame([row for record in records for row in findings(record)])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    for record in records:
        print(
            f"{record.model}: {record.benchmarked} layer configs benchmarked in "
            f"{record.bench_seconds:.1f} s, {record.cached} from the perfdb "
            f"({record.device_name}; {', '.join(f'{k} {v}' for k, v in record.libraries.items())})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
