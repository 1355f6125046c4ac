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
import torch
from PIL import Image, ImageDraw

from mlms.assets.file_models import ModelOptions, parse_input_shape, parse_preprocess
from mlms.assets.transformers_import import import_transformers
from mlms.client import EmbeddedClient
from mlms.datasets.ingest import add_dataset
from mlms.datasets.stream import DatasetStream
from mlms.errors import InvalidArgument
from mlms.evaluation.record import EvaluationRequest
from tests.test_datasets import one_line_error, run_cli

#: Each category's colour: pure, so that a model can find its boxes by colour.
COLOURS = {1: (255, 0, 0), 3: (0, 255, 0), 18: (0, 0, 255)}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def draw_coco(root: Path, images: int = 4) -> dict:
    """``images`` 96 x 72 PNGs with two filled rectangles each (a person on the left, a car or
    a dog on the right, in their ``COLOURS``), and their instances JSON under annotations/ as
    COCO ships it (images in a subfolder)."""
    (root / "val").mkdir(parents=True)
    (root / "annotations").mkdir()
    generator = np.random.default_rng(5)
    found, annotations = [], []
    for image_id in range(1, images + 1):
        picture = Image.new("RGB", (96, 72), (60, 60, 60))
        pen = ImageDraw.Draw(picture)
        for side, category in enumerate((1, int(generator.choice([3, 18])))):
            x, y = side * 50 + int(generator.integers(0, 10)), int(generator.integers(0, 35))
            w, h = int(generator.integers(12, 36)), int(generator.integers(12, 30))
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
    status, out, _ = run_cli(["datasets", "add", str(seg), "--name", name], capsys, monkeypatch)
    assert status == 0 and f"added data set {name}@1: 3 samples (images), mask classes 0..40" in out
    status, out, _ = run_cli(["datasets"], capsys, monkeypatch)
    assert status == 0 and "segmentation" in out and "mask classes 0..40" in out
    one_line_error(
        run_cli(["eval", "-m", "lraspp_mobilenet_v3", "--dataset", name], capsys, monkeypatch),
        f"data set {name!r} has masks with class 40: model 'lraspp_mobilenet_v3' has 21 classes",
    )
    one_line_error(
        run_cli(["eval", "-m", "resnet18", "--dataset", name], capsys, monkeypatch),
        f"data set {name!r} is a segmentation data set (image and class-mask pairs): model "
        "'resnet18' is an image classification model",
    )


# -- a user's model files of each task -----------------------------------------------------------


class ColourBoxes(torch.nn.Module):
    """A detector that knows the answer: each category's box is where its colour is, returned
    decoded as a user's detector returns them (``[x1, y1, x2, y2, score, label]``, padding
    scored -1)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        rows = []
        for channel, category in enumerate(COLOURS):
            mask = (images[:, channel] > 0.5) & (images.sum(1) - images[:, channel] < 0.5)
            ys, xs = mask.any(2).float(), mask.any(1).float()
            top, left = ys.argmax(1), xs.argmax(1)
            bottom = images.shape[2] - ys.flip(1).argmax(1)
            right = images.shape[3] - xs.flip(1).argmax(1)
            score = torch.where(ys.amax(1) > 0, 1.0, -1.0)
            label = torch.full_like(score, float(category))
            corners = [left, top, right, bottom]
            rows.append(torch.stack([*(c.float() for c in corners), score, label], dim=1))
        return torch.stack(rows, dim=1)


class ColourClasses(torch.nn.Module):
    """A segmenter that knows the answer: class c where colour channel c - 1 is lit, background
    elsewhere, as logits at half the input's resolution (upsampling is the pipeline's)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        half = torch.nn.functional.avg_pool2d(images, 2)
        background = torch.full_like(half[:, :1], 0.5)
        return torch.cat([background, half], dim=1)


def _exact(name: str, task: str, shape: str, **extra) -> ModelOptions:
    """A model that takes the images as they are: no resize, crop or normalisation."""
    plain = parse_preprocess(["resize=none", "crop=none", "mean=", "std="])
    return ModelOptions(name=name, task=task, preprocess=plain,
                        input_shapes=[parse_input_shape(shape)], **extra)  # fmt: skip


def test_a_detector_file_that_finds_the_truth_scores_map_one(store, tmp_path) -> None:
    """A TorchScript detector added by the user with --task object_detection, on the drawn COCO
    folder: its boxes are the annotations, so mAP, mAP@.5 and AR@100 are 1.0 through the whole
    pipeline (decoding, preprocessing, post-processing, the boxes back in image pixels)."""
    draw_coco(tmp_path / "coco", images=6)
    name = unique("coco-truth")
    add_dataset(store, tmp_path / "coco", name)
    example = torch.zeros(1, 3, 72, 96)
    torch.jit.save(torch.jit.trace(ColourBoxes(), example), tmp_path / "boxes.pt")
    client = EmbeddedClient(store)
    client.add_model(
        tmp_path / "boxes.pt", _exact("colour_boxes", "object_detection", "images=1x3x72x96")
    )
    record = client.evaluate(_request("colour_boxes", name, batch_sizes=[4]))
    metrics = record.accuracy.metrics if record.accuracy else {}
    assert (metrics["map"], metrics["map_50"], metrics["ar_100"]) == pytest.approx((1, 1, 1))
    assert record.accuracy.samples == 6


