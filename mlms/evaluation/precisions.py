"""The numeric precisions an evaluation or a bound may ask for (a light module: the CLI's options
name them at start)."""

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
