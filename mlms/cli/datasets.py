"""``mlms datasets``: labelled data sets in the store (add, list, remove).

A fleet's agents read data sets from the store they share: add one there with ``--store``
(``s3://...``) and evaluate it with ``mlms eval --server ... --dataset NAME``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mlms.cli.common_options import store_option
from mlms.cli.render import out

if TYPE_CHECKING:
    from mlms.datasets.index import DatasetIndex


@click.group(invoke_without_command=True)
@store_option
@click.pass_context
def datasets(ctx: click.Context, store: str | None) -> None:
    """List the data sets in the store; 'add' and 'remove' change them."""
    ctx.obj = store
    if ctx.invoked_subcommand is not None:
        return
    import pandas as pd

    from mlms.cli.render import frame_table
    from mlms.datasets.index import list_indexes
    from mlms.store.factory import store_from_url

    target = store_from_url(store)
    rows = [
        {
            "name": index.name,
            "version": index.version,
            "kind": index.kind,
            "task": index.task,
            "samples": index.samples,
            "labels": _labels(index),
            "shards": len(index.shards),
            "MB": round(sum(s.bytes for s in index.shards) / 1e6, 2),
            "sha256": sha256[:16],
            "added (UTC)": index.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        }
        for index, sha256 in list_indexes(target)
    ]
    if not rows:
        out.print(f"no data sets in {target.url}; add one with 'mlms datasets add PATH --name N'")
        return
    out.print(frame_table(pd.DataFrame(rows), f"data sets in {target.url}"))


@datasets.command()
@click.argument("path", type=click.Path(path_type=Path))
@store_option
@click.option("--name", required=True, help="Plain name: letters, digits, '_', '-', '.'.")
@click.option("--version", "version", default="1", show_default=True, help="Its version.")
@click.option("--replace", is_flag=True, help="Overwrite the version if it exists.")
@click.option(
    "--labels",
    "labels_csv",
    type=click.Path(path_type=Path),
    default=None,
    help="Image folders: a CSV of file,label (default: PATH/labels.csv, else one subfolder "
    "per class).",
)
@click.pass_obj
def add(
    group_store: str | None,
    path: Path,
    store: str | None,
    name: str,
    version: str,
    replace: bool,
    labels_csv: Path | None,
) -> None:
    """Add a data set: an image folder (a subfolder per class, or a labels CSV), a COCO-format
    folder (annotations/ and its images), a folder of images/ and masks/ (or VOC's
    JPEGImages/ and SegmentationClass/), a .npz or .parquet file of input arrays plus
    'label', or .jsonl lines of 'text' or 'input_ids' plus 'label', plus 'reference'
    (translation), or alone (language modelling)."""
    from mlms.datasets.index import check_name
    from mlms.datasets.ingest import add_dataset
    from mlms.store.factory import store_from_url

    check_name(name, "name")
    check_name(version, "version")
    target = store_from_url(store or group_store)
    index, sha256 = add_dataset(
        target, path, name, version=version, replace=replace, labels_csv=labels_csv
    )
    labels = _labels(index)
    out.print(
        f"added data set {index.name}@{index.version}: {index.samples} samples ({index.kind}), "
        f"{labels}, {len(index.shards)} shard{'s' if len(index.shards) > 1 else ''}, "
        f"index sha256 {sha256[:16]} in {target.url}"
    )


def _labels(index: DatasetIndex) -> str:
    """What the data set's truth is, in a few words."""
    if index.task == "detection":
        return f"{len(index.categories or {})} COCO categories"
    if index.task == "segmentation":
        return f"mask classes 0..{index.label_max}"
    if index.task == "translation":
        return "reference translations"
    if index.task == "language_modeling":
        return "plain text"
    if index.label_names:
        return f"{len(index.label_names)} class names"
    return f"labels 0..{index.label_max}"


@datasets.command()
@click.argument("reference", metavar="NAME[@VERSION]")
@store_option
@click.pass_obj
def remove(group_store: str | None, reference: str, store: str | None) -> None:
    """Remove a data set (every version, or the one named)."""
    from mlms.datasets.index import remove as remove_dataset
    from mlms.store.factory import store_from_url

    target = store_from_url(store or group_store)
    for index in remove_dataset(target, reference):
        out.print(f"removed data set {index.name}@{index.version} from {target.url}")
