"""Each task's accuracy on a labelled data set, by the field's reference library.

- ``scorer``: the interface a pass over a data set feeds (the task's post-processing on the
  measured path, the scoring on a thread of its own) and the choice of scorer by task;
- ``classification``: top-1 and top-5;
- ``detection``: COCO mAP@[.5:.95], mAP@.5, mAP@.75 and AR by pycocotools;
- ``segmentation``: mIoU and pixel accuracy by torchmetrics;
- ``language``: perplexity from the model's log-likelihoods, by torchmetrics;
- ``translation``: BLEU and chrF by sacrebleu, on the model's greedy translations.
"""
