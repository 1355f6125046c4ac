"""A COCO-format folder read as a detection data set (``mlms datasets add``).

The folder holds one instances JSON (``annotations.json``, or the one JSON file under
``annotations/`` as COCO ships ``instances_val2017.json``) and the images it names, found by
``file_name`` in the folder, in ``images/`` or in another subfolder (COCO's ``val2017/``). Every
annotation is checked against the images and categories before a shard is written: its image
and category exist, its box lies inside its image, every image's file has the size the JSON
says. Each image becomes one row: its encoded bytes, id, size and its annotations as JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlms.datasets.rows import ROW_GROUP, Rows, decoded_image, short
from mlms.errors import InvalidArgument

#: Pixels a box may reach past its image's edge (COCO's boxes are rounded to 0.01 px and
#: some tools round outwards).
EDGE = 1.0


@dataclass(frozen=True)
class CocoFolder:
    """An instances JSON checked against itself: images in id order, with their files."""

    json_path: Path
    categories: dict[int, str]
    #: (image id, file, width, height) in id order.
    images: list[tuple[int, Path, int, int]]
    annotations: dict[int, list[dict[str, Any]]]


def is_coco_folder(root: Path) -> bool:
    return (root / "annotations.json").is_file() or (root / "annotations").is_dir()


def read_coco_folder(root: Path) -> CocoFolder:
    """The folder's instances JSON, every reference in it checked."""
    path = _instances_json(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"cannot read COCO annotations {str(path)!r}: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(key), list) for key in ("images", "annotations", "categories")
    ):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise InvalidArgument(
            f"COCO annotations {str(path)!r} have {keys}: expected an object with lists "
            "'images', 'annotations' and 'categories'"
        )
    where = f"COCO annotations {str(path)!r}"
    categories = _categories(data["categories"], where)
    images = _images(data["images"], root, where)
    sizes = {image_id: (width, height) for image_id, _, width, height in images}
    annotations: dict[int, list[dict[str, Any]]] = {image_id: [] for image_id in sizes}
    seen: set[int] = set()
    for number, item in enumerate(data["annotations"]):
        annotation = _annotation(item, number, sizes, categories, where)
        if annotation["id"] in seen:
            raise InvalidArgument(f"{where}: annotation id {annotation['id']} appears twice")
        seen.add(annotation["id"])
        annotations[annotation["image_id"]].append(annotation)
    return CocoFolder(path, categories, images, annotations)


def coco_rows(folder: CocoFolder, workers: int) -> Iterator[Rows]:
    """One row per image: ``image`` (the file's bytes), ``image_id``, ``width``, ``height``,
    ``annotations`` (JSON); an image whose file is not the size the JSON says is refused."""
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(folder.images), ROW_GROUP):
            part = folder.images[start : start + ROW_GROUP]
            read = list(pool.map(_read, part))
            bad = [
                str(file) for (_, file, _, _), (data, _) in zip(part, read, strict=True) if not data
            ]
            for (image_id, file, width, height), (data, size) in zip(part, read, strict=True):
                if data and size != (width, height):
                    raise InvalidArgument(
                        f"image {str(file)!r} (id {image_id}) is {size[0]} x {size[1]} pixels: "
                        f"{str(folder.json_path)!r} says {width} x {height}"
                    )
            yield Rows(
                {
                    "image": [data for data, _ in read],
                    "image_id": [image_id for image_id, *_ in part],
                    "width": [width for *_, width, _ in part],
                    "height": [height for *_, height in part],
                    "annotations": [json.dumps(folder.annotations[i]) for i, *_ in part],
                },
                bad,
            )


def _read(image: tuple[int, Path, int, int]) -> tuple[bytes, tuple[int, int]]:
    try:
        data = image[1].read_bytes()
    except OSError:
        return b"", (0, 0)
    picture = decoded_image(data)
    return (data, picture.size) if picture is not None else (b"", (0, 0))


