"""mlms: evaluate and profile machine-learning models across frameworks and hardware."""

__version__ = "0.1.0"
