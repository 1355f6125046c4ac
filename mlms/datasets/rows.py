"""What a data-set source yields to the shard writer (``mlms.datasets.ingest``)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

#: Rows a Parquet row group holds: a reader decodes one group at a time.
ROW_GROUP = 256


@dataclass
class Rows:
    """A few rows as columns, and the files among them that could not be read."""

    columns: dict[str, Any]
    bad: list[str] = field(default_factory=list)


def decoded_image(data: bytes) -> Any | None:
    """The PIL image of an encoded file, fully decoded, or None where PIL cannot read it."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.copy()
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError):
        return None


def short(value: Any) -> str:
    """A value as a message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
