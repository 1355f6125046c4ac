"""torchvision's detection and segmentation networks as the zoo runs them: one batch of
preprocessed images in, one tensor out, the task's post-processing left to the pipeline.

torchvision's own ``forward`` resizes and normalises inside the model (its
``GeneralizedRCNNTransform``) and, for one-stage detectors, decodes the boxes and runs NMS there
too; here the pipeline does the first (``mlms.tasks.preprocess``, with the model's mean and std in
its manifest) and the last (``mlms.tasks.postprocess``), so that each shows as a step of its own
(XSP's model-level view: input pre-process, inference, post-process).

- One-stage detectors (SSD, SSDlite, RetinaNet, FCOS) score every anchor and class (SSD: a
  softmax over the classes; RetinaNet: a sigmoid; FCOS: with its centre-ness) and return the
  ``topk_candidates`` best per image, undecoded: ``[box codes (4), score, label, anchor index]``
  rows, (batch, candidates, 7). Selecting on the device, as torchvision does, keeps the copy
  to the host small (RetinaNet scores 11 million anchor-class pairs an 800-pixel image).
- Two-stage detectors (Faster and Mask R-CNN) keep their region proposals' and boxes' decoding and
  NMS inside (the second stage, and Mask R-CNN's mask head, run on the kept boxes); they return
  the kept detections padded to ``detections_per_img`` rows of ``[x1, y1, x2, y2, score, label]``
  (Mask R-CNN: then its 28 x 28 mask logits), a padding row's score -1. Their box score threshold
  is 0: seeded weights score every class alike, far under torchvision's 0.05, and would leave the
  mask head nothing to do; at 0 it runs on ``detections_per_img`` boxes, a busy image's count.
- Segmentation networks (DeepLabV3, FCN, LR-ASPP) return class logits at the backbone's output
  stride; upsampling them to the image and the per-pixel argmax are post-processing.
"""

from __future__ import annotations

from typing import Any

import torch

#: Families whose heads' raw outputs leave the network (``mlms.tasks.postprocess`` decodes them).
ONE_STAGE = ("ssd", "ssdlite", "retinanet", "fcos")


def detection_network(name: str) -> Any:
    """torchvision's detector ``name`` with seeded weights, no pretrained backbone."""
    import torchvision

    extra: dict[str, Any] = {}
    if name.startswith(("fasterrcnn", "maskrcnn")):
        extra["box_score_thresh"] = 0.0
    return torchvision.models.get_model(
        name, weights=None, weights_backbone=None, num_classes=91, **extra
    )


def family_of(name: str) -> str:
    """``ssd300_vgg16`` -> ``ssd``, ``ssdlite320_mobilenet_v3_large`` -> ``ssdlite``."""
    return name.split("_", 1)[0].rstrip("0123456789")


class Detector(torch.nn.Module):
    """A torchvision detector without its resize/normalise transform (see the module's doc)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.family = family_of(name)
        self.detector = detection_network(name)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        net = self.detector
        features = net.backbone(images)
        if self.family in ONE_STAGE:
            return self._candidates(net.head(list(features.values())))
        from torchvision.models.detection.image_list import ImageList

        size = (images.shape[-2], images.shape[-1])
        listed = ImageList(images, [size] * images.shape[0])
        proposals, _ = net.rpn(listed, features)
        detections, _ = net.roi_heads(features, proposals, listed.image_sizes)
        return torch.stack([_packed(d, net.roi_heads.detections_per_img) for d in detections])

    def _candidates(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = heads["cls_logits"]
        if self.family == "fcos":
            scores = torch.sqrt(torch.sigmoid(logits) * torch.sigmoid(heads["bbox_ctrness"]))
        elif self.family == "retinanet":
            scores = torch.sigmoid(logits)
        else:  # SSD: class 0 is the background
            scores = torch.softmax(logits, dim=-1)[..., 1:]
        classes = scores.shape[-1]
        flat = scores.flatten(1)
        best, index = flat.topk(min(self.detector.topk_candidates, flat.shape[1]), dim=1)
        anchor = torch.div(index, classes, rounding_mode="floor")
        label = index % classes + (1 if self.family in ("ssd", "ssdlite") else 0)
        codes = heads["bbox_regression"].gather(1, anchor[..., None].expand(-1, -1, 4))
        columns = [best[..., None], label[..., None], anchor[..., None]]
        return torch.cat([codes, *(c.to(codes.dtype) for c in columns)], dim=-1)


def _packed(detection: dict[str, torch.Tensor], rows: int) -> torch.Tensor:
    """One image's detections as ``rows`` fixed rows (padding: score -1)."""
    boxes = detection["boxes"]
    columns = [boxes, detection["scores"][:, None], detection["labels"][:, None].to(boxes.dtype)]
    if "masks" in detection:
        columns.append(detection["masks"].flatten(1).to(boxes.dtype))
    kept = torch.cat(columns, dim=1)[:rows]
    padding = kept.new_zeros(rows - kept.shape[0], kept.shape[1])
    padding[:, 4] = -1.0
    return torch.cat([kept, padding])


class Segmenter(torch.nn.Module):
    """A torchvision segmentation network's class logits at its output stride."""

    def __init__(self, name: str) -> None:
        super().__init__()
        import torchvision

        self.segmenter = torchvision.models.get_model(
            name, weights=None, weights_backbone=None, num_classes=21
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        net = self.segmenter
        features = net.backbone(images)
        if hasattr(net, "aux_classifier"):  # DeepLabV3, FCN: the head reads the last stage
            return net.classifier(features["out"])
        return net.classifier(features)  # LR-ASPP: the head reads two stages
