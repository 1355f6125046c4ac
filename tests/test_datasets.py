"""Data sets in the store (``mlms datasets``) evaluated with ``mlms eval --dataset``, embedded:
every kind, the digits hold-out's accuracy through each, streaming, the pipeline's spans, and
every bad input over the CLI. Nothing is faked: real files, the local store, torch models."""

from __future__ import annotations

import io
import json
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from mlms import errors
from mlms.assets.digits import load_split
from mlms.assets.transformers_import import import_transformers
from mlms.catalog.zoo import get_model
from mlms.client import EmbeddedClient
from mlms.datasets import ingest
from mlms.datasets.binding import bind
from mlms.datasets.index import list_indexes, load_index, remove
from mlms.datasets.ingest import add_dataset
from mlms.datasets.stream import DatasetStream
from mlms.evaluation.record import EvaluationRequest
from mlms.evaluation.runner import evaluate
from mlms.tracer.levels import TraceLevel

#: digits_cnn's top-1 on its held-out split (mlms/catalog/models/digits_cnn.yaml, seed 0).
ZOO_TOP1 = 0.9806


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def holdout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The digits hold-out as files: PNGs (values 0..16, 8-bit grayscale, lossless) in one
    folder per class, the same PNGs flat with a labels.csv, a .npz and a Parquet file of the
    preprocessed arrays (the latter with the labels as names)."""
    root = tmp_path_factory.mktemp("holdout")
    split = load_split()
    folders, flat = root / "classes", root / "flat"
    flat.mkdir()
    rows = ["file,label"]
    for number, (image, label) in enumerate(zip(split.test_images, split.test_labels, strict=True)):
        (folders / str(label)).mkdir(parents=True, exist_ok=True)
        picture = Image.fromarray(image[..., 0], "L")
        picture.save(folders / str(label) / f"{number:04d}.png")
        picture.save(flat / f"{number:04d}.png")
        rows.append(f"{number:04d}.png,{label}")
    (flat / "labels.csv").write_text("\n".join(rows) + "\n")
    arrays = (split.test_images.transpose(0, 3, 1, 2) / 16.0).astype(np.float32)
    np.savez(root / "holdout.npz", image=arrays, label=split.test_labels)
    nested = pa.array(arrays.tolist(), pa.list_(pa.list_(pa.list_(pa.float32()))))
    names = pa.array([str(label) for label in split.test_labels])
    pq.write_table(pa.table({"image": nested, "label": names}), root / "holdout.parquet")
    return {
        "classes": folders,
        "flat": flat,
        "npz": root / "holdout.npz",
        "parquet": root / "holdout.parquet",
    }


def _request(dataset: str | None = None, **changes) -> EvaluationRequest:
    values = {
        "model": "digits_cnn",
        "batch_sizes": [64],
        "iterations": 1,
        "warmup": 1,
        "min_seconds": 0.0,
        "dataset": dataset,
    }
    return EvaluationRequest(**{**values, **changes})


def test_digits_holdout_gives_the_zoo_top1_through_every_kind(store, holdout) -> None:
    """The hold-out added as a class-folder of PNGs, as flat PNGs with a labels CSV, as .npz
    and as Parquet (names as labels): each evaluation's top-1 is the built-in split's, and the
    record names the data set, its version and its index's sha256."""
    client = EmbeddedClient(store)
    builtin = client.evaluate(_request(inputs=["dataset"])).accuracy
    assert builtin is not None and round(builtin.top1, 4) == ZOO_TOP1
    kinds = {"classes": "images", "flat": "images", "npz": "arrays", "parquet": "arrays"}
    for source, kind in kinds.items():
        name = unique(f"digits-{source}")
        index, sha256 = add_dataset(store, holdout[source], name, version="2")
        assert (index.kind, index.samples) == (kind, 360)
        # Class folders and Parquet: labels as names; the CSV and .npz: class indices.
        named = source in ("classes", "parquet")
        assert index.label_names == ([str(d) for d in range(10)] if named else None)
        assert index.label_max == (None if named else 9)
        record = client.evaluate(_request(name))
        accuracy = record.accuracy
        assert accuracy is not None
        assert (accuracy.top1, accuracy.top5, accuracy.samples) == (
            builtin.top1,
            builtin.top5,
            360,
        ), source
        assert (accuracy.dataset, accuracy.dataset_version, accuracy.dataset_sha256) == (
            name,
            "2",
            sha256,
        )
        assert record.results[0].samples == 360
        assert record.settings["input"] == f"dataset:{name}@2"
        assert record.request.dataset == name


