"""A stored data set read back in batches, one shard at a time.

Each shard is fetched into the local cache once (keyed by its sha256) and verified on every
open; rows are read a Parquet row group at a time, so memory holds one row group and one batch,
never the data set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlms.assets.manager import sha256_of
from mlms.datasets.index import DatasetIndex, Shard
from mlms.errors import ChecksumMismatch
from mlms.store.base import ObjectStore


class DatasetStream:
    def __init__(self, store: ObjectStore, index: DatasetIndex, cache_dir: Path) -> None:
        self._store, self.index, self._cache = store, index, cache_dir / "datasets"

    def batches(self, batch_size: int, limit: int | None = None) -> Iterator[Any]:
        """pyarrow RecordBatches of ``batch_size`` rows (the last may hold fewer), at most
        ``limit`` of them."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        pending: list[Any] = []
        held = produced = 0
        for shard in self.index.shards:
            with pq.ParquetFile(self._local(shard)) as source:
                for part in source.iter_batches(batch_size=batch_size):
                    pending.append(part)
                    held += part.num_rows
                    while held >= batch_size:
                        table = pa.Table.from_batches(pending)
                        yield table.slice(0, batch_size).combine_chunks().to_batches()[0]
                        produced += 1
                        if limit is not None and produced >= limit:
                            return
                        rest = table.slice(batch_size)
                        pending, held = rest.to_batches(), rest.num_rows
        if held:
            yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]

    def _local(self, shard: Shard) -> Path:
        path = self._cache / f"{shard.sha256}.parquet"
        if not path.is_file():
            self._store.get_file(shard.key, path)
        actual = sha256_of(path)
        if actual != shard.sha256:
            path.unlink(missing_ok=True)
            raise ChecksumMismatch(
                f"data set {self.index.name!r} shard {shard.key!r} has sha256 {actual[:16]}..., "
                f"its index says {shard.sha256[:16]}...; add the data set again"
            )
        return path