def test_a_segmenter_file_that_finds_the_truth_scores_miou_one(store, tmp_path) -> None:
    """A TorchScript segmenter with --task semantic_segmentation and its four class names, on
    pairs whose rectangles are drawn in its colours: mIoU and pixel accuracy 1.0 (the masks'
    borders are 255, scored for nothing)."""
    root = tmp_path / "pairs"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for number in range(4):
        picture, mask = Image.new("RGB", (64, 48)), Image.new("L", (64, 48), 0)
        for cls in (1, 2, 3):
            box = [number * 3 + (cls - 1) * 20, 6 + cls * 4, number * 3 + (cls - 1) * 20 + 15, 40]
            ImageDraw.Draw(picture).rectangle(
                box, fill=tuple(255 * (c == cls - 1) for c in range(3))
            )
            ImageDraw.Draw(mask).rectangle(box, fill=cls, outline=255)
        picture.save(root / "images" / f"{number}.png")
        mask.save(root / "masks" / f"{number}.png")
    name = unique("pairs-truth")
    add_dataset(store, root, name)
    torch.jit.save(torch.jit.trace(ColourClasses(), torch.zeros(1, 3, 48, 64)), tmp_path / "seg.pt")
    client = EmbeddedClient(store)
    labels = ["background", "red", "green", "blue"]
    options = _exact("colour_classes", "semantic_segmentation", "images=1x3x48x64", labels=labels)
    client.add_model(tmp_path / "seg.pt", options)
    record = client.evaluate(_request("colour_classes", name, batch_sizes=[2]))
    assert record.accuracy is not None
    assert record.accuracy.metrics == {
        "miou": pytest.approx(1.0),
        "pixel_accuracy": pytest.approx(1.0),
    }


def test_a_hugging_face_language_model_and_its_tokenizer(store, tmp_path) -> None:
    """A tiny seeded GPT-2 saved with its tokenizer, evaluated where it lies on plain text: the
    record's perplexity is torchmetrics' on transformers' own logits of the same token ids."""
    from torchmetrics.functional.text import perplexity

    transformers = import_transformers()
    folder = tmp_path / "tiny-gpt2"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "a", "dog"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(vocab), n_positions=32, n_embd=16, n_layer=2, n_head=2
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    texts = ["the cat sat on the mat", "a dog sat", "the dog sat on a cat on the mat"]
    (tmp_path / "plain.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n")
    name = unique("plain-text")
    add_dataset(store, tmp_path / "plain.jsonl", name)
    record = EmbeddedClient(store).evaluate(
        _request(str(folder), name, batch_sizes=[3], seq_len=12, warmup=0)
    )
    encoded = tokenizer(
        texts, padding="max_length", truncation=True, max_length=12, return_tensors="pt"
    )
    with torch.inference_mode():
        logits = model(input_ids=encoded["input_ids"]).logits[:, :-1]
    target = encoded["input_ids"][:, 1:].masked_fill(encoded["attention_mask"][:, 1:] == 0, -100)
    expected = float(perplexity(logits, target, ignore_index=-100))
    assert record.accuracy is not None and record.accuracy.task == "language_modeling"
    assert record.accuracy.metrics["perplexity"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.slow
def test_translation_bleu_equals_sacrebleu_on_the_models_own_greedy_translations(
    store, tmp_path, monkeypatch
) -> None:
    """t5_small (seeded) with a tokenizer named in its manifest, on JSONL pairs: the record's
    BLEU and chrF are sacrebleu's on what transformers' own greedy ``generate`` makes of the
    same sources, decoded by the same tokenizer."""
    import sacrebleu
    import yaml

    from mlms.assets.manager import AssetManager
    from mlms.catalog.zoo import get_model

    transformers = import_transformers()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "house", "is", "small", "good", "day"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    data = get_model("t5_small").model_dump(mode="json", exclude_defaults=True)
    data |= {"name": "t5_small_tok", "attributes": {"tokenizer": str(tmp_path / "tokenizer")}}
    (zoo / "t5_small_tok.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("MLMS_ZOO_PATH", str(zoo))
    manifest = get_model("t5_small_tok")
    sources = ["the house is small", "good day", "the day is good"]
    references = ["das Haus ist klein", "guten Tag", "der Tag ist gut"]
    lines = [
        json.dumps({"text": s, "reference": r}) for s, r in zip(sources, references, strict=True)
    ]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    name = unique("pairs")
    add_dataset(store, tmp_path / "pairs.jsonl", name)
    record = EmbeddedClient(store).evaluate(
        _request("t5_small_tok", name, batch_sizes=[3], seq_len=8, warmup=0)
    )
    module = AssetManager(store, tmp_path / "cache").canonical_module(manifest).eval()
    ids = tokenizer(
        sources, padding="max_length", truncation=True, max_length=8, return_tensors="pt"
    )
    with torch.inference_mode():
        made = module.pretrained.generate(
            input_ids=ids["input_ids"], attention_mask=torch.ones_like(ids["input_ids"]),
            max_new_tokens=64, do_sample=False, num_beams=1,
        )  # fmt: skip
    hypotheses = tokenizer.batch_decode(made[:, 1:].tolist(), skip_special_tokens=True)
    accuracy = record.accuracy
    assert accuracy is not None and accuracy.task == "translation" and accuracy.samples == 3
    assert accuracy.metrics["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=1e-6
    )
    assert accuracy.metrics["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, [references]).score, abs=1e-6
    )