def _instances_json(root: Path) -> Path:
    if (root / "annotations.json").is_file():
        return root / "annotations.json"
    found = sorted((root / "annotations").glob("*.json"))
    instances = [p for p in found if p.name.startswith("instances")] or found
    if len(instances) != 1:
        names = ", ".join(repr(p.name) for p in instances) or "none"
        raise InvalidArgument(
            f"COCO folder {str(root)!r}: annotations/ holds JSON files {names}: expected one "
            "instances JSON (or annotations.json in the folder)"
        )
    return instances[0]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _categories(items: list[Any], where: str) -> dict[int, str]:
    categories: dict[int, str] = {}
    for item in items:
        if not isinstance(item, dict) or not _integer(item.get("id")) or not item.get("name"):
            raise InvalidArgument(
                f"{where}: category {short(item)}: expected an object with an integer 'id' "
                "and a 'name'"
            )
        if item["id"] in categories:
            raise InvalidArgument(f"{where}: category id {item['id']} appears twice")
        categories[item["id"]] = str(item["name"])
    if not categories:
        raise InvalidArgument(f"{where}: 'categories' is empty: expected at least one")
    return categories


def _images(items: list[Any], root: Path, where: str) -> list[tuple[int, Path, int, int]]:
    folders = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    images: dict[int, tuple[int, Path, int, int]] = {}
    for item in items:
        if (
            not isinstance(item, dict)
            or not _integer(item.get("id"))
            or not isinstance(item.get("file_name"), str)
            or not all(_integer(item.get(k)) and item[k] > 0 for k in ("width", "height"))
        ):
            raise InvalidArgument(
                f"{where}: image {short(item)}: expected an object with an integer 'id', a "
                "'file_name' and positive integer 'width' and 'height'"
            )
        if item["id"] in images:
            raise InvalidArgument(f"{where}: image id {item['id']} appears twice")
        name = item["file_name"]
        file = next((f / name for f in folders if _inside(f / name, root)), None)
        if file is None:
            raise InvalidArgument(
                f"{where}: image id {item['id']} file {name!r} is not in {str(root)!r} nor in "
                "a subfolder of it"
            )
        images[item["id"]] = (item["id"], file, item["width"], item["height"])
    if not images:
        raise InvalidArgument(f"{where}: 'images' is empty: expected at least one")
    return [images[key] for key in sorted(images)]


def _inside(file: Path, root: Path) -> bool:
    return file.is_file() and file.resolve().is_relative_to(root.resolve())


def _annotation(
    item: Any,
    number: int,
    sizes: dict[int, tuple[int, int]],
    categories: dict[int, str],
    where: str,
) -> dict[str, Any]:
    """One annotation as COCOeval reads it (id, image_id, category_id, bbox, area, iscrowd and
    any segmentation), checked against the images and categories."""
    what = f"{where}: annotation {number}"
    if not isinstance(item, dict) or not all(
        _integer(item.get(k)) for k in ("id", "image_id", "category_id")
    ):
        raise InvalidArgument(
            f"{what} {short(item)}: expected integer 'id', 'image_id' and 'category_id' and a "
            "'bbox'"
        )
    what = f"{where}: annotation id {item['id']}"
    if item["image_id"] not in sizes:
        raise InvalidArgument(f"{what} has image_id {item['image_id']}: no image has that id")
    if item["category_id"] not in categories:
        known = ", ".join(str(c) for c in list(categories)[:5])
        raise InvalidArgument(
            f"{what} has category_id {item['category_id']}: expected one of the categories "
            f"({known}{', ...' if len(categories) > 5 else ''})"
        )
    box = item.get("bbox")
    if (
        not isinstance(box, list)
        or len(box) != 4
        or not all(isinstance(v, int | float) and math.isfinite(v) for v in box)
        or box[2] < 0
        or box[3] < 0
    ):
        raise InvalidArgument(
            f"{what} has bbox {short(box)}: expected [x, y, width, height], width and height >= 0"
        )
    width, height = sizes[item["image_id"]]
    x, y, w, h = box
    if x < -EDGE or y < -EDGE or x + w > width + EDGE or y + h > height + EDGE:
        raise InvalidArgument(
            f"{what} has bbox {box}: it reaches outside its image (image id "
            f"{item['image_id']}, {width} x {height})"
        )
    crowd = item.get("iscrowd", 0)
    if crowd not in (0, 1):
        raise InvalidArgument(f"{what} has iscrowd {short(crowd)}: expected 0 or 1")
    annotation = {
        "id": item["id"],
        "image_id": item["image_id"],
        "category_id": item["category_id"],
        "bbox": [float(v) for v in box],
        "area": float(item.get("area", w * h)),
        "iscrowd": int(crowd),
    }
    if "segmentation" in item:
        annotation["segmentation"] = item["segmentation"]
    return annotation
