"""The zoo's models in the order the zoo_sweep plan sweeps them, comma-separated: one
model of each family and task first (so that a sweep cut by its time budget still covers every
task), then the others by name, the largest networks last. ``--table SWEEP.json`` prints a
stored sweep's cells as a table instead.

    python benchmarks/zoo_sweep_order.py
    python benchmarks/zoo_sweep_order.py --table $MLMS_HOME/store/sweeps/ID.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlms.catalog.zoo import all_models

#: Swept first: MLPerf's and XSP's classics and one of each task and architecture kind.
FIRST = (
    "resnet50", "ssdlite320_mobilenet_v3", "deeplabv3_resnet50", "bert_base", "gpt2_small",
    "t5_small", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "ssd300_vgg16",
    "fasterrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn", "retinanet_resnet50_fpn",
    "fcos_resnet50_fpn", "fcn_resnet50", "lraspp_mobilenet_v3", "distilbert_base",
    "marian_en_de", "convnext_tiny", "swin_t", "deit_small", "regnety_016", "vgg16",
    "densenet121", "inception_v3", "alexnet", "resnet18", "mobilenet_v3_large",
)  # fmt: skip
#: Built last: seconds to minutes of weight initialisation and gigabytes to store each.
LARGEST = ("vit_l_16", "regnet_y_8gf", "bert_large", "gpt2_large", "gpt2_xl")


def sweep_order() -> list[str]:
    names = [m.name for m in all_models() if m.origin == "zoo" and "torch" in m.framework_names]
    rest = [name for name in names if name not in FIRST and name not in LARGEST]
    return [*(n for n in FIRST if n in names), *rest, *(n for n in LARGEST if n in names)]


def table(path: Path) -> str:
    state = json.loads(path.read_text())
    lines = [f"{'model':34} {'batch':>5} {'state':>9} {'p50 ms':>10} {'inputs/s':>11} {'J/inf':>9}"]
    for cell in state["cells"]:
        numbers = [
            _text(cell.get("p50_ms"), ".3f", 10),
            _text(cell.get("throughput"), ".1f", 11),
            _text(cell.get("joules_per_inference"), ".4g", 9),
        ]
        lines.append(
            f"{cell['model']:34} {cell['batch_size']:>5} {cell['state']:>9} {' '.join(numbers)}"
        )
    done = sum(cell["state"] == "completed" for cell in state["cells"])
    models = len({cell["model"] for cell in state["cells"] if cell["state"] == "completed"})
    lines.append(f"{done} of {len(state['cells'])} cells completed, {models} models")
    return "\n".join(lines)


def _text(value: float | None, form: str, width: int) -> str:
    return f"{'' if value is None else format(value, form):>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, help="a stored sweep's JSON to print as a table")
    args = parser.parse_args()
    print(table(args.table) if args.table else ",".join(sweep_order()))


if __name__ == "__main__":
    main()
