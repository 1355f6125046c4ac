"""The numeric precisions an evaluation or a bound may ask for (a light module: the CLI's options
name them at start)."""

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def check_precisions(value: list[str] | None) -> list[str] | None:
    """A request's list of precisions (None: the device's own), each one of PRECISIONS."""
    if value is not None:
        unknown = [p for p in value if p not in PRECISIONS]
        if unknown or not value:
            raise ValueError(
                f"precision {', '.join(unknown) or '(none)'}: expected some of "
                f"{', '.join(PRECISIONS)}"
            )
    return value
