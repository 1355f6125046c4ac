"""Kernel names as people read them: demangled, without template and parameter lists."""

from __future__ import annotations

import cxxfilt


def short_kernel_name(name: str, limit: int = 60) -> str:
    """The demangled function name without its template and parameter lists, at most ``limit``."""
    text = _demangle(name) if name.startswith("_Z") else name
    depth, kept = 0, []
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif depth == 0:
            kept.append(char)
    bare = "".join(kept).split(" ")[-1] or text  # drop a return type ("void ")
    return bare if len(bare) <= limit else bare[: limit - 1] + "…"


def _demangle(name: str) -> str:
    try:
        return cxxfilt.demangle(name, external_only=False)
    except cxxfilt.InvalidName:
        return name
