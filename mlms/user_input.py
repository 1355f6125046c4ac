"""What a person types, checked the same way by every front end (the CLI, the web UI): one
line naming the bad value and what was expected."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from mlms.errors import InvalidArgument
from mlms.reasons import one_line


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,8,32"`` -> [1, 8, 32]; anything else names the bad part."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise InvalidArgument(
                f"bad batch size {part!r} in {text!r}: expected positive integers like '1,8,32'"
            )
        sizes.append(int(part))
    return sizes


Model = TypeVar("Model", bound=BaseModel)


def validated(cls: type[Model], /, **fields: object) -> Model:
    """``cls(**fields)``, or one line naming the first bad field."""
    try:
        return cls(**fields)
    except ValidationError as exc:
        raise InvalidArgument(f"bad value for {one_line(exc)}") from None