def test_token_ids_from_jsonl_are_padded_and_cut_to_the_sequence_length(store, tmp_path) -> None:
    """bert_base on JSONL token ids of several lengths (padded with 0, cut at --seq-len) gives
    the same predictions as on the same ids already padded in a .npz; labels as names map to
    the model's ('negative', 'positive')."""
    generator = np.random.default_rng(3)
    seq_len, count = 12, 6
    ids = [generator.integers(1, 30000, size=n).tolist() for n in (3, 12, 20, 7, 12, 1)]
    labels = ["positive", "negative", "positive", "positive", "negative", "negative"]
    lines = [
        json.dumps({"input_ids": row, "label": label})
        for row, label in zip(ids, labels, strict=True)
    ]
    (tmp_path / "ids.jsonl").write_text("\n".join(lines) + "\n")
    padded = np.zeros((count, seq_len), np.int64)
    for row, values in enumerate(ids):
        cut = values[:seq_len]
        padded[row, : len(cut)] = cut
    numbers = np.array([0 if label == "negative" else 1 for label in labels])
    np.savez(tmp_path / "ids.npz", input_ids=padded, label=numbers)
    text_name, array_name = unique("ids-jsonl"), unique("ids-npz")
    assert add_dataset(store, tmp_path / "ids.jsonl", text_name)[0].kind == "text"
    add_dataset(store, tmp_path / "ids.npz", array_name)
    client = EmbeddedClient(store)
    request = _request(model="bert_base", batch_sizes=[4], seq_len=seq_len)
    from_text = client.evaluate(request.model_copy(update={"dataset": text_name}))
    from_arrays = client.evaluate(request.model_copy(update={"dataset": array_name}))
    assert from_text.accuracy.samples == from_arrays.accuracy.samples == count
    assert from_text.accuracy.top1 == from_arrays.accuracy.top1
    assert from_text.predictions.top5 == from_arrays.predictions.top5
    assert from_text.results[0].samples == count and from_text.results[0].iterations == 1
    with pytest.raises(
        errors.InvalidArgument, match=r"array 'input_ids' has samples of shape \[12\]"
    ):
        client.evaluate(_request(array_name, model="bert_base"))  # at its default length 128


