"""The words an evaluation query may use: sort keys, page sizes and named views. Plain data, so
that the CLI names them in its options without loading the query's models."""

from __future__ import annotations

#: The orders a listing takes ("-" before one: descending). ``accuracy`` orders by the headline
#: metric from worse to better, whichever way the task counts better (lower perplexity is
#: better): ``-accuracy`` lists the best first. Headlines of different tasks do not compare, so
#: it goes with a task filter.
SORT_KEYS = ("created", "p50", "throughput", "accuracy", "model", "framework")
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 50
#: The named views: the best p50 per model, hardware and batch size; a model's p50 per
#: framework version (the regression view).
VIEWS = ("best_p50", "framework_versions")
