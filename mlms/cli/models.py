"""``mlms models``: list the zoo's and the added models; add a model file or folder to the store
(``add``); remove an added one (``remove``)."""

from __future__ import annotations

from pathlib import Path

import click

from mlms.cli.common_options import client_for, server_option
from mlms.cli.render import out, rows_table
from mlms.manifest import ModelManifest

#: ``mlms.assets.file_models.Task``'s values (that module is not loaded for a listing).
TASKS = (
    "image_classification",
    "text_classification",
    "text_generation",
    "object_detection",
    "semantic_segmentation",
)


@click.group(invoke_without_command=True)
@click.option(
    "--all",
    "libraries",
    is_flag=True,
    help="Also every timm and torchvision architecture mlms can feed, as timm:NAME and "
    "torchvision:NAME (imports both libraries: seconds).",
)
@server_option
@click.pass_context
def models(ctx: click.Context, libraries: bool, server: str | None) -> None:
    """List the model zoo and the models added to the store; 'models add' adds one."""
    if ctx.invoked_subcommand is not None:
        return
    manifests = client_for(server).list_models(libraries=libraries)
    out.print(rows_table([_row(m) for m in manifests], "models"))
    if libraries:
        out.print(_count(manifests))


def _count(manifests: list[ModelManifest]) -> str:
    """How many models of each kind the listing holds."""
    kinds: dict[str, int] = {}
    for manifest in manifests:
        library, colon, _name = manifest.name.partition(":")
        kind = library if colon else "zoo" if manifest.origin == "zoo" else "added"
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = ", ".join(f"{count:,} {kind}" for kind, count in kinds.items())
    return (
        f"{len(manifests):,} models: {parts}; architectures mlms cannot feed (video, optical "
        "flow, quantized, ...) are left out, and 'mlms eval --model LIBRARY:NAME' says why"
    )


def _row(manifest: ModelManifest) -> dict[str, str]:
    source = manifest.file_source
    spec = manifest.inputs[0]
    return {
        "name": manifest.name,
        "version": manifest.version,
        "origin": manifest.origin,
        "task": manifest.task,
        "frameworks": ", ".join(manifest.framework_names),
        "input": f"{spec.name} {'x'.join(map(str, spec.shape))} {spec.dtype}",
        "format": source.format if source else "zoo build",
        "sha256": source.sha256[:12] if source else "",
        "data set": manifest.dataset.name if manifest.dataset else "",
    }


@models.command("add")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--name", required=True, help="The model's name (letters, digits, _ - .).")
@click.option("--version", default=None, help="Default: 1.")
@click.option(
    "--task",
    type=click.Choice(TASKS),
    default=None,
    help="Default: from the artifact (its inputs, or a Hugging Face config).",
)
@click.option(
    "--labels",
    "labels_file",
    type=click.Path(path_type=Path),
    default=None,
    help="A text file with one class name a line, in output order.",
)
@click.option(
    "--preprocess",
    multiple=True,
    metavar="KEY=VALUE",
    help="Image preprocessing over the task's defaults: color=RGB|BGR|L, resize=N, "
    "crop=N, scale=X, mean=A,B,C, std=A,B,C (repeatable).",
)
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME=AxBx..",
    help="The shape of an input the artifact leaves open, batch axis first.",
)
@click.option("--seq-len", type=int, default=None, help="Token models: tokens per input.")
@click.option(
    "--layout",
    type=click.Choice(["CHW", "HWC"]),
    default=None,
    help="Image inputs: channels first or last (default: from the shape).",
)
@click.option(
    "--framework",
    default=None,
    help="Which framework loads it where several can (a Hugging Face folder: torch).",
)
@click.option("--replace", is_flag=True, help="Overwrite a model of this name and version.")
@server_option
def add(
    path: Path,
    name: str,
    version: str | None,
    task: str | None,
    labels_file: Path | None,
    preprocess: tuple[str, ...],
    input_shapes: tuple[str, ...],
    seq_len: int | None,
    layout: str | None,
    framework: str | None,
    replace: bool,
    server: str | None,
) -> None:
    """Add a model file or folder (ONNX, .pt2, TorchScript .pt, .keras, SavedModel, Hugging
    Face save_pretrained) to the store, so that 'mlms eval --model NAME' runs it."""
    from mlms.assets.file_models import (
        ModelOptions,
        parse_input_shape,
        parse_preprocess,
        read_labels,
    )
    from mlms.user_input import validated

    options = validated(
        ModelOptions,
        name=name,
        version=version,
        task=task,
        labels=read_labels(labels_file) if labels_file else [],
        preprocess=parse_preprocess(list(preprocess)),
        input_shapes=[parse_input_shape(text) for text in input_shapes],
        seq_len=seq_len,
        layout=layout,
        framework=framework,
    )
    manifest = client_for(server).add_model(path, options, replace=replace)
    source = manifest.file_source
    spec = manifest.inputs[0]
    out.print(
        f"added {manifest.name} {manifest.version}: {source.format if source else ''} "
        f"for {', '.join(manifest.framework_names)}, input {spec.name} "
        f"{'x'.join(map(str, spec.shape))} {spec.dtype} ({spec.layout}), "
        f"task {manifest.task}, sha256 {source.sha256 if source else ''}"
    )


@models.command("remove")
@click.argument("name")
@click.option("--version", default=None, help="Default: every version.")
@server_option
def remove(name: str, version: str | None, server: str | None) -> None:
    """Remove a model added to the store."""
    versions = client_for(server).remove_model(name, version)
    out.print(f"removed {name} version{'s' * (len(versions) > 1)} {', '.join(versions)}")
