"""Each task's post-processing, shared by every framework so that all turn the same network
outputs into the same answer; each step runs under ``step(name)`` (a pipeline span in an
evaluation) so that XSP's model-level view (input pre-process, inference, post-process) holds for
every task.

Whatever the task, the answer is ``(classes, scores)``, the ``k`` best per sample, best first:

- classification and next-token logits: the top-k classes and their softmax probabilities;
- detection (``mlms.tasks.vision_tasks``): one-stage detectors' candidates decoded into boxes on
  their anchors with the network's own box coder ("box decoding"), then torchvision's batched
  NMS ("nms"), ``detections_per_img`` kept; two-stage detectors decoded and suppressed inside,
  their padding dropped ("score filter") and Mask R-CNN's masks of the returned detections
  pasted into the image ("mask pasting"). The answer: the k best detections' labels and scores
  (label -1, score 0 where there are fewer). The score threshold is 0: seeded weights score
  every anchor alike, under a trained model's threshold, so NMS gets the candidate count a busy
  image gives. One global top-k of candidates replaces torchvision's per-level one;
- segmentation: class logits upsampled to the image ("mask upsampling"), one class per pixel
  ("argmax"). The answer: the k classes covering most pixels and their pixel shares.

A task's accuracy (``mlms.accuracy``) takes the full answer of the same steps instead:
``detections`` (every kept box with its score and label) and ``class_map`` (the class of every
pixel).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlms.manifest import BuildSource, ModelManifest
from mlms.tasks.preprocess import top_k

#: Opens one named step of the post-processing (a span, or nothing).
Step = Callable[[str], AbstractContextManager[Any]]


def no_step(_name: str) -> AbstractContextManager[Any]:
    return nullcontext()


def postprocess(
    manifest: ModelManifest, outputs: np.ndarray, k: int, step: Step = no_step
) -> tuple[np.ndarray, np.ndarray]:
    """The k best classes (or detections) per sample and their scores."""
    kind = manifest.outputs[0].type
    if kind == "detection":
        return _detections(manifest, outputs, k, step)
    if kind == "segmentation":
        return _segmentation(manifest, outputs, k, step)
    return top_k(outputs, k)


def _image_size(manifest: ModelManifest) -> tuple[int, int]:
    height, width = manifest.inputs[0].shape[-2:]
    return height, width


def _builder(manifest: ModelManifest) -> str:
    """The zoo builder's network name; empty for a user's model."""
    source = next((s for s in manifest.sources if isinstance(s, BuildSource)), None)
    return source.builder.partition(".")[2] if source else ""


@dataclass(frozen=True)
class Detections:
    """One image's kept detections, best first, in the pixels of the model's input."""

    boxes: np.ndarray  # (n, 4): x1, y1, x2, y2
    scores: np.ndarray  # (n,)
    labels: np.ndarray  # (n,)
    #: An instance segmenter's (Mask R-CNN's): each detection's mask, (n, height, width) bool.
    masks: np.ndarray | None = None


def detections(
    manifest: ModelManifest, outputs: np.ndarray, step: Step = no_step, k: int | None = None
) -> list[Detections]:
    """Each image's kept detections (the ``k`` best where given). A user's detector returns
    them decoded, as the zoo's two-stage detectors do."""
    import torch

    from mlms.tasks.vision_tasks import ONE_STAGE, family_of

    name = _builder(manifest)
    raw = torch.from_numpy(np.ascontiguousarray(outputs, dtype=np.float32))
    if name and family_of(name) in ONE_STAGE:
        kept = OneStageDecoder.of(name, _image_size(manifest)).detections(raw, step)
        return [Detections(b[:k].numpy(), s[:k].numpy(), c[:k].numpy()) for b, s, c in kept]
    return _two_stage(raw, _image_size(manifest), k, step)


def _detections(
    manifest: ModelManifest, outputs: np.ndarray, k: int, step: Step
) -> tuple[np.ndarray, np.ndarray]:
    found = detections(manifest, outputs, step, k)
    labels = np.full((len(found), k), -1, dtype=np.int64)
    scores = np.zeros((len(found), k), dtype=np.float32)
    for row, image in enumerate(found):
        labels[row, : len(image.labels)] = image.labels
        scores[row, : len(image.scores)] = image.scores
    return labels, scores


