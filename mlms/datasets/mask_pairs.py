"""A folder of image and class-mask pairs read as a semantic-segmentation data set.

Layouts: ``images/`` and ``masks/``, or Pascal VOC's ``JPEGImages/`` and ``SegmentationClass/``
(VOC ships more images than masks: there the masks choose the images). A mask is a PNG of one
class index per pixel (mode L, or P whose palette indices are the classes, as VOC and
Cityscapes' label IDs ship them), the size of its image; ``IGNORE`` marks pixels no class is
scored on (VOC's object borders). Each pair becomes one row: the image's and the mask's bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from mlms.datasets.rows import ROW_GROUP, Rows, decoded_image
from mlms.errors import InvalidArgument

#: The mask value of pixels that belong to no class.
IGNORE = 255
#: (images folder, masks folder, whether every image needs a mask).
LAYOUTS = (("images", "masks", True), ("JPEGImages", "SegmentationClass", False))


def mask_layout(root: Path) -> tuple[Path, Path, bool] | None:
    """The folder's images and masks folders, where it has a layout of ``LAYOUTS``."""
    for images, masks, strict in LAYOUTS:
        if (root / images).is_dir() and (root / masks).is_dir():
            return root / images, root / masks, strict
    return None


class MaskPairs:
    """The pairs of a folder, read in rows; ``label_max`` is the largest class seen so far."""

    def __init__(self, root: Path, workers: int) -> None:
        layout = mask_layout(root)
        if layout is None:
            raise InvalidArgument(f"{str(root)!r} has no images/ and masks/ folders")
        images, masks, strict = layout
        self._workers = workers
        self.label_max = 0
        image_files = {p.stem: p for p in _files(images)}
        mask_files = {p.stem: p for p in _files(masks)}
        orphans = sorted(set(mask_files) - set(image_files))
        if orphans:
            raise InvalidArgument(
                f"mask {str(mask_files[orphans[0]])!r} has no image of its name in "
                f"{str(images)!r}"
                + (f" ({len(orphans)} masks have none)" if len(orphans) > 1 else "")
            )
        unmasked = sorted(set(image_files) - set(mask_files)) if strict else []
        if unmasked:
            raise InvalidArgument(
                f"image {str(image_files[unmasked[0]])!r} has no mask of its name in "
                f"{str(masks)!r}"
                + (f" ({len(unmasked)} images have none)" if len(unmasked) > 1 else "")
            )
        self.pairs = [(image_files[stem], mask_files[stem]) for stem in sorted(mask_files)]
        if not self.pairs:
            raise InvalidArgument(f"{str(masks)!r} holds no masks: expected at least one")

    def rows(self) -> Iterator[Rows]:
        with ThreadPoolExecutor(self._workers) as pool:
            for start in range(0, len(self.pairs), ROW_GROUP):
                part = self.pairs[start : start + ROW_GROUP]
                read = list(pool.map(_pair, part))
                bad = [
                    str(image)
                    for (image, _), (data, _, _) in zip(part, read, strict=True)
                    if not data
                ]
                self.label_max = max([self.label_max, *(top for _, _, top in read)])
                yield Rows({"image": [d for d, _, _ in read], "mask": [m for _, m, _ in read]}, bad)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def _pair(pair: tuple[Path, Path]) -> tuple[bytes, bytes, int]:
    """The image's and mask's bytes and the mask's largest class; the image's bytes empty
    where it cannot be read. A mask that is not a class mask of the image's size is refused."""
    image_file, mask_file = pair
    try:
        data, mask_data = image_file.read_bytes(), mask_file.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {exc.filename!r}: {exc.strerror}") from None
    image, mask = decoded_image(data), decoded_image(mask_data)
    if image is None:
        return b"", b"", 0
    if mask is None or mask.mode not in ("L", "P"):
        mode = "not an image" if mask is None else f"mode {mask.mode}"
        raise InvalidArgument(
            f"mask {str(mask_file)!r} is {mode}: expected a PNG of one class index per pixel "
            "(mode L or P)"
        )
    if mask.size != image.size:
        raise InvalidArgument(
            f"mask {str(mask_file)!r} is {mask.size[0]} x {mask.size[1]} pixels: its image "
            f"{image_file.name!r} is {image.size[0]} x {image.size[1]}"
        )
    classes = np.unique(np.asarray(mask))
    scored = classes[classes != IGNORE]
    return data, mask_data, int(scored.max()) if scored.size else 0
