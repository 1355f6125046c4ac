"""Benanza's performance database: layer benchmarks kept in the object store, one object per
(device, library stack, layer configuration), so that a second model with the same layers, or
the same model again, reuses them instead of benchmarking.

Keys: ``perfdb/<device>/<stack>/<config>.json``, where the stack is a digest of the library
versions the timings depend on (``layer_bench.library_stack``), the repeats asked for and the
timing method (``timing.METHOD``).
"""

from __future__ import annotations

import hashlib
import json
import re

from mlms.bounds.layer_bench import LayerBench
from mlms.bounds.timing import METHOD
from mlms.store.base import ObjectStore

PREFIX = "perfdb/"


class PerfDB:
    def __init__(
        self,
        store: ObjectStore,
        device: str,
        libraries: dict[str, str],
        precisions: list[str],
        repeats: int,
    ) -> None:
        self.store = store
        stack = json.dumps(
            {
                "libraries": libraries,
                "precisions": sorted(precisions),
                "repeats": repeats,
                "method": METHOD,
            },
            sort_keys=True,
        )
        slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"
        self.prefix = f"{PREFIX}{slug}/{hashlib.sha256(stack.encode()).hexdigest()[:16]}/"

    def get(self, key: str) -> LayerBench | None:
        path = f"{self.prefix}{key}.json"
        if not self.store.exists(path):
            return None
        return LayerBench.model_validate_json(self.store.get_bytes(path))

    def put(self, bench: LayerBench) -> None:
        self.store.put_bytes(f"{self.prefix}{bench.key}.json", bench.model_dump_json().encode())