def _two_stage(raw: Any, size: tuple[int, int], k: int | None, step: Step) -> list[Detections]:
    """Faster and Mask R-CNN's kept boxes: ``[x1, y1, x2, y2, score, label, mask (28 x 28)?]``
    rows, best first, padding scored -1."""
    from torchvision.models.detection.roi_heads import paste_masks_in_image

    with step("score filter"):
        images = [rows[rows[:, 4] >= 0][:k] for rows in raw]
    masks: list[np.ndarray | None] = [None] * len(images)
    if raw.shape[-1] > 6:
        side = round((raw.shape[-1] - 6) ** 0.5)
        with step("mask pasting"):
            # The returned detections' masks at image size, as their consumer gets them.
            for index, rows in enumerate(images):
                probabilities = rows[:, 6:].reshape(-1, 1, side, side)
                pasted = paste_masks_in_image(probabilities, rows[:, :4], size)
                masks[index] = pasted[:, 0].gt(0.5).numpy()
    return [
        Detections(rows[:, :4].numpy(), rows[:, 4].numpy(), rows[:, 5].long().numpy(), mask)
        for rows, mask in zip(images, masks, strict=True)
    ]


class OneStageDecoder:
    """One one-stage detector's anchors for one image size, with its box coder and limits."""

    def __init__(self, name: str, size: tuple[int, int]) -> None:
        import torch
        from torchvision.models.detection.image_list import ImageList

        from mlms.tasks.vision_tasks import detection_network, family_of

        # Built on the meta device: only its anchor generator, coder and settings are used,
        # and the backbone's feature map shapes, which the meta device computes for free.
        with torch.device("meta"):
            net = detection_network(name).eval()
            features = list(net.backbone(torch.empty(1, 3, *size)).values())
        shapes = [feature.shape[-2:] for feature in features]
        images = ImageList(torch.zeros(1, 3, *size), [size])
        self.anchors = net.anchor_generator(images, [torch.zeros(1, 1, *s) for s in shapes])[0]
        self.family = family_of(name)
        self.coder = net.box_coder
        self.size = size
        self.nms_thresh = net.nms_thresh
        self.detections_per_img = net.detections_per_img

    @staticmethod
    @functools.cache
    def of(name: str, size: tuple[int, int]) -> OneStageDecoder:
        return OneStageDecoder(name, size)

    def detections(self, raw: Any, step: Step) -> list[tuple[Any, Any, Any]]:
        """Each image's kept boxes, scores and labels, best first, from its candidates'
        ``[box codes (4), score, label, anchor index]`` rows."""
        from torchvision.ops import batched_nms, clip_boxes_to_image

        with step("box decoding"):
            anchors = self.anchors[raw[..., 6].long().flatten()]
            codes = raw[..., :4].reshape(-1, 4)
            if self.family == "fcos":
                boxes = self.coder.decode(codes, anchors)
            else:
                boxes = self.coder.decode_single(codes, anchors)
            boxes = clip_boxes_to_image(boxes, self.size).reshape(*raw.shape[:2], 4)
        kept = []
        with step("nms"):
            for image, rows in enumerate(raw):
                scores, labels = rows[:, 4], rows[:, 5].long()
                keep = batched_nms(boxes[image], scores, labels, self.nms_thresh)
                keep = keep[: self.detections_per_img]
                kept.append((boxes[image][keep], scores[keep], labels[keep]))
        return kept


def class_map(manifest: ModelManifest, outputs: np.ndarray, step: Step = no_step) -> Any:
    """The class of every pixel of the model's input, (batch, height, width) as a torch
    tensor."""
    import torch

    logits = torch.from_numpy(np.ascontiguousarray(outputs, dtype=np.float32))
    with step("mask upsampling"):
        full = torch.nn.functional.interpolate(
            logits, size=_image_size(manifest), mode="bilinear", align_corners=False
        )
    with step("argmax"):
        # max's indices are argmax's by torch's definition of both (the first largest class, a
        # NaN counting as the largest), but torch's CPU argmax over a middle dimension runs on
        # one thread at about 10 ns an element (2.7 s for 64 images of 21 x 520 x 520 on a
        # 16-core host) where max's reduction is several times faster and uses every core.
        return full.max(dim=1).indices


def _segmentation(
    manifest: ModelManifest, outputs: np.ndarray, k: int, step: Step
) -> tuple[np.ndarray, np.ndarray]:
    import torch

    classes = class_map(manifest, outputs, step)
    counts = torch.stack([torch.bincount(c.flatten(), minlength=outputs.shape[1]) for c in classes])
    shares = (counts.float() / classes[0].numel()).numpy()
    k = min(k, shares.shape[1])
    order = np.argsort(-shares, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(shares, order, axis=1)