def test_text_is_tokenized_by_the_tokenizer_the_manifest_names(store, tmp_path) -> None:
    """JSONL ``text`` goes through the tokenizer folder a model's manifest names (a WordPiece
    tokenizer built here from a small vocabulary); a model without one says what is missing."""
    BertTokenizerFast = import_transformers().BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "very"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    folder = tmp_path / "tokenizer"
    # A folder holding vocab.txt loads the same on transformers 4 and 5 (5's constructor takes
    # the vocabulary as ``vocab`` and ignores 4's ``vocab_file``).
    BertTokenizerFast.from_pretrained(tmp_path).save_pretrained(folder)
    rows = [{"text": "very good film", "label": 1}, {"text": "bad film", "label": 0}]
    (tmp_path / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    name = unique("text")
    add_dataset(store, tmp_path / "text.jsonl", name)
    index, sha256 = load_index(store, name)
    bert = get_model("bert_base")
    spec = bert.inputs[0].model_copy(update={"shape": [6]})
    with pytest.raises(errors.InvalidArgument, match=r"brings no tokenizer.*'input_ids'"):
        bind(index, sha256, bert, spec)
    with_tokenizer = bert.model_copy(
        update={"attributes": {**bert.attributes, "tokenizer": str(folder)}}
    )
    bound = bind(index, sha256, with_tokenizer, spec)
    batch = next(DatasetStream(store, index, tmp_path / "cache").batches(2))
    ids = bound.inputs(batch, lambda images: np.stack(images), pool=None, chunks=1)
    # [CLS] very good film [SEP] [PAD]; [CLS] bad film [SEP] [PAD] [PAD]
    assert ids.tolist() == [[2, 8, 5, 7, 3, 0], [2, 6, 7, 3, 0, 0]]
    assert bound.labels(batch).tolist() == [1, 0]


def test_shards_are_read_one_at_a_time_in_exact_batches(
    store, holdout, tmp_path, monkeypatch
) -> None:
    """A set in four shards: the first batch fetches only the first shard; the batches cross
    shard boundaries at exact sizes and hold every sample once, in order."""
    monkeypatch.setattr(ingest, "SHARD_SAMPLES", 100)
    name = unique("sharded")
    index, _ = add_dataset(store, holdout["npz"], name)
    assert [s.samples for s in index.shards] == [256, 104]  # a row group (256 rows) at a time
    monkeypatch.setattr(ingest, "ROW_GROUP", 50)
    index, _ = add_dataset(store, holdout["npz"], name, replace=True)
    assert [s.samples for s in index.shards] == [100, 100, 100, 60]
    assert len(store.list(f"datasets/{name}/1/shards/")) == 4  # the replaced ones are gone
    cache = tmp_path / "cache"
    batches = DatasetStream(store, index, cache).batches(64)
    first = next(batches)
    assert first.num_rows == 64 and len(list((cache / "datasets").iterdir())) == 1
    rest = list(batches)
    assert [b.num_rows for b in [first, *rest]] == [64] * 5 + [40]
    labels = np.concatenate([b.column("label").to_numpy() for b in [first, *rest]])
    assert labels.tolist() == load_split().test_labels.tolist()


def test_a_corrupted_shard_is_refused(store, holdout, tmp_path) -> None:
    name = unique("corrupt")
    index, _ = add_dataset(store, holdout["npz"], name)
    key = index.shards[0].key
    data = bytearray(store.get_bytes(key))
    data[100] ^= 0xFF
    store.put_bytes(key, bytes(data))
    with pytest.raises(errors.ChecksumMismatch, match=f"data set '{name}' shard"):
        next(DatasetStream(store, index, tmp_path / "cache").batches(8))


def test_the_pipeline_stage_has_its_own_spans(store, holdout) -> None:
    """Reading and preprocessing run on the prefetch thread, under the run's span, at the
    APPLICATION level; the loop's 'input wait' spans show how long the model waited."""
    name = unique("spans")
    add_dataset(store, holdout["classes"], name)
    client = EmbeddedClient(store)
    record = client.evaluate(_request(name, batch_sizes=[100]))
    spans = client.spans(record.trace_id).to_pandas()
    measured = spans[spans.run == 1]
    by_name = {n: group for n, group in measured.groupby("name")}
    # 360 samples in 4 batches; the fifth read and wait find the end.
    assert len(by_name["preprocess"]) == 4
    assert len(by_name["read"]) == len(by_name["input wait"]) == 5
    assert set(by_name["preprocess"].level) == {int(TraceLevel.APPLICATION)}
    model_thread = set(by_name["model"].thread)
    assert set(by_name["preprocess"].thread).isdisjoint(model_thread)
    run_span = measured[measured.name == "run 1: model"].span_id.item()
    assert set(by_name["preprocess"].parent_id) == {run_span}


def test_add_replace_list_and_remove(store, holdout, tmp_path) -> None:
    name = unique("lifecycle")
    _first, first_sha = add_dataset(store, holdout["npz"], name)
    with pytest.raises(errors.AlreadyExists, match=f"data set '{name}' version '1' exists"):
        add_dataset(store, holdout["npz"], name)
    split = load_split()
    np.savez(
        tmp_path / "half.npz",
        image=np.zeros((10, 1, 8, 8), np.float32),
        label=split.test_labels[:10],
    )
    second, second_sha = add_dataset(store, tmp_path / "half.npz", name, replace=True)
    assert second.samples == 10 and second_sha != first_sha
    assert load_index(store, name) == (second, second_sha)
    add_dataset(store, tmp_path / "half.npz", name, version="2")
    assert load_index(store, name)[0].version == "2"  # the newest
    assert load_index(store, f"{name}@1")[1] == second_sha
    assert [(i.name, i.version) for i, _ in list_indexes(store) if i.name == name] == [
        (name, "1"),
        (name, "2"),
    ]
    assert [i.version for i in remove(store, name)] == ["1", "2"]
    assert store.list(f"datasets/{name}/") == []
    with pytest.raises(errors.UnknownDataset, match=f"unknown data set '{name}'"):
        load_index(store, name)


def test_unreadable_images_are_named_and_nothing_is_stored(store, holdout, tmp_path) -> None:
    """Among good images, two that are not images and one truncated JPEG: the error counts and
    names them; no shard stays behind, and a failed --replace keeps the version it replaced."""
    folder = tmp_path / "images"
    for label in ("3", "7"):
        (folder / label).mkdir(parents=True)
        for number in range(3):
            Image.new("L", (8, 8), number).save(folder / label / f"good{number}.png")
    (folder / "3" / "notes.png").write_text("not an image")
    (folder / "7" / "empty.jpg").write_bytes(b"")
    encoded = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 10, 10)).save(encoded, "JPEG")
    (folder / "7" / "cut.jpg").write_bytes(encoded.getvalue()[:300])
    name = unique("broken")
    with pytest.raises(errors.InvalidArgument) as caught:
        add_dataset(store, folder, name)
    message = str(caught.value)
    assert message.startswith(f"3 unreadable images in {str(folder)!r}: ")
    for bad in ("3/notes.png", "7/cut.jpg", "7/empty.jpg"):
        assert repr(bad) in message
    assert store.list(f"datasets/{name}/") == []
    kept, kept_sha = add_dataset(store, holdout["classes"], name)
    with pytest.raises(errors.InvalidArgument, match="3 unreadable images"):
        add_dataset(store, folder, name, replace=True)
    assert load_index(store, name) == (kept, kept_sha)
    assert sorted(store.list(f"datasets/{name}/1/shards/")) == sorted(s.key for s in kept.shards)


