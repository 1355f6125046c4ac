"""The numeric precisions an evaluation or a bound may ask for (a light module: the CLI's options
name them at start)."""

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
#: How far a precision narrows the arithmetic from fp32: tf32 computes on tensor cores from
#: fp32 storage, fp16 and bf16 on tensor cores from two-byte storage. Precisions of one rank
#: run the same kernels on a GPU, in another number format.
NARROWNESS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 2}


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
