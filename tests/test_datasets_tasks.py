"""Labelled data sets of every task (``mlms datasets add``): a COCO-format folder, image and
class-mask pairs, JSONL with reference translations and JSONL of plain text, each stored in
shards with their sha256 like a classification set, evaluated on a zoo model of its task with
the task's metric in the record; every bad or inconsistent label is one line over the CLI.
The sets are drawn here: rectangles with known boxes and masks, short texts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from mlms.client import EmbeddedClient
from mlms.datasets.ingest import add_dataset
from mlms.datasets.stream import DatasetStream
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRequest
from tests.test_datasets import one_line_error, run_cli

COLOURS = {1: (220, 30, 30), 3: (30, 200, 40), 18: (40, 60, 230)}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def draw_coco(root: Path, images: int = 4) -> dict:
    """``images`` 96 x 72 PNGs with two filled rectangles each, and their instances JSON under
    annotations/ as COCO ships it (images in a subfolder)."""
    (root / "val").mkdir(parents=True)
    (root / "annotations").mkdir()
    generator = np.random.default_rng(5)
    found, annotations = [], []
    for image_id in range(1, images + 1):
        picture = Image.new("RGB", (96, 72), (128, 128, 128))
        pen = ImageDraw.Draw(picture)
        for category in (1, int(generator.choice([3, 18]))):
            x, y = int(generator.integers(0, 50)), int(generator.integers(0, 35))
            w, h = int(generator.integers(12, 40)), int(generator.integers(12, 30))
            pen.rectangle([x, y, x + w - 1, y + h - 1], fill=COLOURS[category])
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                 "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0}
            )  # fmt: skip
        picture.save(root / "val" / f"{image_id:03d}.png")
        found.append(
            {"id": image_id, "file_name": f"{image_id:03d}.png", "width": 96, "height": 72}
        )
    categories = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]
    data = {"images": found, "annotations": annotations, "categories": categories}
    (root / "annotations" / "instances_val.json").write_text(json.dumps(data))
    return data


def draw_masks(root: Path, pairs: int = 3, layout: tuple[str, str] = ("images", "masks")) -> None:
    """Image and palette-mask pairs: a rectangle of class 1..20 on background 0, its border
    255 (VOC's 'no class')."""
    images, masks = (root / layout[0]), (root / layout[1])
    images.mkdir(parents=True)
    masks.mkdir()
    for number in range(pairs):
        picture = Image.new("RGB", (80, 60), (0, 0, 0))
        mask = Image.new("P", (80, 60), 0)
        # A palette of all 256 entries, as VOC's: PIL keeps the indices when it saves one.
        mask.putpalette([v for i in range(256) for v in (i, i * 7 % 256, i * 13 % 256)])
        box = [10 + number * 5, 8, 50 + number * 5, 40]
        ImageDraw.Draw(picture).rectangle(box, fill=(200, 100, 50))
        ImageDraw.Draw(mask).rectangle(box, fill=number + 1, outline=255)
        picture.save(images / f"{number:03d}.jpg")
        mask.save(masks / f"{number:03d}.png")


def _request(model: str, dataset: str, **changes) -> EvaluationRequest:
    values = {"model": model, "batch_sizes": [2], "iterations": 1, "warmup": 1,
              "min_seconds": 0.0, "dataset": dataset}  # fmt: skip
    return EvaluationRequest(**{**values, **changes})


def test_a_coco_folder_is_stored_in_shards_and_read_back(store, tmp_path) -> None:
    data = draw_coco(tmp_path / "coco")
    name = unique("coco")
    index, _sha256 = add_dataset(store, tmp_path / "coco", name)
    assert (index.kind, index.task, index.samples) == ("images", "detection", 4)
    assert index.categories == {1: "person", 3: "car", 18: "dog"}
    assert all(len(s.sha256) == 64 for s in index.shards)
    batch = next(DatasetStream(store, index, tmp_path / "cache").batches(4))
    stored = [json.loads(a) for a in batch.column("annotations").to_pylist()]
    assert [a for image in stored for a in image] == data["annotations"]
    assert batch.column("image_id").to_pylist() == [1, 2, 3, 4]


def test_a_detector_on_a_coco_folder_records_its_map(store, tmp_path) -> None:
    """ssdlite320 (seeded weights: its mAP is near zero, but measured) over the drawn set: the
    record holds COCO's stats, the pass every image."""
    draw_coco(tmp_path / "coco")
    name = unique("coco-eval")
    add_dataset(store, tmp_path / "coco", name)
    record = EmbeddedClient(store).evaluate(_request("ssdlite320_mobilenet_v3", name))
    accuracy = record.accuracy
    assert accuracy is not None and accuracy.task == "detection" and accuracy.samples == 4
    assert {"map", "map_50", "map_75", "ar_1", "ar_10", "ar_100"} <= set(accuracy.metrics)
    assert 0 <= accuracy.metrics["map"] <= accuracy.metrics["map_50"] <= 1
    assert accuracy.top1 is None and accuracy.headline[0] == "mAP@[.5:.95]"
    assert record.results[0].samples == 4


def test_image_and_mask_pairs_give_a_segmentation_set_scored_by_miou(store, tmp_path) -> None:
    draw_masks(tmp_path / "pairs")
    name = unique("masks")
    index, _ = add_dataset(store, tmp_path / "pairs", name)
    assert (index.task, index.samples, index.label_max) == ("segmentation", 3, 3)
    draw_masks(tmp_path / "voc", layout=("JPEGImages", "SegmentationClass"))
    (tmp_path / "voc" / "JPEGImages" / "extra.jpg").write_bytes(
        (tmp_path / "voc" / "JPEGImages" / "000.jpg").read_bytes()
    )
    assert add_dataset(store, tmp_path / "voc", unique("voc"))[0].samples == 3
    record = EmbeddedClient(store).evaluate(
        _request("lraspp_mobilenet_v3", name, batch_sizes=[3], warmup=0)
    )
    accuracy = record.accuracy
    assert accuracy is not None and accuracy.task == "segmentation"
    assert set(accuracy.metrics) == {"miou", "pixel_accuracy"}
    assert 0 <= accuracy.metrics["miou"] <= 1 and accuracy.samples == 3


def test_plain_text_gives_a_language_model_its_perplexity(store, tmp_path) -> None:
    """llama_mini on token ids of several lengths: a perplexity near its vocabulary's size
    (32000: seeded weights predict about uniformly), never more than a few times it."""
    generator = np.random.default_rng(6)
    lines = [
        json.dumps({"input_ids": generator.integers(1, 32000, n).tolist()}) for n in (9, 16, 5)
    ]
    (tmp_path / "plain.jsonl").write_text("\n".join(lines) + "\n")
    name = unique("plain")
    index, _ = add_dataset(store, tmp_path / "plain.jsonl", name)
    assert (index.task, index.kind, index.label_max) == ("language_modeling", "text", None)
    record = EmbeddedClient(store).evaluate(
        _request("llama_mini", name, seq_len=16, batch_sizes=[3], warmup=0)
    )
    accuracy = record.accuracy
    assert accuracy is not None and accuracy.task == "language_modeling"
    assert 3_000 < accuracy.metrics["perplexity"] < 300_000
    assert accuracy.headline[0] == "perplexity" and not accuracy.higher_is_better


def test_reference_translations_are_stored_beside_their_sources(store, tmp_path) -> None:
    lines = [
        {"text": "the house is small", "reference": "das Haus ist klein"},
        {"text": "good morning", "reference": "guten Morgen"},
    ]
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    index, _ = add_dataset(store, tmp_path / "pairs.jsonl", unique("pairs"))
    assert (index.task, index.samples) == ("translation", 2)
    assert [c.name for c in index.columns] == ["text"]
    with pytest.raises(InvalidArgument, match=r"is a translation data set.*model 'gpt2_small'"):
        EmbeddedClient(store).evaluate(_request("gpt2_small", index.name))


def test_bad_labels_over_the_cli(store, tmp_path, capsys, monkeypatch) -> None:
    def add(path: Path) -> tuple[int, str, str]:
        return run_cli(["datasets", "add", str(path), "--name", unique("bad")], capsys, monkeypatch)

    def coco(change) -> Path:
        root = tmp_path / unique("coco")
        data = draw_coco(root, images=2)
        change(data)
        (root / "annotations" / "instances_val.json").write_text(json.dumps(data))
        return root

    one_line_error(
        add(coco(lambda d: d["annotations"][0].update(image_id=99))),
        "annotation id 1 has image_id 99: no image has that id",
    )
    one_line_error(
        add(coco(lambda d: d["annotations"][0].update(category_id=7))),
        "annotation id 1 has category_id 7: expected one of the categories (1, 3, 18)",
    )
    one_line_error(
        add(coco(lambda d: d["annotations"][1].update(bbox=[90, 10, 30, 10]))),
        "annotation id 2 has bbox [90, 10, 30, 10]: it reaches outside its image",
    )
    one_line_error(
        add(coco(lambda d: d["annotations"][1].update(bbox=[1, 2, -3]))),
        "annotation id 2 has bbox [1, 2, -3]: expected [x, y, width, height]",
    )
    one_line_error(
        add(coco(lambda d: d["images"][0].update(width=97))),
        "is 96 x 72 pixels",
        "says 97 x 72",
    )
    one_line_error(
        add(coco(lambda d: d["images"][1].update(file_name="gone.png"))),
        "image id 2 file 'gone.png' is not in",
    )
    one_line_error(add(coco(lambda d: d.pop("categories"))), "expected an object with lists")
    pairs = tmp_path / "pairs"
    draw_masks(pairs)
    Image.new("RGB", (80, 60)).save(pairs / "masks" / "001.png")
    one_line_error(add(pairs), "001.png' is mode RGB: expected a PNG of one class index per pixel")
    Image.new("L", (40, 60)).save(pairs / "masks" / "001.png")
    one_line_error(add(pairs), "001.png' is 40 x 60 pixels: its image '001.jpg' is 80 x 60")
    Image.new("L", (80, 60)).save(pairs / "masks" / "001.png")
    Image.new("L", (80, 60)).save(pairs / "masks" / "009.png")
    one_line_error(add(pairs), "009.png' has no image of its name")
    (pairs / "masks" / "009.png").unlink()
    (pairs / "images" / "004.jpg").write_bytes((pairs / "images" / "000.jpg").read_bytes())
    one_line_error(add(pairs), "004.jpg' has no mask of its name")
    lines = tmp_path / "mixed.jsonl"
    lines.write_text('{"text": "a", "reference": "b"}\n{"text": "c"}\n')
    one_line_error(
        add(lines), "line 2: expected an object with 'text' or 'input_ids' and 'reference'"
    )
    lines.write_text('{"text": "a"}\n{"text": "c", "reference": "d"}\n')
    one_line_error(add(lines), "line 2: expected an object with 'text' or 'input_ids', alone")
    lines.write_text('{"text": "a", "reference": 3}\n')
    one_line_error(add(lines), "line 1: 'reference' is 3: expected the reference translation")
    name = unique("masks")
    seg = tmp_path / "seg"
    draw_masks(seg)
    mask = Image.new("L", (80, 60), 0)
    ImageDraw.Draw(mask).rectangle([1, 1, 5, 5], fill=40)
    mask.save(seg / "masks" / "000.png")
    assert run_cli(["datasets", "add", str(seg), "--name", name], capsys, monkeypatch)[0] == 0
    one_line_error(
        run_cli(["eval", "-m", "lraspp_mobilenet_v3", "--dataset", name], capsys, monkeypatch),
        f"data set {name!r} has masks with class 40: model 'lraspp_mobilenet_v3' has 21 classes",
    )
    one_line_error(
        run_cli(["eval", "-m", "resnet18", "--dataset", name], capsys, monkeypatch),
        f"data set {name!r} is a segmentation data set (image and class-mask pairs): model "
        "'resnet18' is an image classification model",
    )