# -- bad inputs over the CLI --------------------------------------------------------------------


def run_cli(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch
) -> tuple[int, str, str]:
    """The ``mlms`` entry point in this process: exit status, stdout, stderr."""
    from mlms.cli.main import main

    monkeypatch.setattr(sys, "argv", ["mlms", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def one_line_error(result: tuple[int, str, str], *fragments: str) -> None:
    status, _out, err = result
    lines = err.splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("mlms: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_inputs_over_the_cli(store, holdout, tmp_path, capsys, monkeypatch) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        return run_cli(list(args), capsys, monkeypatch)

    name = unique("cli")
    status, out, _ = cli("datasets", "add", str(holdout["npz"]), "--name", name)
    assert status == 0 and f"added data set {name}@1: 360 samples (arrays)" in out
    status, out, _ = cli("datasets")
    assert status == 0 and name in out
    one_line_error(
        cli("datasets", "add", str(holdout["npz"]), "--name", name),
        f"data set {name!r} version '1' exists already",
        "--replace",
    )
    one_line_error(
        cli("datasets", "add", str(holdout["npz"]), "--name", "a/b"),
        "data set name 'a/b'",
        "no path separators",
    )
    one_line_error(
        cli("datasets", "add", str(holdout["npz"]), "--name", "ok", "--version", "../1"),
        "data set version '../1'",
    )
    (tmp_path / "data.csv").write_text("a,b\n")
    one_line_error(
        cli("datasets", "add", str(tmp_path / "data.csv"), "--name", unique("csv")),
        "unknown data set format '.csv'",
    )
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    one_line_error(
        cli("datasets", "add", str(tmp_path / "bad.npz"), "--name", unique("npz")),
        "as a .npz file",
    )
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "x.png").write_text("no")
    one_line_error(
        cli("datasets", "add", str(broken.parent), "--name", unique("img")),
        "1 unreadable image in",
        "'1/x.png'",
    )
    two = unique("two")
    arrays = np.zeros((4, 1, 8, 8), np.float32)
    np.savez(tmp_path / "two.npz", pixels=arrays, mask=arrays, label=[0, 1, 2, 3])
    assert cli("datasets", "add", str(tmp_path / "two.npz"), "--name", two)[0] == 0
    one_line_error(
        cli("eval", "-m", "digits_cnn", "--dataset", two),
        f"data set {two!r} has arrays 'pixels' [1, 8, 8] float32, 'mask' [1, 8, 8] float32",
        "expected an array named 'image'",
    )
    beyond = unique("beyond")
    np.savez(tmp_path / "beyond.npz", image=np.zeros((4, 1, 8, 8), np.float32), label=[0, 3, 12, 1])
    assert cli("datasets", "add", str(tmp_path / "beyond.npz"), "--name", beyond)[0] == 0
    one_line_error(
        cli("eval", "-m", "digits_cnn", "--dataset", beyond),
        f"data set {beyond!r} has label 12: model 'digits_cnn' has 10 outputs",
    )
    one_line_error(
        cli("eval", "-m", "resnet18", "--dataset", name),
        f"data set {name!r} array 'image' has samples of shape [1, 8, 8]",
        "expects [3, 224, 224]",
    )
    one_line_error(
        cli("eval", "-m", "bert_base", "--dataset", name),
        f"data set {name!r} array 'image' has samples of shape [1, 8, 8]",
        "model 'bert_base' expects [128]",
    )
    folder_name = unique("classes")
    assert cli("datasets", "add", str(holdout["classes"]), "--name", folder_name)[0] == 0
    one_line_error(
        cli("eval", "-m", "resnet18", "--dataset", folder_name),
        "has labels model 'resnet18' does not have: '0', '1'",
    )
    one_line_error(cli("eval", "-m", "digits_cnn", "--dataset", "x/../y"), "data set name 'x/../y'")
    one_line_error(
        cli("eval", "-m", "digits_cnn", "--dataset", unique("absent")), "unknown data set"
    )
    one_line_error(
        cli("eval", "-m", "digits_cnn", "--dataset", name, "--input", "dataset"),
        "a data set is the input",
    )
    status, out, _ = cli("datasets", "remove", name)
    assert status == 0 and f"removed data set {name}@1" in out
    one_line_error(cli("datasets", "remove", name), f"unknown data set {name!r}")


def test_evaluate_refuses_a_data_set_for_a_generative_model(store, holdout) -> None:
    name = unique("gen")
    add_dataset(store, holdout["npz"], name)
    with pytest.raises(errors.InvalidArgument, match="text generation model"):
        evaluate(_request(name, model="gpt2_small"), store=store)
