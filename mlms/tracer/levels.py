"""Trace levels: the MLModelScope enum (docs/DESIGN.md, "Trace levels")."""

from __future__ import annotations

from enum import IntEnum

from mlms.errors import InvalidArgument


class TraceLevel(IntEnum):
    NO_TRACE = 0
    APPLICATION = 1
    MODEL = 2
    FRAMEWORK = 3
    ML_LIBRARY = 4
    SYSTEM_LIBRARY = 5
    HARDWARE = 6
    FULL = 7

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | TraceLevel) -> TraceLevel:
        """Accept a level by enum, number or case-insensitive name ("framework", "FULL", "3")."""
        if isinstance(value, TraceLevel):
            return value
        number_like = isinstance(value, int) and not isinstance(value, bool)
        if number_like or (isinstance(value, str) and value.isascii() and value.isdigit()):
            number = int(value)
            if number in cls._value2member_map_:
                return cls(number)
        elif isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        names = ", ".join(level.label for level in cls)
        raise InvalidArgument(f"unknown trace level {value!r}; expected one of: {names}")
