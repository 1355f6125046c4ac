"""Each task's pre- and post-processing, shared by every framework so that all see the same input
tensor and turn the same outputs into the same answer.

    preprocess.py    raw samples to the model's input tensor (resize, crop, normalise)
    postprocess.py   network outputs to the ``k`` best classes and scores, one step a span
    vision_tasks.py  torchvision's detectors and segmenters as the pipeline runs them: the
                     network alone, its pre- and post-processing left to the two modules above
"""
