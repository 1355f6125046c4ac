"""The words an evaluation query may use: sort keys, page sizes and named views. Plain data, so
that the CLI names them in its options without loading the query's models."""

from __future__ import annotations

#: The orders a listing takes ("-" before one: descending).
SORT_KEYS = ("created", "p50", "throughput", "model", "framework")
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 50
#: The named views: the best p50 per model, hardware and batch size; a model's p50 per
#: framework version (the regression view).
VIEWS = ("best_p50", "framework_versions")
